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
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
)

// Pool API fields admission reads besides PoolSettings.
const (
	// ClusterField names the pool's parent cluster.
	ClusterField = "cluster"
	// SubstrateField names where the pool's workers run, as Cozystack's
	// Kubernetes application spells it: kubevirt or proxmox.
	SubstrateField = "substrate"
)

// The pool API's substrate values and the engine's substrates they select.
var substrates = map[string]resolve.Substrate{"kubevirt": resolve.KubeVirt, "proxmox": resolve.Proxmox}

// SubstrateValues are the values spec.substrate accepts.
var SubstrateValues = []string{"kubevirt", "proxmox"}

// settingsField is one top-level PoolSettings field.
type settingsField struct {
	index []int
	typ   reflect.Type
}

// settingsFields are PoolSettings' fields by JSON name.
var settingsFields = jsonFields(reflect.TypeFor[workerclassv1.PoolSettings]())

// talosField is the pool field of the Talos scalars, and the field of it
// where Cozystack keeps the registry mirrors.
const (
	talosField           = "talos"
	registryMirrorsField = "registryMirrors"
)

// poolTalos is spec.talos as the pool API holds it: the Talos scalars and,
// where Cozystack keeps them, the registry mirrors the seed writes at the
// top of the pool. Only its shape is checked against it; the scalars are
// read into PoolSettings.Talos and the mirrors into
// PoolSettings.RegistryMirrors.
type poolTalos struct {
	workerclassv1.TalosScalars `json:",inline"`
	RegistryMirrors            map[string]workerclassv1.RegistryMirror `json:"registryMirrors,omitzero"`
}

// shapeTypes are the types a pool field's shape is checked against where
// the pool API holds more than the PoolSettings field it fills.
var shapeTypes = map[string]reflect.Type{talosField: reflect.TypeFor[*poolTalos]()}

// PoolFromObject reads the class name, the parent cluster, the substrate
// and the settings from a pool object's content (an unstructured map).
// Fields of the pool API that admission does not read are left alone; the
// ones it reads are read exactly as written: an unknown field inside them
// or a value of the wrong type is recorded with its field path, and Admit
// refuses it where it validates the pool, instead of dropping it in
// silence (a GPU written as a VirtualMachine's {name, deviceName} would
// otherwise lose its device and its NVIDIA modules without a word). The
// returned errors are the ones nothing can be decided without: a spec that
// is not an object, a class name that is not a string.
func PoolFromObject(obj map[string]any) (Pool, field.ErrorList) {
	var p Pool
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		if raw, present := obj["spec"]; present && raw != nil {
			return p, field.ErrorList{field.Invalid(specPath, field.OmitValueType{}, "spec must be an object")}
		}
		return p, nil
	}
	if raw, present := spec[ClassNameField]; present && raw != nil {
		name, ok := raw.(string)
		if !ok {
			return p, field.ErrorList{field.Invalid(specPath.Child(ClassNameField), raw, "must be a string")}
		}
		p.ClassName = name
	}
	record := func(key string, errs ...*field.Error) {
		if len(errs) == 0 {
			return
		}
		if p.shape == nil {
			p.shape = map[string]field.ErrorList{}
		}
		p.shape[key] = append(p.shape[key], errs...)
	}
	remember := func(key string, value any) {
		if p.written == nil {
			p.written = map[string]any{}
		}
		p.written[key] = value
	}
	if raw, present := spec[ClusterField]; present && raw != nil {
		remember(ClusterField, raw)
		if name, ok := raw.(string); ok {
			p.Cluster = name
		} else {
			record(ClusterField, typeInvalid(specPath.Child(ClusterField), "a string", raw))
		}
	}
	if raw, present := spec[SubstrateField]; present && raw != nil {
		remember(SubstrateField, raw)
		value, ok := raw.(string)
		switch substrate, known := substrates[value]; {
		case !ok:
			record(SubstrateField, typeInvalid(specPath.Child(SubstrateField), "a string", raw))
		case !known:
			record(SubstrateField, field.NotSupported(specPath.Child(SubstrateField), value, SubstrateValues))
		default:
			p.Substrate = substrate
		}
	}
	settings := reflect.ValueOf(&p.Settings).Elem()
	for _, name := range sortedKeys(settingsFields) {
		raw, present := spec[name]
		if !present || raw == nil {
			continue
		}
		remember(name, raw)
		f := settingsFields[name]
		shapeType := f.typ
		if t, ok := shapeTypes[name]; ok {
			shapeType = t
		}
		if errs := checkShape(raw, shapeType, specPath.Child(name)); len(errs) > 0 {
			record(name, errs...)
			if hasTypeError(errs) {
				// The value cannot be read; it stays unset and the
				// recorded errors say why.
				continue
			}
		}
		// Decode the field alone, so one unreadable field leaves the
		// others readable; unknown fields inside it are recorded above.
		var one workerclassv1.PoolSettings
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{name: raw}, &one); err != nil {
			record(name, field.Invalid(specPath.Child(name), field.OmitValueType{}, "does not match its schema: "+err.Error()))
			continue
		}
		settings.FieldByIndex(f.index).Set(reflect.ValueOf(one).FieldByIndex(f.index))
	}
	p.readTalosMirrors(spec, remember, record)
	return p, nil
}

