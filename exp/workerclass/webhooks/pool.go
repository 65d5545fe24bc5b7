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

package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	pooladmission "github.com/cozystack/cluster-api-workers/exp/workerclass/admission"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
)

// Paths of the pool webhooks; config/workerclass/webhook/pool-webhooks.yaml
// registers them with matchConditions.
const (
	PoolMutatePath   = "/mutate-apps-cozystack-io-v1alpha1-kubernetesnodes"
	PoolValidatePath = "/validate-apps-cozystack-io-v1alpha1-kubernetesnodes"
)

// Pool admits KubernetesNodes pools. The pool API is not ours, so it works
// on unstructured objects and reads only the class-relevant fields.
type Pool struct {
	// Reader reads classes, the platform configuration, the pool's
	// Cluster and its control plane. Use an uncached reader: a class
	// created a moment ago must be found.
	Reader client.Reader
	// RESTMapper maps a Cluster's controlPlaneRef (group and kind) to the
	// version to read it at; without one the control plane object is not
	// read.
	RESTMapper meta.RESTMapper
	// Substrate of the pools that name none in spec.substrate; defaults
	// to KubeVirt.
	Substrate resolve.Substrate
	// ClusterName maps a pool's spec.cluster to the name of its Cluster
	// API Cluster in the pool's namespace; nil means the same name.
	ClusterName func(cluster string) string
}

// SetupWebhookWithManager registers the mutating and validating handlers.
func (p *Pool) SetupWebhookWithManager(mgr ctrl.Manager) error {
	if p.Reader == nil {
		p.Reader = mgr.GetAPIReader()
	}
	if p.RESTMapper == nil {
		p.RESTMapper = mgr.GetRESTMapper()
	}
	server := mgr.GetWebhookServer()
	server.Register(PoolMutatePath, &webhook.Admission{Handler: admission.HandlerFunc(p.Mutate)})
	server.Register(PoolValidatePath, &webhook.Admission{Handler: admission.HandlerFunc(p.Validate)})
	return nil
}

// Mutate stores the class the table asks for (the platform default on
// CREATE, the stored class on UPDATE) and labels the pool with it.
func (p *Pool) Mutate(ctx context.Context, req admission.Request) admission.Response {
	obj, decision, resp, done := p.admit(ctx, req)
	if done {
		return resp
	}
	if decision.Legacy() {
		if _, labelled := obj.GetLabels()[workerclassv1.WorkerClassLabel]; !labelled {
			return admission.Allowed("a classless pool stays on the legacy Talos path")
		}
		// A class label on a classless pool would count it as a user of
		// that class and keep the class from being deleted.
		labels := obj.GetLabels()
		delete(labels, workerclassv1.WorkerClassLabel)
		obj.SetLabels(labels)
		return patched(req, obj)
	}
	if err := unstructured.SetNestedField(obj.Object, decision.ClassName, "spec", pooladmission.ClassNameField); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[workerclassv1.WorkerClassLabel] = decision.ClassName
	obj.SetLabels(labels)
	// The validating webhook, which sees the final object, reports the
	// decision's warnings; reporting them here too would repeat them.
	return patched(req, obj)
}

// patched answers a request with the patch from its object to obj.
func patched(req admission.Request, obj *unstructured.Unstructured) admission.Response {
	mutated, err := json.Marshal(obj.Object)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, mutated)
}

// Validate re-checks the final object: a classified pool must store its
// class and carry the matching label, which the mutating webhook ensures.
func (p *Pool) Validate(ctx context.Context, req admission.Request) admission.Response {
	obj, decision, resp, done := p.admit(ctx, req)
	if done {
		return resp
	}
	if decision.Legacy() {
		if label, labelled := obj.GetLabels()[workerclassv1.WorkerClassLabel]; labelled {
			return denied(obj.GetName(), field.ErrorList{field.Forbidden(field.NewPath("metadata", "labels").Key(workerclassv1.WorkerClassLabel),
				fmt.Sprintf("a classless pool uses no class, not %q; the pool's mutating webhook did not run", label))})
		}
		return admission.Allowed("")
	}
	var errs field.ErrorList
	if decision.Defaulted || decision.Restored {
		errs = append(errs, field.Required(field.NewPath("spec", pooladmission.ClassNameField),
			fmt.Sprintf("the pool must store class %s; the pool's mutating webhook did not run", decision.ClassName)))
	}
	if got := obj.GetLabels()[workerclassv1.WorkerClassLabel]; got != decision.ClassName {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "labels").Key(workerclassv1.WorkerClassLabel), got,
			"must name the pool's class "+decision.ClassName))
	}
	if len(errs) > 0 {
		return denied(obj.GetName(), errs)
	}
	return admission.Allowed("").WithWarnings(decision.Warnings...)
}

// admit decodes the request and runs the pure admission. done is true when
// resp is final.
func (p *Pool) admit(ctx context.Context, req admission.Request) (obj *unstructured.Unstructured, d pooladmission.Decision, resp admission.Response, done bool) {
	var op pooladmission.Operation
	switch req.Operation {
	case admissionv1.Create:
		op = pooladmission.Create
	case admissionv1.Update:
		op = pooladmission.Update
	default:
		return nil, d, admission.Allowed(""), true
	}
	obj = &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(req.Object.Raw); err != nil {
		return nil, d, admission.Errored(http.StatusBadRequest, err), true
	}
	var old map[string]any
	if op == pooladmission.Update {
		stored := &unstructured.Unstructured{}
		if err := stored.UnmarshalJSON(req.OldObject.Raw); err != nil {
			return nil, d, admission.Errored(http.StatusBadRequest, err), true
		}
		old = stored.Object
	}
	d, errs := pooladmission.AdmitObjects(pooladmission.Request{
		Operation: op,
		Substrate: p.Substrate,
		Classes:   func(name string) (*workerclassv1.WorkerClass, error) { return p.getClass(ctx, name) },
		Platform:  func() (*workerclassv1.WorkerPlatformSpec, error) { return p.getPlatform(ctx) },
		ControlPlaneVersion: func(cluster string) (string, error) {
			return p.controlPlaneVersion(ctx, obj.GetNamespace(), cluster)
		},
	}, obj.Object, old)
	if len(errs) > 0 {
		for _, e := range errs {
			if e.Type == field.ErrorTypeInternal {
				return nil, d, admission.Errored(http.StatusInternalServerError, errs.ToAggregate()), true
			}
		}
		return nil, d, denied(obj.GetName(), errs), true
	}
	return obj, d, admission.Response{}, false
}

func (p *Pool) getClass(ctx context.Context, name string) (*workerclassv1.WorkerClass, error) {
	c := &workerclassv1.WorkerClass{}
	if err := p.Reader.Get(ctx, types.NamespacedName{Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errors.Join(pooladmission.ErrNotFound, err)
		}
		return nil, err
	}
	return c, nil
}

func (p *Pool) getPlatform(ctx context.Context) (*workerclassv1.WorkerPlatformSpec, error) {
	wp := &workerclassv1.WorkerPlatform{}
	if err := p.Reader.Get(ctx, types.NamespacedName{Name: workerclassv1.PlatformName}, wp); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errors.Join(pooladmission.ErrNotFound, err)
		}
		return nil, err
	}
	return &wp.Spec, nil
}

// denied answers like the apiserver's own validation: 422 with causes.
func denied(name string, errs field.ErrorList) admission.Response {
	status := apierrors.NewInvalid(workerclassv1.PoolGroupVersionKind.GroupKind(), name, errs).ErrStatus
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
}
