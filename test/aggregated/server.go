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

// Package aggregated serves the KubernetesNodes pool kind
// (apps.cozystack.io/v1alpha1) from an aggregated apiserver built as
// Cozystack's is: k8s.io/apiserver's generic server with
// options.NewRecommendedOptions, so its admission chain is the recommended
// one (NamespaceLifecycle, MutatingAdmissionPolicy,
// MutatingAdmissionWebhook, ValidatingAdmissionPolicy,
// ValidatingAdmissionWebhook), with delegated authentication and
// authorization, registered with a kube-apiserver through an APIService.
// Cozystack keeps an application's spec as free JSON beside its metadata;
// the pool kind here has that shape and keeps it in the kube-apiserver's
// etcd under a prefix of its own (Cozystack's keeps it in Helm releases;
// the admission chain is the handler's and the same either way, once the
// storage calls the validation functions it is given, as
// genericregistry.Store does).
package aggregated

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	registryrest "k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/envtest"
)

// KubernetesNodes is a pool as Cozystack's apiserver serves an
// application: metadata and a spec of free JSON, which the pool webhooks
// and the private-key policy read.
type KubernetesNodes struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              *apiextensionsv1.JSON `json:"spec,omitempty"`
}

// KubernetesNodesList is a list of pools.
type KubernetesNodesList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubernetesNodes `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (in *KubernetesNodes) DeepCopyObject() runtime.Object {
	out := &KubernetesNodes{TypeMeta: in.TypeMeta}
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = in.Spec.DeepCopy()
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *KubernetesNodesList) DeepCopyObject() runtime.Object {
	out := &KubernetesNodesList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range in.Items {
		out.Items = append(out.Items, *in.Items[i].DeepCopyObject().(*KubernetesNodes))
	}
	return out
}

// OpenAPIModelName names the kind's OpenAPI definition, which server-side
// apply's field management reads.
func (KubernetesNodes) OpenAPIModelName() string { return "io.cozystack.apps.v1alpha1.KubernetesNodes" }

// OpenAPIModelName names the list's OpenAPI definition.
func (KubernetesNodesList) OpenAPIModelName() string {
	return "io.cozystack.apps.v1alpha1.KubernetesNodesList"
}

// Service and namespace the APIService names. The kube-apiserver dials an
// ExternalName Service's name (here localhost) and checks the serving
// certificate for <service>.<namespace>.svc.
const (
	ServiceName      = "cozystack-api"
	ServiceNamespace = "default"
)

var groupVersion = workerclassv1.PoolGroupVersionKind.GroupVersion()

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	// The one Go type serves as the external version and as the internal
	// (hub) version the generic handlers convert through.
	for _, gv := range []schema.GroupVersion{groupVersion, {Group: groupVersion.Group, Version: runtime.APIVersionInternal}} {
		scheme.AddKnownTypes(gv, &KubernetesNodes{}, &KubernetesNodesList{})
	}
	// Converting between them is a copy.
	if err := scheme.AddConversionFunc((*KubernetesNodes)(nil), (*KubernetesNodes)(nil), func(a, b any, _ conversion.Scope) error {
		*b.(*KubernetesNodes) = *a.(*KubernetesNodes).DeepCopyObject().(*KubernetesNodes)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := scheme.AddConversionFunc((*KubernetesNodesList)(nil), (*KubernetesNodesList)(nil), func(a, b any, _ conversion.Scope) error {
		*b.(*KubernetesNodesList) = *a.(*KubernetesNodesList).DeepCopyObject().(*KubernetesNodesList)
		return nil
	}); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, groupVersion)
	unversioned := schema.GroupVersion{Version: "v1"}
	metav1.AddToGroupVersion(scheme, unversioned)
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	return scheme, nil
}

// strategy stores pools as they come: the admission chain, not the
// storage, judges them.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

func (strategy) NamespaceScoped() bool                                     { return true }
func (strategy) PrepareForCreate(context.Context, runtime.Object)          {}
func (strategy) Validate(context.Context, runtime.Object) field.ErrorList  { return nil }
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (strategy) Canonicalize(runtime.Object)                               {}
func (strategy) AllowCreateOnUpdate() bool                                 { return false }
func (strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {
}
func (strategy) ValidateUpdate(context.Context, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
func (strategy) AllowUnconditionalUpdate() bool { return true }

// definitions are apimachinery's OpenAPI definitions (through
// apiextensions-apiserver's generated set) and the pool kind's, whose spec
// is free JSON.
func definitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := apiextensionsopenapi.GetOpenAPIDefinitions(ref)
	objectMeta, listMeta := metav1.ObjectMeta{}.OpenAPIModelName(), metav1.ListMeta{}.OpenAPIModelName()
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}}}
	item := KubernetesNodes{}.OpenAPIModelName()
	defs[item] = common.OpenAPIDefinition{
		Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"},
			Properties: map[string]spec.Schema{
				"apiVersion": str,
				"kind":       str,
				"metadata":   {SchemaProps: spec.SchemaProps{Default: map[string]any{}, Ref: ref(objectMeta)}},
				"spec": {
					SchemaProps:      spec.SchemaProps{Type: []string{"object"}},
					VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-preserve-unknown-fields": true}},
				},
			},
		}},
		Dependencies: []string{objectMeta},
	}
	defs[KubernetesNodesList{}.OpenAPIModelName()] = common.OpenAPIDefinition{
		Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type:     []string{"object"},
			Required: []string{"items"},
			Properties: map[string]spec.Schema{
				"apiVersion": str,
				"kind":       str,
				"metadata":   {SchemaProps: spec.SchemaProps{Default: map[string]any{}, Ref: ref(listMeta)}},
				"items": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, Items: &spec.SchemaOrArray{
					Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Default: map[string]any{}, Ref: ref(item)}},
				}}},
			},
		}},
		Dependencies: []string{item, listMeta},
	}
	return defs
}

// Server is a running aggregated apiserver serving the pool kind.
type Server struct {
	env      *envtest.Environment
	identity *rest.Config
	dir      string
	cancel   context.CancelFunc
	done     chan error
}

// Start starts the aggregated apiserver against env's kube-apiserver (its
// etcd, under a prefix of its own), registers it with an APIService and
// returns once the kube-apiserver reports the APIService Available and
// serves the kind. The Options are the recommended ones, admission
// included, with only what a process outside a cluster must name: the
// kubeconfig for the kube-apiserver, the etcd, where to listen and where
// to keep the self-signed serving certificate.
// The server reaches the kube-apiserver as identity (its reads of the
// admission configuration, its delegated authentication and
// authorization); nil means env's administrator.
func Start(ctx context.Context, env *envtest.Environment, identity *rest.Config) (*Server, error) {
	dir, err := os.MkdirTemp("", "aggregated-")
	if err != nil {
		return nil, err
	}
	if identity == nil {
		identity = env.Config
	}
	s := &Server{env: env, identity: identity, dir: dir}
	if err := s.start(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) start(ctx context.Context) error {
	kubeconfig := filepath.Join(s.dir, "kubeconfig")
	if err := envtest.WriteKubeconfig(kubeconfig, "envtest", s.identity); err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	codecs := serializer.NewCodecFactory(scheme)
	opts := genericoptions.NewRecommendedOptions("/registry/"+groupVersion.Group, codecs.LegacyCodec(groupVersion))
	opts.Etcd.StorageConfig.Transport.ServerList = []string{s.env.EtcdURL()}
	listener, err := net.Listen("tcp", "127.0.0.1:0") //nolint:noctx // Closed by the server it is handed to.
	if err != nil {
		return err
	}
	opts.SecureServing.Listener = listener
	opts.SecureServing.ServerCert.CertDirectory = s.dir
	if err := opts.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost",
		[]string{ServiceName + "." + ServiceNamespace + ".svc"}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		_ = listener.Close()
		return fmt.Errorf("creating the serving certificate: %w", err)
	}
	opts.Authentication.RemoteKubeConfigFile = kubeconfig
	opts.Authorization.RemoteKubeConfigFile = kubeconfig
	opts.CoreAPI.CoreAPIKubeconfigPath = kubeconfig
	if errs := opts.Validate(); len(errs) > 0 {
		_ = listener.Close()
		return errors.Join(errs...)
	}

	cfg := genericapiserver.NewRecommendedConfig(codecs)
	namer := openapi.NewDefinitionNamer(scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(definitions, namer)
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(definitions, namer)
	cfg.FeatureGate = utilfeature.DefaultMutableFeatureGate
	cfg.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	if err := opts.ApplyTo(cfg); err != nil {
		_ = listener.Close()
		return fmt.Errorf("applying the recommended options: %w", err)
	}
	server, err := cfg.Complete().New("kubernetesnodes-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		_ = listener.Close()
		return err
	}
	st := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &KubernetesNodes{} },
		NewListFunc:               func() runtime.Object { return &KubernetesNodesList{} },
		DefaultQualifiedResource:  workerclassv1.PoolResource.GroupResource(),
		SingularQualifiedResource: schema.GroupResource{Group: groupVersion.Group, Resource: "kubernetesnodes"},
		CreateStrategy:            st,
		UpdateStrategy:            st,
		DeleteStrategy:            st,
		TableConvertor:            registryrest.NewDefaultTableConvertor(workerclassv1.PoolResource.GroupResource()),
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: cfg.RESTOptionsGetter}); err != nil {
		_ = listener.Close()
		return err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(groupVersion.Group, scheme, metav1.ParameterCodec, codecs)
	group.VersionedResourcesStorageMap[groupVersion.Version] = map[string]registryrest.Storage{workerclassv1.PoolResource.Resource: store}
	if err := server.InstallAPIGroup(&group); err != nil {
		_ = listener.Close()
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.done = make(chan error, 1)
	prepared := server.PrepareRun()
	go func() { s.done <- prepared.RunWithContext(runCtx) }()

	caBundle, err := os.ReadFile(filepath.Join(s.dir, "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("reading the serving certificate: %w", err)
	}
	return s.register(ctx, listener.Addr().(*net.TCPAddr).Port, caBundle)
}

// register creates the Service and the APIService and waits until the
// kube-apiserver proxies the group to this server.
func (s *Server) register(ctx context.Context, port int, caBundle []byte) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: ServiceNamespace},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	if err := s.env.Client.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating Service %s: %w", ServiceName, err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": groupVersion.Version + "." + groupVersion.Group},
		"spec": map[string]any{
			"group":                groupVersion.Group,
			"version":              groupVersion.Version,
			"groupPriorityMinimum": int64(1000),
			"versionPriority":      int64(15),
			"caBundle":             caBundle,
			"service":              map[string]any{"name": ServiceName, "namespace": ServiceNamespace, "port": int64(port)},
		},
	}}
	if err := s.env.Client.Create(ctx, apiService); err != nil {
		return fmt.Errorf("creating APIService %s: %w", apiService.GetName(), err)
	}
	// Available is the kube-apiserver's own check of the server's
	// discovery; a LIST through the kube-apiserver then proves the route.
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-s.done:
			return false, fmt.Errorf("the aggregated apiserver stopped: %w", err)
		default:
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(apiService.GroupVersionKind())
		if last = s.env.Client.Get(ctx, client.ObjectKeyFromObject(apiService), got); last != nil {
			return false, nil //nolint:nilerr // Retried until the deadline, whose error carries the last one.
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		available := false
		for _, c := range conditions {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				available = m["status"] == "True"
				last = fmt.Errorf("APIService Available=%v: %v: %v", m["status"], m["reason"], m["message"])
			}
		}
		if !available {
			return false, nil
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(workerclassv1.PoolGroupVersionKind.GroupVersion().WithKind("KubernetesNodesList"))
		last = s.env.Client.List(ctx, list)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the kube-apiserver does not serve %s through the aggregated apiserver: %w (last: %v)", groupVersion, err, last)
	}
	return nil
}

// Stop unregisters the APIService and stops the server.
func (s *Server) Stop() error {
	var errs []error
	if s.cancel != nil {
		apiService := &unstructured.Unstructured{}
		apiService.SetAPIVersion("apiregistration.k8s.io/v1")
		apiService.SetKind("APIService")
		apiService.SetName(groupVersion.Version + "." + groupVersion.Group)
		if err := s.env.Client.Delete(context.Background(), apiService); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
		s.cancel()
		if err := <-s.done; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, os.RemoveAll(s.dir))...)
}
