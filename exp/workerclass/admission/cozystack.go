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

package admission

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// CozystackTalosDefaults are the schema defaults of Cozystack's
// KubernetesNodes spec.talos, as packages/apps/kubernetes-nodes/values.schema.json
// of cozystack/cozystack states them at commit
// 3c780acd417f086f8f18d040d0d7020ff55d3ba3 (and registryMirrors: {}).
// Cozystack's aggregated apiserver writes them into every pool that leaves
// a field out, so a pool holding one says nothing about the tenant's
// choice. Update them with the commit when Cozystack changes its defaults.
var CozystackTalosDefaults = workerclassv1.TalosScalars{
	Version:             ptrTo("v1.13.6"),
	SchematicID:         ptrTo("ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"),
	ImageFactoryURL:     ptrTo("https://factory.talos.dev"),
	InstallerRepository: ptrTo("factory.talos.dev/installer"),
}

func ptrTo(s string) *string { return &s }

// ClassSettings are the settings a classified pool is validated and
// resolved with, and the ones a pool's KubeVirtMachineTemplate carries in
// spec.template.spec.workerClass: Settings, with a Talos setting equal to
// Cozystack's schema default read as not supplied. The seed's "an
// explicitly supplied pool value replaces the baseline" cannot hold for a
// value the apiserver wrote in the tenant's place: read as supplied,
// Cozystack's defaults would override every class baseline (a hoster's
// factory, schematic or mirrors) and make every Kairos pool hold
// "nonempty Talos settings". Read as not supplied, the class's value
// applies, then the platform's; a tenant who wants exactly Cozystack's
// default over a class that says otherwise selects another class.
// Settings itself stays as written: a classless pool is Cozystack's chart's
// to render, and it renders its defaults.
func (p *Pool) ClassSettings() workerclassv1.PoolSettings {
	s := *p.Settings.DeepCopy()
	if p.mirrorsDefaulted {
		s.RegistryMirrors = nil
	}
	if t := s.Talos; t != nil {
		d := &CozystackTalosDefaults
		for _, f := range []struct {
			value **string
			def   *string
		}{
			{&t.Version, d.Version}, {&t.SchematicID, d.SchematicID},
			{&t.ImageFactoryURL, d.ImageFactoryURL}, {&t.InstallerRepository, d.InstallerRepository},
		} {
			if *f.value != nil && **f.value == *f.def {
				*f.value = nil
			}
		}
		if *t == (workerclassv1.TalosScalars{}) {
			s.Talos = nil
		}
	}
	return s
}

// pathsAsWritten names spec.talos.registryMirrors, where the pool wrote
// its mirrors, in errors that validation and resolution report at
// spec.registryMirrors, where PoolSettings holds them.
func (p *Pool) pathsAsWritten(errs field.ErrorList) field.ErrorList {
	if !p.mirrorsAtTalos {
		return errs
	}
	from := specPath.Child(registryMirrorsField).String()
	to := specPath.Child(talosField, registryMirrorsField).String()
	for _, e := range errs {
		if rest, ok := strings.CutPrefix(e.Field, from); ok && (rest == "" || rest[0] == '[' || rest[0] == '.') {
			e.Field = to + rest
		}
	}
	return errs
}
