package envtest

import (
	"context"
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