// readTalosMirrors reads spec.talos.registryMirrors, Cozystack's place for
// the seed's spec.registryMirrors, with the same meaning. Given in both
// places, the two must be equal, or the pool is refused naming both
// paths: neither is more the tenant's than the other. Cozystack's schema
// default there ({}) is no choice (it is written into every pool that
// leaves the field out), so beside spec.registryMirrors it is ignored, and
// alone it is read as not supplied (see ClassSettings).
func (p *Pool) readTalosMirrors(spec map[string]any, remember func(string, any), record func(string, ...*field.Error)) {
	talos, _ := spec[talosField].(map[string]any)
	raw, present := talos[registryMirrorsField]
	if !present || raw == nil || hasTypeError(p.shape[talosField]) {
		// Unreadable mirrors are recorded under talos already.
		return
	}
	var one workerclassv1.PoolSettings
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{registryMirrorsField: raw}, &one); err != nil {
		record(talosField, field.Invalid(specPath.Child(talosField, registryMirrorsField), field.OmitValueType{}, "does not match its schema: "+err.Error()))
		return
	}
	mirrors := one.RegistryMirrors
	if mirrors == nil {
		mirrors = map[string]workerclassv1.RegistryMirror{}
	}
	top, topGiven := spec[registryMirrorsField]
	switch {
	case !topGiven || top == nil:
		p.Settings.RegistryMirrors = mirrors
		p.mirrorsAtTalos = true
		p.mirrorsDefaulted = len(mirrors) == 0
	case len(mirrors) == 0 || reflect.DeepEqual(mirrors, p.Settings.RegistryMirrors):
	default:
		// Kept under a key of its own, with both values, so an UPDATE
		// that changes either place is checked again.
		const key = talosField + "." + registryMirrorsField
		remember(key, []any{top, raw})
		record(key, field.Forbidden(specPath.Child(talosField, registryMirrorsField), fmt.Sprintf(
			"differs from %s; Cozystack keeps registry mirrors here, the seed at the top of the pool: give them in one place, or the same mirrors in both",
			specPath.Child(registryMirrorsField))))
	}
}

// shapeErrors returns the fields p could not read as written, except
// those an UPDATE leaves as stored: a value stored before admission read
// it strictly does not block a scale or another field's change.
func (p *Pool) shapeErrors(old *Pool) field.ErrorList {
	var errs field.ErrorList
	for _, key := range sortedKeys(p.shape) {
		if old != nil {
			if stored, ok := old.written[key]; ok && reflect.DeepEqual(stored, p.written[key]) {
				continue
			}
		}
		errs = append(errs, p.shape[key]...)
	}
	return errs
}

