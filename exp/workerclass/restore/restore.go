/*
Copyright 2026 The Cozystack Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package restore is the published restore interface of the seed's
// rollback section: it writes a classified Talos pool's effective settings
// into the legacy (classless) pool field layout, so a chart without class
// support renders the same workers.
//
// It refuses what the legacy layout cannot carry: Kairos pools (migrate
// their workloads and remove them before reverting) and class settings
// with no pool field (for example a ConfigDrive datasource). Every
// conversion is checked by resolving the legacy layout again, as a
// classless Talos pool, and comparing content hashes.
package restore

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
)

// ErrKairos is returned for Kairos pools, which have no legacy layout.
var ErrKairos = errors.New("a Kairos pool has no legacy (classless) layout: an older chart would interpret it as Talos; migrate its workloads and remove the pool before reverting")

// LegacyPool returns a copy of pool in the legacy field layout: no class
// name or class label, and every effective Talos setting of res written
// into the pool's own fields. platform and substrate are those res was
// resolved with; they are used to verify the conversion.
func LegacyPool(pool *unstructured.Unstructured, res *resolve.Result, platform *workerclassv1.WorkerPlatformSpec, substrate resolve.Substrate) (*unstructured.Unstructured, error) {
	if res.Bootstrap != workerclassv1.BootstrapTalos || res.Talos == nil {
		return nil, ErrKairos
	}
	out := pool.DeepCopy()
	for _, f := range [][]string{{"metadata", "resourceVersion"}, {"metadata", "uid"}, {"metadata", "generation"},
		{"metadata", "creationTimestamp"}, {"metadata", "managedFields"}, {"status"}, {"spec", admission.ClassNameField}} {
		unstructured.RemoveNestedField(out.Object, f...)
	}
	if labels := out.GetLabels(); labels != nil {
		delete(labels, workerclassv1.WorkerClassLabel)
		if len(labels) == 0 {
			labels = nil
		}
		out.SetLabels(labels)
	}

	settings, err := legacySettings(res)
	if err != nil {
		return nil, err
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&settings)
	if err != nil {
		return nil, fmt.Errorf("encoding the legacy settings: %w", err)
	}
	spec, _, err := unstructured.NestedMap(out.Object, "spec")
	if err != nil {
		return nil, fmt.Errorf("reading the pool's spec: %w", err)
	}
	if spec == nil {
		spec = map[string]any{}
	}
	for _, key := range []string{"talos", "kernelModules", "registryMirrors", "osImage", "proxmox"} {
		delete(spec, key)
	}
	for key, value := range fields {
		spec[key] = value
	}
	out.Object["spec"] = spec

	if err := verify(out, res, platform, substrate); err != nil {
		return nil, err
	}
	return out, nil
}

// legacySettings writes every effective value explicitly, [] and {}
// included, so the legacy render depends on no class or rule.
func legacySettings(res *resolve.Result) (workerclassv1.PoolSettings, error) {
	t := res.Talos
	s := workerclassv1.PoolSettings{
		Talos: &workerclassv1.TalosScalars{
			Version:             &t.Version,
			SchematicID:         &t.SchematicID,
			ImageFactoryURL:     &t.ImageFactoryURL,
			ImageFactoryCA:      &t.ImageFactoryCA,
			InstallerRepository: &t.InstallerRepository,
		},
		KernelModules:   t.KernelModules,
		RegistryMirrors: t.RegistryMirrors,
	}
	if s.KernelModules == nil {
		s.KernelModules = []workerclassv1.KernelModule{}
	}
	if s.RegistryMirrors == nil {
		s.RegistryMirrors = map[string]workerclassv1.RegistryMirror{}
	}
	switch img := res.Image; {
	case img.Clone != nil:
		s.OSImage = &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{Version: t.Version, SchematicID: t.SchematicID}}
	case img.HTTPImport != nil:
		s.OSImage = &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{Version: t.Version, SchematicID: t.SchematicID,
			Endpoint: factoryEndpoint(img.HTTPImport.URL)}}
	case img.ProxmoxTemplate != nil:
		s.Proxmox = &workerclassv1.ProxmoxOverrides{TemplateTags: img.ProxmoxTemplate.Tags}
	default:
		return s, fmt.Errorf("the resolved image has no source the legacy layout can name")
	}
	return s, nil
}

// factoryEndpoint cuts a factory disk URL at "/image/".
func factoryEndpoint(url string) string {
	if i := strings.LastIndex(url, "/image/"); i >= 0 {
		return url[:i]
	}
	return url
}

// verify resolves the legacy layout as a classless Talos pool (the
// built-in talos class, which has an empty baseline) and requires the same
// content hash.
func verify(legacy *unstructured.Unstructured, res *resolve.Result, platform *workerclassv1.WorkerPlatformSpec, substrate resolve.Substrate) error {
	pool, errs := admission.PoolFromObject(legacy.Object)
	if len(errs) > 0 {
		return fmt.Errorf("reading the legacy layout back: %w", errs.ToAggregate())
	}
	bare := &workerclassv1.WorkerClass{Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}}
	bare.Name = workerclassv1.TalosClassName
	again, errs := resolve.Resolve(resolve.Input{Class: bare, Pool: pool.Settings, Platform: platform, Substrate: substrate})
	if len(errs) > 0 {
		return fmt.Errorf("the legacy layout does not resolve: %w", errs.ToAggregate())
	}
	switch {
	case again.CloudInitDatasource != res.CloudInitDatasource:
		return fmt.Errorf("the class delivers bootstrap data by %s; a classless pool always uses %s, so the legacy layout cannot reproduce it",
			res.CloudInitDatasource, again.CloudInitDatasource)
	case again.Hash != res.Hash:
		return fmt.Errorf("the legacy layout resolves to content hash %s, not the pool's %s", again.Hash, res.Hash)
	}
	return nil
}
