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

package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// BuiltinClasses returns the classes that exist after install.
func BuiltinClasses() []*workerclassv1.WorkerClass {
	return []*workerclassv1.WorkerClass{
		{ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.TalosClassName}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}},
		{ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.KairosClassName}, Spec: workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos}},
	}
}

// DefaultPlatform returns the platform configuration written when none
// exists: talos is the default class. The hoster adds versions, Talos
// defaults and images; until then resolution reports what is missing.
func DefaultPlatform() *workerclassv1.WorkerPlatform {
	return &workerclassv1.WorkerPlatform{
		ObjectMeta: metav1.ObjectMeta{Name: workerclassv1.PlatformName},
		Spec: workerclassv1.WorkerPlatformSpec{
			DefaultClass: workerclassv1.TalosClassName,
			TalosFactory: workerclassv1.TalosFactoryDefaults{URL: workerclassv1.DefaultTalosFactoryURL},
		},
	}
}

// EnsureDefaults creates the built-in classes and the platform
// configuration when they are missing. Existing objects are never changed.
func EnsureDefaults(ctx context.Context, c client.Client) error {
	for _, class := range BuiltinClasses() {
		if err := createIfMissing(ctx, c, class); err != nil {
			return err
		}
	}
	return createIfMissing(ctx, c, DefaultPlatform())
}

// ensureBuiltinClass recreates a built-in class that was deleted.
func ensureBuiltinClass(ctx context.Context, c client.Client, name string) error {
	for _, class := range BuiltinClasses() {
		if class.Name == name {
			return createIfMissing(ctx, c, class)
		}
	}
	return nil
}

func createIfMissing(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).Info("Created a missing built-in object", "name", obj.GetName())
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	}
	return fmt.Errorf("creating %s: %w", obj.GetName(), err)
}

// WorkerPlatformReconciler recreates the default platform configuration
// when it is deleted.
type WorkerPlatformReconciler struct {
	Client client.Client
}

// SetupWithManager watches the platform configuration.
func (r *WorkerPlatformReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	predicateLog := ctrl.LoggerFrom(ctx).WithValues("controller", "workerplatform")
	return capicontrollerutil.NewControllerManagedBy(mgr, predicateLog).For(&workerclassv1.WorkerPlatform{}).Named("workerplatform").Complete(ctx, r)
}

// Reconcile recreates a deleted default configuration; it never changes an
// existing one.
func (r *WorkerPlatformReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != workerclassv1.PlatformName {
		return ctrl.Result{}, nil
	}
	err := r.Client.Get(ctx, req.NamespacedName, &workerclassv1.WorkerPlatform{})
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, createIfMissing(ctx, r.Client, DefaultPlatform())
	}
	return ctrl.Result{}, client.IgnoreNotFound(err)
}