// checkShape compares a decoded JSON value with the Go type it must fill
// and reports, with their paths, unknown object fields and values of the
// wrong type. null is "not supplied" anywhere, as JSON decoding reads it.
// Values are never echoed: a pool's sshKeys may hold key material.
func checkShape(v any, t reflect.Type, path *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkShape(v, t.Elem(), path)
	case reflect.String:
		if _, ok := v.(string); !ok {
			return field.ErrorList{typeInvalid(path, "a string", v)}
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return field.ErrorList{typeInvalid(path, "a boolean", v)}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		switch n := v.(type) {
		case int64, int32, int:
		case float64:
			if n != float64(int64(n)) {
				return field.ErrorList{typeInvalid(path, "an integer", v)}
			}
		default:
			return field.ErrorList{typeInvalid(path, "an integer", v)}
		}
	case reflect.Float32, reflect.Float64:
		switch v.(type) {
		case int64, int32, int, float64:
		default:
			return field.ErrorList{typeInvalid(path, "a number", v)}
		}
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return field.ErrorList{typeInvalid(path, "a list", v)}
		}
		var errs field.ErrorList
		for i, item := range list {
			errs = append(errs, checkShape(item, t.Elem(), path.Index(i))...)
		}
		return errs
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok || t.Key().Kind() != reflect.String {
			return field.ErrorList{typeInvalid(path, "an object", v)}
		}
		var errs field.ErrorList
		for _, key := range sortedKeys(m) {
			errs = append(errs, checkShape(m[key], t.Elem(), path.Key(key))...)
		}
		return errs
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return field.ErrorList{typeInvalid(path, "an object", v)}
		}
		fields := jsonFields(t)
		var errs field.ErrorList
		for _, key := range sortedKeys(m) {
			f, known := fields[key]
			if !known {
				errs = append(errs, field.Forbidden(path.Child(key), unknownField(t, fields)))
				continue
			}
			errs = append(errs, checkShape(m[key], f.typ, path.Child(key))...)
		}
		return errs
	default:
		// PoolSettings holds no other kinds (a test walks its type); a
		// kind added later must be taught here.
		return field.ErrorList{field.InternalError(path, fmt.Errorf("cannot check a %s", t.Kind()))}
	}
	return nil
}

// unknownField explains an unknown field: what the object has, and that the
// value would be dropped rather than applied.
func unknownField(t reflect.Type, fields map[string]settingsField) string {
	msg := "unknown field; it would be dropped, not applied. This object has only: " + strings.Join(sortedKeys(fields), ", ")
	if t == reflect.TypeFor[workerclassv1.GPU]() {
		msg += ". A pool's GPU is named by its resource name alone, for example {name: nvidia.com/AD102GL_L40S}; " +
			"a VirtualMachine's {name, deviceName} shape does not apply"
	}
	return msg
}

func typeInvalid(path *field.Path, want string, got any) *field.Error {
	return field.TypeInvalid(path, field.OmitValueType{}, fmt.Sprintf("must be %s, not %s", want, kindOf(got)))
}

func hasTypeError(errs field.ErrorList) bool {
	return slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Type != field.ErrorTypeForbidden })
}

// kindOf names a decoded JSON value's kind without its content.
func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, int32, int, float64, float32:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// jsonFields lists a struct's fields by JSON name, inlined embedded
// structs included, as encoding/json reads them.
func jsonFields(t reflect.Type) map[string]settingsField {
	fields := map[string]settingsField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		inline := slices.Contains(strings.Split(opts, ","), "inline")
		if name == "" && (inline || f.Anonymous) && f.Type.Kind() == reflect.Struct {
			for n, sub := range jsonFields(f.Type) {
				fields[n] = settingsField{index: append([]int{i}, sub.index...), typ: sub.typ}
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = settingsField{index: []int{i}, typ: f.Type}
	}
	return fields
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
