//go:build node

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

package node_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
)

// TestCrossNamespaceClonesOnRealCDI: pools whose template clones its
// root disk from another namespace, a DataSource there or a claim, on
// CDI's own controller and cdi-apiserver. The tenant's namespace is
// authorized as its ServiceAccount default (the provider asks CDI's rules
// before it creates a DataVolume): where a role grants it create on
// datavolumes/source, as CDI documents for a source namespace's owner,
// the provider's DataVolume (which cdi-apiserver's webhook admits and
// gives a clone token) is cloned by CDI's upload server and cloner Pods
// and holds the source's bytes; where nothing grants it, each Machine
// reports the refusal (CloneSourceForbidden) and no DataVolume is made,
// so nothing is cloned. The sources are a small disk of random bytes
// written into the source claim's volume: no guest boots from it, and the
// pools are deleted once the clones are checked.
func TestCrossNamespaceClonesOnRealCDI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	const (
		namespace = "node-real-cdi-xns"
		allowed   = "node-real-cdi-golden"
		forbidden = "node-real-cdi-private"
		diskName  = "disk"
		diskSize  = 64 << 20
	)
	k := startKubeVirtNodeWith(ctx, t, namespace, nodeSetup{realCDI: true})
	c := k.h.Management.Client
	cdiLog := func() string {
		return tail(k.h.RealCDI.Process.Tail(), 30) + "\ncdi-apiserver:\n" + tail(k.h.RealCDI.APIServer.Tail(), 20)
	}

	// Each source namespace holds a claim with a disk and a DataSource
	// that points at it; only the first lets the tenant clone.
	size := resource.NewQuantity(diskSize, resource.BinarySI)
	disks := map[string]string{}
	for _, ns := range []string{allowed, forbidden} {
		disks[ns] = sourceDisk(ctx, t, c, k.node.ServiceCA(), ns, diskName, size)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "node-clone-source"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{cdiv1.SchemeGroupVersion.Group}, Resources: []string{"datavolumes/source"}, Verbs: []string{"create"}},
	}}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: allowed, Name: "clone-from-here"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: "default"}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	type source struct {
		pool    pool
		clone   infrav1.CloneSource
		allowed bool
	}
	var sources []*source
	for _, ns := range []string{allowed, forbidden} {
		for _, kind := range []infrav1.CloneSourceKind{infrav1.CloneFromDataSource, infrav1.CloneFromPersistentVolumeClaim} {
			name := "ds"
			if kind == infrav1.CloneFromPersistentVolumeClaim {
				name = "pvc"
			}
			if ns == allowed {
				name += "-allowed"
			} else {
				name += "-forbidden"
			}
			sources = append(sources, &source{pool: k.pool(name), clone: infrav1.CloneSource{Kind: kind, Namespace: ns, Name: diskName}, allowed: ns == allowed})
		}
	}
	t0 := time.Now()
	for _, s := range sources {
		s.pool.apply(ctx, t, nil, harness.ClasslessClone(s.clone, size.String(), string(infrav1.ConfigDriveDatasource)))
	}

	// The allowed clones succeed; the forbidden ones are refused, and
	// stay without a DataVolume all the while.
	done := map[string]time.Duration{}
	if err := waitFor(ctx, 20*time.Minute, func() (bool, string) {
		var waiting []string
		for _, s := range sources {
			ms, err := k.h.PoolMachines(ctx, s.pool.Pool)
			if err != nil || len(ms) != 1 {
				waiting = append(waiting, fmt.Sprintf("pool %s: Machines %d (%v)", s.pool.Name, len(ms), err))
				continue
			}
			kvmName := ms[0].Spec.InfrastructureRef.Name
			dv := &cdiv1.DataVolume{}
			dvErr := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: kvmName + "-root"}, dv)
			if !s.allowed {
				if !apierrors.IsNotFound(dvErr) {
					t.Fatalf("pool %s clones from %s, which the tenant may not clone from, yet DataVolume %s exists (%v): %+v", s.pool.Name, s.clone.Namespace, kvmName+"-root", dvErr, dv.Spec.Source)
				}
				kvm := &infrav1.KubeVirtMachine{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: kvmName}, kvm); err != nil {
					waiting = append(waiting, err.Error())
					continue
				}
				cond := apimeta.FindStatusCondition(kvm.Status.Conditions, infrav1.ReadyCondition)
				want := "User system:serviceaccount:" + namespace + ":default has insufficient permissions in clone source namespace " + forbidden
				if cond == nil || cond.Status != metav1.ConditionUnknown || cond.Reason != infrav1.CloneSourceForbiddenReason || !strings.Contains(cond.Message, want) {
					waiting = append(waiting, fmt.Sprintf("pool %s: KubeVirtMachine %s Ready %+v, want Unknown, %s, %q", s.pool.Name, kvmName, cond, infrav1.CloneSourceForbiddenReason, want))
				} else if _, ok := done[s.pool.Name]; !ok {
					done[s.pool.Name] = time.Since(t0)
					t.Logf("pool %s: refused %s after the pools were applied: %s", s.pool.Name, done[s.pool.Name].Round(time.Second), cond.Message)
				}
				continue
			}
			if dvErr != nil {
				waiting = append(waiting, fmt.Sprintf("pool %s: %v", s.pool.Name, dvErr))
				continue
			}
			if dv.Status.Phase != cdiv1.Succeeded {
				waiting = append(waiting, fmt.Sprintf("pool %s: DataVolume %s %s %+v", s.pool.Name, dv.Name, dv.Status.Phase, dv.Status.Conditions))
				continue
			}
			if _, ok := done[s.pool.Name]; !ok {
				done[s.pool.Name] = time.Since(t0)
				_, token := dv.Annotations["cdi.kubevirt.io/storage.clone.token"]
				t.Logf("pool %s: DataVolume %s succeeded %s after the pools were applied; clone token: %v", s.pool.Name, dv.Name, done[s.pool.Name].Round(time.Second), token)
				if src := dv.Spec.Source; dv.Spec.SourceRef != nil || src == nil || src.PVC == nil || *src.PVC != (cdiv1.DataVolumeSourcePVC{Namespace: allowed, Name: diskName}) {
					t.Errorf("pool %s: DataVolume %s clones %+v (sourceRef %+v), want the claim %s/%s", s.pool.Name, dv.Name, dv.Spec.Source, dv.Spec.SourceRef, allowed, diskName)
				}
				pvc := &corev1.PersistentVolumeClaim{}
				pv := &corev1.PersistentVolume{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(dv), pvc); err != nil {
					t.Fatal(err)
				}
				if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
					t.Fatal(err)
				}
				if err := samePrefix(disks[allowed], cdisim.DiskImage(pv)); err != nil {
					t.Errorf("pool %s: the clone's disk.img is not the source's disk: %v", s.pool.Name, err)
				}
				// The clone is checked: no guest needs to boot from it.
				if err := k.h.DeletePool(ctx, s.pool.Pool); err != nil {
					t.Fatal(err)
				}
			}
		}
		return len(done) == len(sources), strings.Join(waiting, "\n")
	}); err != nil {
		t.Fatalf("the clones were not done or refused: %v\ncdi-controller:\n%s", err, cdiLog())
	}

	// Nothing of a refused clone reached CDI: no DataVolume of the tenant's
	// names the forbidden namespace, and no Pod ran there.
	dvs := &cdiv1.DataVolumeList{}
	if err := c.List(ctx, dvs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	for _, dv := range dvs.Items {
		if src := dv.Spec.Source; src != nil && src.PVC != nil && src.PVC.Namespace == forbidden {
			t.Errorf("DataVolume %s clones from %s", dv.Name, forbidden)
		}
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(forbidden)); err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		t.Errorf("Pod %s ran in %s, whose disk the tenant may not clone", pod.Name, forbidden)
	}
	var times []string
	for _, s := range sources {
		times = append(times, fmt.Sprintf("%s %s", s.pool.Name, done[s.pool.Name].Round(time.Second)))
	}
	t.Logf("cloned or refused after the pools were applied: %s; load average %s", strings.Join(times, ", "), loadAverage())
}

// sourceDisk makes namespace a clone source: its default ServiceAccount
// and the kube-root-ca.crt ConfigMap of serviceCA (no controller makes
// them here; CDI's cloner Pod runs as the one and mounts the other), a claim
// name of size bound by the stand-in's provisioner with a disk of random
// bytes where CDI expects it (disk.img), and a DataSource name that
// points at the claim. It returns the disk's path.
func sourceDisk(ctx context.Context, t *testing.T, c client.Client, serviceCA []byte, namespace, name string, size *resource.Quantity) string {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *size}},
		},
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "default"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(serviceCA)}},
		pvc,
		&cdiv1.DataSource{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: namespace, Name: name}}},
		},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pv := &corev1.PersistentVolume{}
	if err := waitFor(ctx, 2*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
			return false, err.Error()
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return false, fmt.Sprintf("claim %s/%s %s", namespace, name, pvc.Status.Phase)
		}
		return c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv) == nil, "volume " + pvc.Spec.VolumeName
	}); err != nil {
		t.Fatal(err)
	}
	path := cdisim.DiskImage(pv)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644) //nolint:gosec // The test's volume; CDI's cloner reads it as another user.
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, size.Value()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
