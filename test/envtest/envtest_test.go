package envtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestStartInstallsClusterAPICRDs proves the helper starts a real apiserver
// that serves the Cluster API v1beta2 schema and validates against it.
func TestStartInstallsClusterAPICRDs(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := Start(ctx, Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "envtest-smoke"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "smoke"},
		Spec:       clusterv1.ClusterSpec{ClusterNetwork: clusterv1.ClusterNetwork{ServiceDomain: "cluster.local"}},
	}
	g.Expect(env.Client.Create(ctx, cluster)).To(Succeed())

	// The CRD schema is enforced: a Machine without its required clusterName
	// is rejected by the apiserver, not by any webhook.
	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "invalid"}}
	err = env.Client.Create(ctx, machine, client.FieldValidation(metav1.FieldValidationStrict))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "expected Invalid, got %v", err)
}

// TestStartStopsTheControlPlaneWhenACRDIsRefused: Start fails, naming the
// CRDs, when the apiserver refuses one, and leaves no etcd or
// kube-apiserver of its own running.
func TestStartStopsTheControlPlaneWhenACRDIsRefused(t *testing.T) {
	g := NewWithT(t)
	crd := filepath.Join(t.TempDir(), "refused.yaml")
	g.Expect(os.WriteFile(crd, []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: refuseds.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: refuseds, singular: refused, kind: Refused, listKind: RefusedList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: not-a-type}
`), 0o600)).To(Succeed())
	_, err := Start(context.Background(), Options{CRDPaths: []string{crd}})
	g.Expect(err).To(MatchError(ContainSubstring("unable to install CRDs")))
	g.Expect(childProcesses(t, "etcd", "kube-apiserver")).To(BeEmpty())
}

// childProcesses lists this process's children with one of the names.
func childProcesses(t *testing.T, names ...string) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, path := range stats {
		data, err := os.ReadFile(path) //nolint:gosec // /proc, read-only.
		if err != nil {
			continue // the process ended
		}
		// pid (comm) state ppid ...
		stat := string(data)
		open, closing := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(stat[closing+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if comm := stat[open+1 : closing]; slices.Contains(names, comm) {
			found = append(found, comm+" "+strings.TrimSpace(stat[:open]))
		}
	}
	return found
}
