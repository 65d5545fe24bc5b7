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

package kairosconfig

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/contract"
	"github.com/cozystack/cluster-api-workers/internal/nodelabels"
)

// fieldPath is the path of an unstructured field, for messages.
func fieldPath(fields []string) *field.Path {
	return field.NewPath(fields[0], fields[1:]...)
}

// templateClass is what an infrastructure machine template says about the
// WorkerClass its machines boot, and whether its resolution decides what
// its machines' nodes are labelled with.
type templateClass struct {
	// Source names the template, for messages ("Kind name").
	Source string
	// WorkerClass is the class the template was resolved from
	// (status.resolved.workerClassName) or, before that, the one it names
	// (spec.template.spec.workerClass.name); empty for a classless
	// template.
	WorkerClass string
	// Resolved says whether status.resolved has been written.
	Resolved bool
	// Bootstrap is the class's bootstrap family
	// (status.resolved.bootstrap), which the infrastructure provider
	// freezes from the WorkerClass's spec.bootstrap; empty when the
	// template declares none.
	Bootstrap workerclassv1.BootstrapFamily
	// MayAttachGPUs says whether the template's machines list GPUs
	// (spec.template.spec.gpus) or use an instancetype, which may attach
	// some: its resolution writes status.nodeLabels with their GPU type.
	MayAttachGPUs bool
}

// templateClassFrom reads a template's WorkerClass and bootstrap family, by
// the field paths of the providers' contract (internal/contract); another
// provider's template that has the same fields pairs too.
func templateClassFrom(template *unstructured.Unstructured) (templateClass, error) {
	c := templateClass{Source: template.GetKind() + " " + template.GetName()}
	var specClass, resolvedClass, bootstrap string
	for _, f := range []struct {
		fields []string
		into   *string
	}{
		{contract.TemplateWorkerClassField, &specClass},
		{contract.ResolvedWorkerClassField, &resolvedClass},
		{contract.ResolvedBootstrapField, &bootstrap},
	} {
		v, _, err := unstructured.NestedString(template.Object, f.fields...)
		if err != nil {
			return templateClass{}, fmt.Errorf("reading %s of %s: %w", fieldPath(f.fields), c.Source, err)
		}
		*f.into = v
	}
	resolved, found, err := unstructured.NestedFieldNoCopy(template.Object, contract.ResolvedField...)
	if err != nil {
		return templateClass{}, fmt.Errorf("reading %s of %s: %w", fieldPath(contract.ResolvedField), c.Source, err)
	}
	c.Resolved = found && resolved != nil
	for _, f := range [][]string{contract.TemplateGPUsField, contract.TemplateInstancetypeField} {
		v, found, err := unstructured.NestedFieldNoCopy(template.Object, f...)
		if err != nil {
			return templateClass{}, fmt.Errorf("reading %s of %s: %w", fieldPath(f), c.Source, err)
		}
		if list, isList := v.([]any); found && v != nil && (!isList || len(list) > 0) {
			c.MayAttachGPUs = true
		}
	}
	c.Bootstrap = workerclassv1.BootstrapFamily(bootstrap)
	c.WorkerClass = resolvedClass
	if c.WorkerClass == "" {
		c.WorkerClass = specClass
	}
	return c, nil
}

// awaitingResolution says whether the template has yet to resolve what
// the KairosConfig needs: the WorkerClass it names (until then the class's
// family is unknown, and a rendering, and its token, could be for a disk
// that is not Kairos), or the GPUs its machines get (until then the nodes'
// GPU label is unknown, and a rendering is frozen without it).
func (c templateClass) awaitingResolution() bool {
	return (c.WorkerClass != "" || c.MayAttachGPUs) && !c.Resolved
}

// waitingMessage says what awaitingResolution waits for.
func (c templateClass) waitingMessage() string {
	if c.WorkerClass == "" {
		return fmt.Sprintf("Waiting for %s to resolve the GPUs its machines get into %s, to label the nodes with their GPU type",
			c.Source, fieldPath(contract.NodeLabelsField))
	}
	return fmt.Sprintf("Waiting for %s to resolve WorkerClass %s into %s, to check that its workers boot Kairos",
		c.Source, c.WorkerClass, fieldPath(contract.ResolvedField))
}

// templateNodeLabels reads the labels a resolved template gives its
// machines' nodes (status.nodeLabels, the infrastructure provider's
// cluster-api/accelerator for GPU machines). They pass the rule the
// config's own nodeLabels pass at admission (nodelabels.Validate): whoever
// holds the template's status subresource writes them, and they end in
// the same kubelet flag. A label that fails it is a refusal, returned as
// its message: the kubelet would refuse it and the node never register,
// and a label a kubelet may not set on itself is not the template's to
// give.
func templateNodeLabels(template *unstructured.Unstructured) (map[string]string, string, error) {
	labels, _, err := unstructured.NestedStringMap(template.Object, contract.NodeLabelsField...)
	if err != nil {
		return nil, "", fmt.Errorf("reading %s of %s %s: %w", fieldPath(contract.NodeLabelsField), template.GetKind(), template.GetName(), err)
	}
	if errs := nodelabels.Validate(labels, fieldPath(contract.NodeLabelsField)); len(errs) > 0 {
		return nil, fmt.Sprintf("%s %s gives its nodes labels the config's own nodeLabels may not have: %s", template.GetKind(), template.GetName(), errs.ToAggregate()), nil
	}
	return labels, "", nil
}

// familyMismatch returns why a KairosConfig cannot bootstrap the template's
// machines: the class boots another OS family (Talos, say), whose disk
// never runs a Kairos cloud-config. Empty when the pairing is fine,
// including a template that declares no family (classless, or another
// provider's): there is nothing to compare then.
func (c templateClass) familyMismatch() string {
	if c.Bootstrap == "" || c.Bootstrap == workerclassv1.BootstrapKairos {
		return ""
	}
	subject := c.Source
	if c.WorkerClass != "" {
		subject += " (WorkerClass " + c.WorkerClass + ")"
	}
	err := field.NotSupported(fieldPath(contract.ResolvedBootstrapField), c.Bootstrap, []workerclassv1.BootstrapFamily{workerclassv1.BootstrapKairos})
	return fmt.Sprintf("%s boots %s workers, not Kairos; a KairosConfig cannot bootstrap them: %s", subject, c.Bootstrap, err.Error())
}
