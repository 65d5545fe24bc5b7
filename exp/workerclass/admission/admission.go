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

// Package admission decides what the KubernetesNodes pool API stores and
// whether it accepts a request, as pure functions over the new and old pool,
// a class getter and a platform getter. It implements the seed's table
// "KubernetesNodes application API":
//
//   - CREATE without a class stores the current platform default, then
//     validates it; CREATE with a class validates that class.
//   - UPDATE of a classless pool without a class stays legacy Talos and
//     never looks up a class or the platform.
//   - UPDATE of a classified pool without a class restores the stored class
//     (a full replace included); empty is not a request to become legacy.
//   - UPDATE selecting another class must keep the bootstrap family and
//     pass resolution.
//
// Where it validates a pool it also refuses class-relevant fields it
// cannot read as written, resolves on the substrate the pool names, and
// refuses a Kubernetes minor newer than the parent cluster's control
// plane where that version is known ("upgrade the parent control-plane
// minor first"). AdmitObjects is the entry point for pool objects, shared
// by the webhooks and the workerclass command.
package admission

import (
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
)

// Operation is the admission operation.
type Operation string

const (
	// Create is a pool's creation.
	Create Operation = "CREATE"
	// Update is a change of an existing pool.
	Update Operation = "UPDATE"
)

// ClassNameField is the pool field that names the class.
const ClassNameField = "workerClassName"

// ErrNotFound is returned by getters for a missing class, platform or
// parent cluster.
var ErrNotFound = errors.New("not found")

// ErrVersionUnknown is returned by a ControlPlaneVersionGetter when the
// parent cluster exists but its control plane's version cannot be told;
// Admit reports it as a warning and does not check the pool's minor.
var ErrVersionUnknown = errors.New("the control plane's Kubernetes version is not known")

// ClassGetter returns a class by name, or an error wrapping ErrNotFound.
type ClassGetter func(name string) (*workerclassv1.WorkerClass, error)

// PlatformGetter returns the platform configuration, or an error wrapping
// ErrNotFound.
type PlatformGetter func() (*workerclassv1.WorkerPlatformSpec, error)

// ControlPlaneVersionGetter returns the Kubernetes version (such as
// v1.35.6) of the control plane of the pool's parent cluster, named by
// spec.cluster; an error wrapping ErrNotFound when there is no such
// cluster, or wrapping ErrVersionUnknown, saying why, when the cluster
// exists but its control plane's version cannot be told.
type ControlPlaneVersionGetter func(cluster string) (string, error)

// Pool is the class-relevant view of a pool object.
type Pool struct {
	// ClassName is spec.workerClassName; "" when omitted or empty.
	ClassName string
	// Cluster is spec.cluster, the parent cluster; "" when omitted.
	Cluster string
	// Substrate is the substrate spec.substrate names; "" when the pool
	// names none.
	Substrate resolve.Substrate
	Settings  workerclassv1.PoolSettings

	// shape holds, by top-level field, what PoolFromObject could not read
	// as written: unknown fields and values of the wrong type.
	shape map[string]field.ErrorList
	// written holds the fields PoolFromObject read, as written, so an
	// UPDATE that changes only what Settings cannot hold is noticed.
	written map[string]any
	// mirrorsAtTalos is set when Settings.RegistryMirrors was read from
	// spec.talos.registryMirrors, and mirrorsDefaulted when that was
	// Cozystack's schema default, {}.
	mirrorsAtTalos, mirrorsDefaulted bool
}

// Request is one admission request.
type Request struct {
	Operation Operation
	// Old is the stored pool on UPDATE, nil on CREATE.
	Old      *Pool
	New      Pool
	Classes  ClassGetter
	Platform PlatformGetter
	// ControlPlaneVersion tells the parent cluster's control-plane
	// version; nil where it is not known, and the pool's minor is not
	// checked against it.
	ControlPlaneVersion ControlPlaneVersionGetter
	// Substrate is the substrate of pools that name none; "" is KubeVirt.
	Substrate resolve.Substrate
}

// Decision is what the pool must store.
type Decision struct {
	// ClassName is the class the pool stores; "" for a legacy pool.
	ClassName string
	// Defaulted means ClassName came from the platform default.
	Defaulted bool
	// Restored means ClassName is the stored class put back.
	Restored bool
	// Result is the resolution of a classified pool whose class-relevant
	// settings were validated; nil when nothing needed resolving.
	Result *resolve.Result
	// Substrate is the substrate the pool was resolved on.
	Substrate resolve.Substrate
	// Warnings are checks that could not run, for the requester.
	Warnings []string
}

