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
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

// TestResolveFilesReadsEachSecretOnceAndBoundsTheContents: the manager's
// client reads Secrets from the API server, so a config that names one
// Secret in all of its 32 files costs one read per rendering, not 32; and
// contents that cannot fit in a Secret are refused while they are read,
// before the rest is read and before anything is rendered (a 1 MiB Secret
// named 32 times was rendered whole, 32 MiB, before the size check).
func TestResolveFilesReadsEachSecretOnceAndBoundsTheContents(t *testing.T) {
	const namespace = "tenant"
	secret := func(name string, size int) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Data: map[string][]byte{"key": bytes.Repeat([]byte("a"), size)}}
	}
	fromSecret := func(name string) bootstrapv1.File {
		return bootstrapv1.File{Path: "/etc/" + name, ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretKeySource{Name: name, Key: "key"}}}
	}
	repeat := func(f bootstrapv1.File, n int) []bootstrapv1.File {
		files := make([]bootstrapv1.File, 0, n)
		for i := range n {
			f.Path = fmt.Sprintf("/etc/file-%d", i)
			files = append(files, f)
		}
		return files
	}
	for _, tc := range []struct {
		name      string
		files     []bootstrapv1.File
		wantReads []string
		wantErr   string
		wantFiles int
	}{
		{
			name:      "one Secret named by every file is read once",
			files:     repeat(fromSecret("shared"), 32),
			wantReads: []string{"shared"},
			wantFiles: 32,
		},
		{
			name:      "a missing Secret named by every file is read once",
			files:     repeat(fromSecret("missing"), 32),
			wantReads: []string{"missing"},
			wantErr:   "spec.files[0].contentFrom.secret: Secret missing not found",
		},
		{
			name:      "a large Secret named twice is refused before the rest is read",
			files:     append(repeat(fromSecret("large"), 32), fromSecret("shared")),
			wantReads: []string{"large"},
			wantErr: "The bootstrap data would be at least 1228812 bytes, the size of the contents of spec.files[0] to spec.files[1], " +
				"and a Secret holds at most 1048576: shrink spec.files",
		},
		{
			name:      "inline content counts too",
			files:     []bootstrapv1.File{{Path: "/etc/inline", Content: string(bytes.Repeat([]byte("b"), 256*1024))}, fromSecret("fits"), fromSecret("shared")},
			wantReads: []string{"fits", "shared"},
			wantFiles: 3,
		},
		{
			name:      "contents that fit a Secret only without the format key are refused",
			files:     []bootstrapv1.File{fromSecret("exact")},
			wantReads: []string{"exact"},
			wantErr: "The bootstrap data would be at least 1048588 bytes, the size of the contents of spec.files[0] to spec.files[0], " +
				"and a Secret holds at most 1048576: shrink spec.files",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var reads []string
			c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(
				secret("shared", 1024), secret("large", 600*1024), secret("fits", 700*1024), secret("exact", corev1.MaxSecretSize),
			).Build(), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Secret); ok {
						reads = append(reads, key.Name)
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			r := &Reconciler{Client: c}
			config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "worker-0"}, Spec: bootstrapv1.KairosConfigSpec{Files: tc.files}}
			files, err := r.resolveFiles(context.Background(), config, "workload")
			g.Expect(reads).To(Equal(tc.wantReads))
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				var missing *fileSourceError
				var tooLarge *filesTooLargeError
				g.Expect(errors.As(err, &missing) || errors.As(err, &tooLarge)).To(BeTrue(), "a wait or a refusal the condition names, not a reconcile error")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(files).To(HaveLen(tc.wantFiles))
		})
	}
}
