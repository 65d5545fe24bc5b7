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

package kubevirtmachine

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestRefused: a create the API server refuses for what it asks blocks the
// machine with the refusal's words until asked again; a create it failed to
// answer is an error, retried with backoff.
func TestRefused(t *testing.T) {
	vms := schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachines"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a webhook's denial", apierrors.NewForbidden(vms, "w", errors.New("admission webhook denied the request")), true},
		{"a schema violation", apierrors.NewInvalid(schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachine"}, "w", field.ErrorList{field.Invalid(field.NewPath("spec"), "x", "bad")}), true},
		{"strict field validation", apierrors.NewBadRequest(`unknown field "spec.x"`), true},
		{"too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), true},
		{"the namespace is missing in an infrastructure cluster of its own", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "tenant"), true},
		{"a timeout", apierrors.NewTimeoutError("request did not complete", 1), false},
		{"the API server is unavailable", apierrors.NewServiceUnavailable("etcd is down"), false},
		{"a connection error", errors.New("dial tcp 10.0.0.1:6443: connect: connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refused(tt.err); got != tt.want {
				t.Errorf("refused(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