// Legacy reports whether the pool stays on the classless Talos path.
func (d Decision) Legacy() bool { return d.ClassName == "" }

var specPath = field.NewPath("spec")

// Admit applies the pool API's table and returns the decision or the
// field errors that refuse the request. Lookup failures other than "not
// found" are field.InternalError, so callers can tell them apart.
func Admit(req Request) (Decision, field.ErrorList) {
	classPath := specPath.Child(ClassNameField)
	var d Decision
	var oldFamily workerclassv1.BootstrapFamily
	switch req.Operation {
	case Create:
		d.ClassName = req.New.ClassName
		if d.ClassName == "" {
			platform, err := req.Platform()
			switch {
			case errors.Is(err, ErrNotFound) || err == nil && platform.DefaultClass == "":
				return d, field.ErrorList{field.Required(classPath, "no class was given and the platform configuration names no default class")}
			case err != nil:
				return d, field.ErrorList{field.InternalError(classPath, fmt.Errorf("reading the platform configuration: %w", err))}
			}
			d.ClassName, d.Defaulted = platform.DefaultClass, true
		}
	case Update:
		if req.Old == nil {
			return d, field.ErrorList{field.InternalError(specPath, errors.New("an UPDATE needs the stored pool"))}
		}
		if req.Old.ClassName == "" && req.New.ClassName == "" {
			// A classless pool stays legacy; no class is looked up.
			return d, nil
		}
		d.ClassName = req.New.ClassName
		if d.ClassName == "" {
			d.ClassName, d.Restored = req.Old.ClassName, true
		}
		if d.ClassName == req.Old.ClassName && unchanged(req.Old, &req.New) {
			// Nothing class-relevant changed, so a scale or relabel is
			// never refused because the platform moved on meanwhile.
			return d, nil
		}
		oldFamily = workerclassv1.BootstrapTalos // a legacy pool is Talos
		if req.Old.ClassName != "" && req.Old.ClassName != d.ClassName {
			oldClass, errs := getClass(req.Classes, req.Old.ClassName, classPath, "the stored class")
			if len(errs) > 0 {
				return d, errs
			}
			oldFamily = oldClass.Spec.Bootstrap
		}
	default:
		return d, field.ErrorList{field.NotSupported(field.NewPath("operation"), req.Operation, []Operation{Create, Update})}
	}

	if errs := req.New.shapeErrors(req.Old); len(errs) > 0 {
		return d, errs
	}
	d.Substrate = req.New.Substrate
	if d.Substrate == "" {
		d.Substrate = req.Substrate
	}
	if d.Substrate == "" {
		d.Substrate = resolve.KubeVirt
	}
	class, errs := getClass(req.Classes, d.ClassName, classPath, "the class")
	if len(errs) > 0 {
		return d, errs
	}
	selecting := req.Operation == Create || req.Old.ClassName != d.ClassName
	if selecting && !class.DeletionTimestamp.IsZero() {
		return d, field.ErrorList{field.Forbidden(classPath, fmt.Sprintf("class %s is being deleted; select another class", d.ClassName))}
	}
	if oldFamily != "" && req.Old.ClassName != d.ClassName && class.Spec.Bootstrap != oldFamily {
		return d, field.ErrorList{field.Forbidden(classPath, fmt.Sprintf(
			"switching a running pool from %s to %s in place is refused; create a second pool, verify worker join and workloads, then plan the migration",
			classAndFamily(req.Old.ClassName, oldFamily), classAndFamily(d.ClassName, class.Spec.Bootstrap)))}
	}

	settings := req.New.ClassSettings()
	errs = validation.ValidatePoolSettings(&settings, specPath)
	errs = append(errs, validation.ValidateSSHKeys(class.Spec.Bootstrap, settings.SSHKeys, specPath.Child("sshKeys"))...)
	if len(errs) > 0 {
		return d, req.New.pathsAsWritten(errs)
	}
	platform, err := req.Platform()
	switch {
	case errors.Is(err, ErrNotFound):
		platform = nil
	case err != nil:
		return d, field.ErrorList{field.InternalError(specPath, fmt.Errorf("reading the platform configuration: %w", err))}
	}
	res, errs := resolve.Resolve(resolve.Input{Class: class, Pool: settings, Platform: platform, Substrate: d.Substrate, Path: specPath})
	if len(errs) > 0 {
		return d, req.New.pathsAsWritten(errs)
	}
	if errs := checkControlPlane(req, &d); len(errs) > 0 {
		return d, errs
	}
	d.Result = res
	return d, nil
}

