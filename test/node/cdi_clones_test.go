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
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
)

// TestImportOnceCloneManyOnRealCDI: a pool of two Machines on CDI's own
// controller. Their template's HTTP image is imported once, into the
// template's shared import (CDI's importer Pod over TLS with the
// template's CA), and each Machine's root DataVolume is a host-assisted
// clone of it (CDI's upload server and cloner Pods); the image server
// sends less than two images' bytes. The pool is deleted once both clones
// succeeded, without waiting for the guests (on two cores, two TCG guests
// would only slow the rest), and then its template: nothing is left of
// either in the namespace, neither the Machines' DataVolumes and claims
// nor the shared import, its CA ConfigMap, its claim or CDI's scratch
// claim, nor CDI's importer, upload server and cloner Pods and the upload
// servers' Services, nor any volume.
func TestImportOnceCloneManyOnRealCDI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	const (
		namespace = "node-real-cdi-many"
		machines  = 2
	)
	disk := serveWorkerDisk(t, true)
	k := startKubeVirtNodeWith(ctx, t, namespace, nodeSetup{realCDI: true, forwards: disk.forwards})
	c := k.h.Management.Client
	cdiLog := func() string { return tail(k.h.RealCDI.Process.Tail(), 40) }

	p := k.pool("many")
	t0 := time.Now()
	p.apply(ctx, t, map[string]string{"WORKER_MACHINE_COUNT": fmt.Sprint(machines)}, disk.imports()...)
	template := &infrav1.KubeVirtMachineTemplate{}
	templateKey := client.ObjectKey{Namespace: namespace, Name: p.Deployment().Name + "-r1"}
	if err := waitFor(ctx, 2*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, templateKey, template); err != nil {
			return false, err.Error()
		}
		return template.Status.Resolved != nil, "template not resolved"
	}); err != nil {
		t.Fatal(err)
	}
	shared := sharedimage.Name(template)

	// Every claim's volume directory, to see each one go.
	volumes := map[string]string{}
	var imported time.Duration
	clones := map[string]*cdiv1.DataVolume{}
	if err := waitFor(ctx, 25*time.Minute, func() (bool, string) {
		claims := &corev1.PersistentVolumeClaimList{}
		if err := c.List(ctx, claims, client.InNamespace(namespace)); err == nil {
			for _, pvc := range claims.Items {
				pv := &corev1.PersistentVolume{}
				if pvc.Spec.VolumeName != "" && c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv) == nil && pv.Spec.HostPath != nil {
					volumes[pvc.Name] = pv.Spec.HostPath.Path
				}
			}
		}
		sharedDV := &cdiv1.DataVolume{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: shared}, sharedDV); err != nil {
			return false, err.Error()
		}
		if sharedDV.Status.Phase != cdiv1.Succeeded {
			return false, fmt.Sprintf("shared import %s %s %s", shared, sharedDV.Status.Phase, sharedDV.Status.Progress)
		}
		if imported == 0 {
			imported = time.Since(t0)
		}
		ms, err := k.h.PoolMachines(ctx, p.Pool)
		if err != nil || len(ms) != machines {
			return false, fmt.Sprintf("Machines %d (%v)", len(ms), err)
		}
		var waiting []string
		for _, m := range ms {
			dv := &cdiv1.DataVolume{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: m.Spec.InfrastructureRef.Name + "-root"}, dv); err != nil {
				waiting = append(waiting, fmt.Sprintf("Machine %s: %v", m.Name, err))
				continue
			}
			clones[m.Name] = dv
			if dv.Status.Phase != cdiv1.Succeeded {
				waiting = append(waiting, fmt.Sprintf("DataVolume %s %s %s %+v", dv.Name, dv.Status.Phase, dv.Status.Progress, dv.Status.Conditions))
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "\n")
	}); err != nil {
		t.Fatalf("the pool's disks were not imported once and cloned: %v\ncdi-controller:\n%s", err, cdiLog())
	}
	cloned := time.Since(t0)
	for name, dv := range clones {
		if src := dv.Spec.Source; src == nil || src.PVC == nil || *src.PVC != (cdiv1.DataVolumeSourcePVC{Namespace: namespace, Name: shared}) {
			t.Errorf("Machine %s's DataVolume %s has source %+v, want a clone of the shared import %s", name, dv.Name, dv.Spec.Source, shared)
		}
	}
	dvs := &cdiv1.DataVolumeList{}
	if err := c.List(ctx, dvs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var httpImports []string
	for _, dv := range dvs.Items {
		if dv.Spec.Source != nil && dv.Spec.Source.HTTP != nil {
			httpImports = append(httpImports, dv.Name)
		}
	}
	if len(httpImports) != 1 || httpImports[0] != shared {
		t.Errorf("the HTTP imports are %v, want the shared import %s alone", httpImports, shared)
	}
	requests, sent := disk.server.Counts()
	if sent < disk.size || sent >= 2*disk.size {
		t.Errorf("the image server sent %d bytes in %d requests for %d Machines; one download is %d", sent, requests, machines, disk.size)
	}
	t.Logf("%d Machines: the shared import succeeded %s after the pool was applied, both clones %s; the image server answered %d requests, %d MiB (the image %d MiB); load average %s",
		machines, imported.Round(time.Second), cloned.Round(time.Second), requests, sent>>20, disk.size>>20, loadAverage())

	// The pool goes, then its template.
	t1 := time.Now()
	if err := k.h.DeletePool(ctx, p.Pool); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 10*time.Minute, func() (bool, string) {
		ms, err := k.h.PoolMachines(ctx, p.Pool)
		return err == nil && len(ms) == 0, fmt.Sprintf("Machines %d (%v)", len(ms), err)
	}); err != nil {
		t.Fatalf("the pool's Machines were not deleted: %v", err)
	}
	machinesGone := time.Since(t1)
	if err := c.Delete(ctx, template); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 10*time.Minute, func() (bool, string) {
		var left []string
		if err := c.Get(ctx, templateKey, &infrav1.KubeVirtMachineTemplate{}); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("KubeVirtMachineTemplate %s (%v)", templateKey.Name, err))
		}
		l, err := k.h.Leftovers(ctx, k.workload.Key)
		if err != nil {
			return false, err.Error()
		}
		left = append(left, l...)
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		for _, pod := range pods.Items {
			left = append(left, "Pod "+pod.Name)
		}
		services := &corev1.ServiceList{}
		if err := c.List(ctx, services, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		for _, s := range services.Items {
			left = append(left, "Service "+s.Name)
		}
		for claim, dir := range volumes {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				left = append(left, fmt.Sprintf("the volume of claim %s (%s: %v)", claim, dir, err))
			}
		}
		return len(left) == 0, strings.Join(left, "\n")
	}); err != nil {
		t.Fatalf("something was left behind: %v\ncdi-controller:\n%s", err, cdiLog())
	}
	claims := make([]string, 0, len(volumes))
	for claim := range volumes {
		claims = append(claims, claim)
	}
	t.Logf("the pool's Machines were deleted %s after the pool, and nothing was left %s after it; the claims seen and gone: %v",
		machinesGone.Round(time.Second), time.Since(t1).Round(time.Second), claims)
}
