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

// Package nodelabels holds the one rule for the labels a worker's kubelet
// registers its Node with (--node-labels), wherever they come from: a
// KairosConfig's own spec.nodeLabels, at admission, and the labels an
// infrastructure template's status gives its machines' nodes, before they
// are rendered. Both end in the same kubelet flag, so both pass the same
// rule: status is writable by whoever holds the status subresource.
package nodelabels

import (
	"strings"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// Validate checks label syntax and refuses a label a kubelet may not set on
// its own Node: the kubelet refuses to start with one in --node-labels, so
// the node would never register. Errors carry field paths under fldPath.
func Validate(labels map[string]string, fldPath *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabels(labels, fldPath)
	for key := range labels {
		if !KubeletMaySet(key) {
			errs = append(errs, field.Invalid(fldPath.Key(key), key,
				"labels in the kubernetes.io and k8s.io namespaces are limited to those a kubelet may set on itself (kubelet.kubernetes.io/*, node.kubernetes.io/* and the well-known topology, os, arch and instance-type labels)"))
		}
	}
	return errs
}

// KubeletMaySet says whether the kubelet accepts key in --node-labels: any
// key outside the kubernetes.io and k8s.io namespaces, and of those only
// the ones NodeRestriction lets a kubelet set on itself
// (kubeletapis.IsKubeletLabel), as the kubelet's own flag validation does.
func KubeletMaySet(key string) bool {
	namespace, _, found := strings.Cut(key, "/")
	if !found {
		return true
	}
	inDomain := func(domain string) bool { return namespace == domain || strings.HasSuffix(namespace, "."+domain) }
	if !inDomain("kubernetes.io") && !inDomain("k8s.io") {
		return true
	}
	return kubeletapis.IsKubeletLabel(key)
}