// AdmitObjects is Admit over pool objects' content (unstructured maps), as
// the pool webhooks receive them and the workerclass command reads them:
// obj is the pool as written, old the stored pool on UPDATE. req's getters
// and default substrate are used; its Old and New are read from the
// objects with PoolFromObject.
func AdmitObjects(req Request, obj, old map[string]any) (Decision, field.ErrorList) {
	newPool, errs := PoolFromObject(obj)
	if len(errs) > 0 {
		return Decision{}, errs
	}
	req.New, req.Old = newPool, nil
	if req.Operation == Update {
		oldPool, errs := PoolFromObject(old)
		if len(errs) > 0 {
			return Decision{}, errs
		}
		req.Old = &oldPool
	}
	return Admit(req)
}

// unchanged reports whether an UPDATE leaves every class-relevant field as
// stored.
func unchanged(old, p *Pool) bool {
	return old.Cluster == p.Cluster && old.Substrate == p.Substrate &&
		reflect.DeepEqual(old.Settings, p.Settings) && reflect.DeepEqual(old.written, p.written)
}

// checkControlPlane applies "Upgrade the parent control-plane minor
// first": a pool that selects a minor (a CREATE, or an UPDATE changing its
// version or cluster) may not select one newer than the control plane of
// its cluster, where that version is known.
func checkControlPlane(req Request, d *Decision) field.ErrorList {
	if req.ControlPlaneVersion == nil || req.New.Cluster == "" {
		return nil
	}
	if req.Operation == Update && req.Old.Settings.Version == req.New.Settings.Version && req.Old.Cluster == req.New.Cluster {
		return nil
	}
	version, err := req.ControlPlaneVersion(req.New.Cluster)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case errors.Is(err, ErrVersionUnknown):
		d.Warnings = append(d.Warnings, fmt.Sprintf("spec.version was not checked against cluster %s's control plane: %v", req.New.Cluster, err))
		return nil
	case err != nil:
		return field.ErrorList{field.InternalError(specPath.Child(ClusterField), fmt.Errorf("reading cluster %s's control plane: %w", req.New.Cluster, err))}
	}
	cpMajor, cpMinor, ok := validation.ParseSemver(version)
	if !ok {
		d.Warnings = append(d.Warnings, fmt.Sprintf("spec.version was not checked against cluster %s's control plane: its version %q is not a Kubernetes release", req.New.Cluster, version))
		return nil
	}
	// Resolution accepted the pool's version, so it parses.
	major, minor, _ := validation.ParseMinor(req.New.Settings.Version)
	if major > cpMajor || major == cpMajor && minor > cpMinor {
		return field.ErrorList{field.Invalid(specPath.Child("version"), req.New.Settings.Version, fmt.Sprintf(
			"upgrade the parent control-plane minor first: cluster %s's control plane runs Kubernetes %s, so a pool may select v%d.%d or an older minor",
			req.New.Cluster, version, cpMajor, cpMinor))}
	}
	return nil
}

func getClass(get ClassGetter, name string, path *field.Path, what string) (*workerclassv1.WorkerClass, field.ErrorList) {
	class, err := get(name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, field.ErrorList{field.NotFound(path, name)}
	case err != nil:
		return nil, field.ErrorList{field.InternalError(path, fmt.Errorf("reading %s %s: %w", what, name, err))}
	case class == nil:
		return nil, field.ErrorList{field.NotFound(path, name)}
	}
	return class, nil
}

// classAndFamily names a pool's class and its bootstrap family for a
// message; a legacy pool has no class.
func classAndFamily(class string, family workerclassv1.BootstrapFamily) string {
	if class == "" {
		return fmt.Sprintf("no class (bootstrap family %s)", family)
	}
	return fmt.Sprintf("class %s (bootstrap family %s)", class, family)
}
