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

// Package inlinekubeconfig keeps a workload cluster's kubeconfig, read from
// a Secret a tenant may write (<cluster>-kubeconfig), to credentials it
// carries inline. client-go honours file references in a kubeconfig
// (tokenFile, client-certificate, client-key, certificate-authority), runs
// exec plugins and loads auth providers; in a provider's Pod, tokenFile
// names its service account token, which client-go then sends to whatever
// server the tenant wrote. Cluster API refuses only exec and auth-provider.
//
// Check is the decision, on the same parser client-go uses; SecretReader
// applies it to every kubeconfig Secret a ClusterCache reads. The admission
// policy config/bootstrap/policy/kubeconfig-secrets.yaml refuses such
// Secrets in the apiserver, for Cluster API's own ClusterCache too; the
// corpus in testdata feeds it and Check alike.
package inlinekubeconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// MaxSize is the largest kubeconfig accepted, in bytes: Cluster API's own
// are about 6 KiB, and the admission policy's checks stay within the
// apiserver's cost limit up to it.
const MaxSize = 64 << 10

// forbiddenDetail is the refusal of a field that names a file, a command or
// a plugin. It never carries the field's value.
const forbiddenDetail = "a workload cluster's kubeconfig must carry its credentials inline; " +
	"a file, an exec plugin or an auth provider would be read or run by the provider that connects with it"

// Check returns an error naming every field of the kubeconfig in data that
// makes client-go read a file, run a command or load an auth plugin, or
// that data is not a kubeconfig of at most MaxSize bytes. The error never
// carries a value from data.
func Check(data []byte) error {
	if len(data) > MaxSize {
		return field.TooLong(field.NewPath(secret.KubeconfigDataName), "", MaxSize)
	}
	config, err := clientcmd.Load(data)
	if err != nil {
		// The parser's message may quote the data: it is not passed on.
		return field.Invalid(field.NewPath(secret.KubeconfigDataName), "", "does not parse as a kubeconfig")
	}
	return forbidden(config).ToAggregate()
}

// forbidden lists the fields of config that name a file, an exec plugin or
// an auth provider, users and clusters in the order of their names.
func forbidden(config *clientcmdapi.Config) field.ErrorList {
	var errs field.ErrorList
	for _, name := range sortedKeys(config.Clusters) {
		path := field.NewPath("clusters").Key(name).Child("cluster")
		if config.Clusters[name].CertificateAuthority != "" {
			errs = append(errs, field.Forbidden(path.Child("certificate-authority"), forbiddenDetail))
		}
	}
	for _, name := range sortedKeys(config.AuthInfos) {
		user := config.AuthInfos[name]
		path := field.NewPath("users").Key(name).Child("user")
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"client-certificate", user.ClientCertificate != ""},
			{"client-key", user.ClientKey != ""},
			{"tokenFile", user.TokenFile != ""},
			{"exec", user.Exec != nil},
			{"auth-provider", user.AuthProvider != nil},
		} {
			if f.set {
				errs = append(errs, field.Forbidden(path.Child(f.name), forbiddenDetail))
			}
		}
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// SecretReader is the reader a ClusterCache reads kubeconfig Secrets
// through (clustercache.Options.SecretClient): a Secret read through it
// whose kubeconfig Check refuses is not returned, so no connection is made
// with it. Every Secret read through it is taken for a kubeconfig Secret,
// which is all a ClusterCache reads.
type SecretReader struct {
	client.Reader
}

var _ client.Reader = SecretReader{}

// ErrRefused marks a kubeconfig Secret SecretReader did not return.
var ErrRefused = errors.New("kubeconfig Secret refused")

// Get reads the Secret and returns an error wrapping ErrRefused, with the
// Secret's key and the fields at fault, if its kubeconfig is refused.
func (r SecretReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return fmt.Errorf("reading %s: only Secrets are read through the kubeconfig Secret reader, not %T", key, obj)
	}
	err := Check(s.Data[secret.KubeconfigDataName])
	if watchview.DroppedTooLarge(s, secret.KubeconfigDataName) {
		// The cache did not keep a kubeconfig over MaxSize: say so
		// rather than that an empty one is no kubeconfig.
		err = field.TooLong(field.NewPath(secret.KubeconfigDataName), "", MaxSize)
	}
	if err != nil {
		// Nothing of the refused Secret stays in obj.
		*s = corev1.Secret{}
		return fmt.Errorf("%w: Secret %s: %w", ErrRefused, key, err)
	}
	return nil
}

// List is refused: a list would bypass the check, and a ClusterCache only
// gets Secrets by name.
func (r SecretReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("kubeconfig Secrets are read one by one, through Get, so that each is checked")
}
