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

// Package cloneauth authorizes what a DataVolume clones with CDI's own rules
// (kubevirt.io/containerized-data-importer-api): the caller needs CDI's
// create on datavolumes/source, or the equivalent claim or snapshot
// permissions, in the namespace whose data is cloned, which is where a
// DataSource points, not where it lives. The provider's own service account
// may clone from anywhere, so it never decides: a spec is authorized as the
// user who writes it, at admission, and a DataVolume as the ServiceAccount
// default of the machine's namespace before the provider creates it, which
// is how KubeVirt authorizes a VirtualMachine's DataVolumeTemplates. A
// DataVolume that would name a DataSource names what it pointed at when
// it was authorized instead (Pin).
package cloneauth

import (
	"context"
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datasources,verbs=get

// NamespaceServiceAccount is the ServiceAccount a machine's namespace is
// authorized as.
const NamespaceServiceAccount = "default"

// Decision is the outcome of an authorization.
type Decision struct {
	// Allowed is true when the clone may go ahead.
	Allowed bool
	// Missing is true when the source namespace or DataSource does not
	// exist, so nothing could be decided yet.
	Missing bool
	// Reason says why it is not allowed, in CDI's words or naming what is
	// missing.
	Reason string
}

// Authorizer asks the API server.
type Authorizer struct {
	// Client creates SubjectAccessReviews.
	Client client.Client
	// Reader reads namespaces and DataSources, uncached: admission and the
	// last check before a create must not act on a stale DataSource.
	Reader client.Reader
}

// AsUser authorizes dv for the user of an admission request.
func (a *Authorizer) AsUser(ctx context.Context, dv *cdiv1.DataVolume, user authenticationv1.UserInfo) (Decision, error) {
	res, err := dv.AuthorizeUser(dv.Namespace, dv.Name, &proxy{ctx: ctx, a: a}, user)
	return decide(res, err)
}

// AsNamespace authorizes dv, the DataVolume about to be created, for the
// ServiceAccount default of its namespace. A dv that clones a DataSource is
// pinned first (Pin), so that what is authorized is what CDI clones.
func (a *Authorizer) AsNamespace(ctx context.Context, dv *cdiv1.DataVolume) (Decision, error) {
	if decision, err := a.Pin(ctx, dv); err != nil || !decision.Allowed {
		return decision, err
	}
	res, err := dv.AuthorizeSA(dv.Namespace, dv.Name, &proxy{ctx: ctx, a: a}, dv.Namespace, NamespaceServiceAccount)
	return decide(res, err)
}

// Pin replaces dv's sourceRef to a DataSource with the claim or snapshot
// that DataSource points at now, read once from the API server: CDI
// resolves a sourceRef again when it clones, so a DataSource repointed
// between the authorization and the clone would decide what is cloned.
// It reads the DataSource as CDI's authorization does (spec.source, or
// status.source for a DataSource of a DataSource), and an empty namespace
// is the DataSource's. A DataSource that is missing or points at nothing is
// Missing; any other dv is left alone.
func (a *Authorizer) Pin(ctx context.Context, dv *cdiv1.DataVolume) (Decision, error) {
	ref := dv.Spec.SourceRef
	if ref == nil || ref.Kind != cdiv1.DataVolumeDataSource {
		return Decision{Allowed: true}, nil
	}
	namespace := dv.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		namespace = *ref.Namespace
	}
	ds, err := (&proxy{ctx: ctx, a: a}).GetDataSource(namespace, ref.Name)
	var missing missingError
	if errors.As(err, &missing) {
		return Decision{Missing: true, Reason: missing.Error()}, nil
	}
	if err != nil {
		return Decision{}, fmt.Errorf("reading the clone source: %w", err)
	}
	src := ds.Spec.Source
	if src.DataSource != nil {
		src = ds.Status.Source
	}
	switch {
	case src.PVC != nil:
		pvc := *src.PVC
		if pvc.Namespace == "" {
			pvc.Namespace = ds.Namespace
		}
		dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &pvc}
	case src.Snapshot != nil:
		snapshot := *src.Snapshot
		if snapshot.Namespace == "" {
			snapshot.Namespace = ds.Namespace
		}
		dv.Spec.Source = &cdiv1.DataVolumeSource{Snapshot: &snapshot}
	default:
		return Decision{Missing: true, Reason: fmt.Sprintf("DataSource %s/%s points at no PersistentVolumeClaim or VolumeSnapshot", namespace, ref.Name)}, nil
	}
	dv.Spec.SourceRef = nil
	return Decision{Allowed: true}, nil
}

// missingError names what an authorization could not find.
type missingError struct{ what string }

func (e missingError) Error() string { return e.what + " does not exist" }

func decide(res cdiv1.CloneAuthResponse, err error) (Decision, error) {
	var missing missingError
	switch {
	case errors.Is(err, cdiv1.ErrNoTokenOkay):
		// Not a clone, or nothing to authorize.
		return Decision{Allowed: true}, nil
	case errors.As(err, &missing):
		return Decision{Missing: true, Reason: missing.Error()}, nil
	case err != nil:
		return Decision{}, fmt.Errorf("authorizing the clone source: %w", err)
	case !res.Allowed && res.Reason == "":
		return Decision{Reason: "CDI refused the clone source"}, nil
	}
	return Decision{Allowed: res.Allowed, Reason: res.Reason}, nil
}

// proxy is CDI's window on the API server for one authorization. CDI's
// proxy interface takes no context, so the authorization's is kept here.
type proxy struct {
	ctx context.Context //nolint:containedctx // CDI's AuthorizationHelperProxy methods take no context.
	a   *Authorizer
}

func (p *proxy) CreateSar(sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
	if err := p.a.Client.Create(p.ctx, sar); err != nil {
		return nil, err
	}
	return sar, nil
}

func (p *proxy) GetNamespace(name string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	err := p.a.Reader.Get(p.ctx, client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) {
		return nil, missingError{what: "namespace " + name}
	}
	return ns, err
}

func (p *proxy) GetDataSource(namespace, name string) (*cdiv1.DataSource, error) {
	ds := &cdiv1.DataSource{}
	err := p.a.Reader.Get(p.ctx, client.ObjectKey{Namespace: namespace, Name: name}, ds)
	if apierrors.IsNotFound(err) {
		return nil, missingError{what: "DataSource " + namespace + "/" + name}
	}
	return ds, err
}
