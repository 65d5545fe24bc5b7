//go:build qemu

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

package qemu

import (
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	"github.com/cozystack/cluster-api-workers/infrastructure/vmspec"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	"github.com/cozystack/cluster-api-workers/test/sim/imageserver"
)

// TestSharedImportBootsGuestsFromOneDownload: a Talos factory class
// resolves to an HTTP import of the worker disk from a counting factory.
// The template's image is imported once as soon as it is resolved (one
// request, the disk's bytes once). Before: a machine that names the import
// itself downloads it again. After: two machines of the template boot
// guests from clones of the shared import; scaled to zero and up again,
// a third clones too: no further request. The
// guests do not join (the Kairos provider does not bootstrap a Talos
// class; their bootstrap data is a plain cloud-config): what is proved is
// where their root disks' bytes came from.
func TestSharedImportBootsGuestsFromOneDownload(t *testing.T) {
	timings.scenario(t)
	g := NewWithT(t)
	p := newPool("shared")
	onlyPool(t, p)
	factory := imageserver.New(disk.Image(), "")
	listener, err := (&net.ListenConfig{}).Listen(suiteCtx, "tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	server := &http.Server{Handler: factory, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(func() { _ = server.Close() })
	factoryURL := "http://" + listener.Addr().String()

	var previousURL string
	g.Expect(h.ConfigurePlatform(suiteCtx, func(p *workerclassv1.WorkerPlatformSpec) {
		previousURL = p.TalosFactory.URL
		p.TalosFactory.URL = factoryURL
	})).To(Succeed())
	t.Cleanup(func() {
		g.Expect(h.ConfigurePlatform(suiteCtx, func(p *workerclassv1.WorkerPlatformSpec) { p.TalosFactory.URL = previousURL })).To(Succeed())
	})
	class := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "talos-shared-import-r1"}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		KubeVirt:  &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{}}},
	}}
	g.Expect(h.Client.Create(suiteCtx, class)).To(Succeed())
	t.Cleanup(func() { g.Expect(client.IgnoreNotFound(h.Client.Delete(suiteCtx, class))).To(Succeed()) })

	ns := workload.Key.Namespace
	spec := infrav1.KubeVirtMachineSpec{
		WorkerClass: &infrav1.WorkerClassSelection{Name: class.Name, PoolSettings: workerclassv1.PoolSettings{Version: "v1.36"}},
		CPU:         &infrav1.CPU{Cores: 2},
		Memory:      ptr.To(resource.MustParse("1536Mi")),
		RootDisk:    &infrav1.RootDisk{Size: ptr.To(resource.MustParse("4Gi"))},
	}
	tmpl := &infrav1.KubeVirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "shared-import", Namespace: ns},
		Spec: infrav1.KubeVirtMachineTemplateSpec{
			Template: infrav1.KubeVirtMachineTemplateResource{Spec: spec},
		},
	}
	g.Expect(h.Client.Create(suiteCtx, tmpl)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(h.Client.Get(suiteCtx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		g.Expect(tmpl.Status.Resolved).NotTo(BeNil())
	}, time.Minute, poll).Should(Succeed())
	g.Expect(tmpl.Status.Resolved.Image.HTTPImport.URL).To(HavePrefix(factoryURL + "/image/"))
	imageURL := tmpl.Status.Resolved.Image.HTTPImport.URL
	st, err := os.Stat(disk.Image())
	g.Expect(err).NotTo(HaveOccurred())
	diskBytes := st.Size()

	var machines []*clusterv1.Machine
	// Other scenarios' templates in the namespace (a classless pool's
	// import) keep their shared imports: only this template's must go.
	ownShared := sharedimage.Name(tmpl)
	t.Cleanup(func() {
		for _, m := range machines {
			_ = h.Client.Delete(suiteCtx, m)
		}
		_ = h.Client.Delete(suiteCtx, tmpl)
		g.Eventually(func(g Gomega) {
			list := &cdiv1.DataVolumeList{}
			g.Expect(h.Client.List(suiteCtx, list, client.InNamespace(ns))).To(Succeed())
			for _, dv := range list.Items {
				g.Expect(dv.Name).NotTo(HavePrefix(p.Deployment().Name+"-"), "DataVolume %s is left", dv.Name)
				g.Expect(dv.Name).NotTo(Equal(ownShared), "the shared import %s is left", dv.Name)
			}
		}, 5*time.Minute, poll).Should(Succeed())
	})
	// create creates a Machine with plain bootstrap data and its
	// KubeVirtMachine, as a MachineSet of the template would (image nil)
	// or naming its own image, and returns when it created them.
	create := func(name string, image *infrav1.ImageSource) time.Time {
		t.Helper()
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: workload.Key.Name}},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{"value": []byte("#cloud-config\nhostname: " + name + "\n"), "format": []byte("cloud-config")},
		}
		g.Expect(h.Client.Create(suiteCtx, secret)).To(Succeed())
		m := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: workload.Key.Name}},
			Spec: clusterv1.MachineSpec{
				ClusterName: workload.Key.Name,
				Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(secret.Name)},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "KubeVirtMachine", Name: name},
			},
		}
		created := time.Now()
		g.Expect(h.Client.Create(suiteCtx, m)).To(Succeed())
		machines = append(machines, m)
		kvmSpec := *spec.DeepCopy()
		if image != nil {
			// A machine naming its own image selects no class.
			kvmSpec.WorkerClass, kvmSpec.Image = nil, image
		}
		kvm := &infrav1.KubeVirtMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{clusterv1.ClusterNameLabel: workload.Key.Name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine",
					Name: m.Name, UID: m.UID, Controller: ptr.To(true)}}},
			Spec: kvmSpec,
		}
		if image == nil {
			kvm.Annotations = map[string]string{
				clusterv1.TemplateClonedFromNameAnnotation:      tmpl.Name,
				clusterv1.TemplateClonedFromGroupKindAnnotation: "KubeVirtMachineTemplate.infrastructure.cozystack.io",
			}
		}
		g.Expect(h.Client.Create(suiteCtx, kvm)).To(Succeed())
		return created
	}
	// started waits for the machine's guest and checks that it boots its
	// root DataVolume's volume file; it returns the DataVolume and the
	// time from the Machine's creation to QEMU's start.
	started := func(name string, created time.Time) (*cdiv1.DataVolume, time.Duration) {
		t.Helper()
		var guest Guest
		g.Eventually(func(g Gomega) {
			guest = guestOf(g, client.ObjectKey{Namespace: ns, Name: name})
		}, 10*time.Minute, poll).Should(Succeed(), func() string { return describeInfrastructure(p) })
		dv := &cdiv1.DataVolume{}
		g.Expect(h.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: vmspec.RootDataVolumeName(name)}, dv)).To(Succeed())
		pvc := &corev1.PersistentVolumeClaim{}
		g.Expect(h.Client.Get(suiteCtx, client.ObjectKeyFromObject(dv), pvc)).To(Succeed())
		pv := &corev1.PersistentVolume{}
		g.Expect(h.Client.Get(suiteCtx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
		g.Expect(guest.RootImage).To(Equal(cdisim.DiskImage(pv)), "guest %s boots its root DataVolume", name)
		return dv, guest.Started.Sub(created)
	}
	name := func(suffix string) string { return p.Deployment().Name + "-" + suffix }

	// The resolved template's image is imported once, before any machine
	// needs it.
	shared := sharedimage.Name(tmpl)
	sharedDV := &cdiv1.DataVolume{}
	g.Eventually(func(g Gomega) {
		g.Expect(h.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: shared}, sharedDV)).To(Succeed())
		g.Expect(sharedDV.Status.Phase).To(Equal(cdiv1.Succeeded))
	}, 10*time.Minute, poll).Should(Succeed(), func() string { return describeInfrastructure(p) })
	requests, bytes := factory.Counts()
	g.Expect(requests).To(Equal(1))
	g.Expect(bytes).To(Equal(diskBytes))
	t.Logf("shared import %s: succeeded %s after the template was created; %d request, %d bytes",
		shared, time.Since(tmpl.CreationTimestamp.Time).Round(time.Second), requests, bytes)

	// Before: a machine that names the import itself downloads it again.
	created := create(name("own"), &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: imageURL}})
	ownDV, ownTime := started(name("own"), created)
	g.Expect(ownDV.Spec.Source.HTTP).NotTo(BeNil())
	requests, bytes = factory.Counts()
	g.Expect(requests).To(Equal(2))
	g.Expect(bytes).To(Equal(2 * diskBytes))
	t.Logf("own import: guest started %s after its Machine; the factory served %d requests, %d bytes", ownTime.Round(time.Second), requests, bytes)
	g.Expect(h.Client.Delete(suiteCtx, machines[0])).To(Succeed())

	// After: two machines of the template, created together, boot from
	// clones of the one download.
	createdAt := map[string]time.Time{}
	for _, suffix := range []string{"0", "1"} {
		createdAt[name(suffix)] = create(name(suffix), nil)
	}
	for _, suffix := range []string{"0", "1"} {
		dv, elapsed := started(name(suffix), createdAt[name(suffix)])
		g.Expect(dv.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: shared}))
		t.Logf("%s: guest started %s after its Machine", name(suffix), elapsed.Round(time.Second))
	}
	requests, bytes = factory.Counts()
	g.Expect(requests).To(Equal(2), "the own import and one shared import")
	g.Expect(bytes).To(Equal(2 * diskBytes))

	// The pool scales to zero (the guest node runs two guests at most),
	// then up again: the new machine clones the shared import without a
	// request.
	for _, m := range machines[1:] {
		g.Expect(h.Client.Delete(suiteCtx, m)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		for _, guest := range runner.Guests() {
			if guest.VM.Namespace == ns && strings.HasPrefix(guest.VM.Name, p.Deployment().Name+"-") {
				g.Expect(guest.Exited.IsZero()).To(BeFalse(), "the guest of %s still runs", guest.VM.Name)
			}
		}
	}, 5*time.Minute, poll).Should(Succeed(), func() string { return describeInfrastructure(p) })
	created = create(name("2"), nil)
	dv, laterTime := started(name("2"), created)
	g.Expect(dv.Spec.Source.PVC.Name).To(Equal(shared))
	requests, bytes = factory.Counts()
	g.Expect(requests).To(Equal(2), "the later machine downloaded nothing")
	g.Expect(bytes).To(Equal(2 * diskBytes))
	t.Logf("%s (after scaling to zero): guest started %s after its Machine; the factory served %d requests, %d bytes (the disk is %d bytes)",
		name("2"), laterTime.Round(time.Second), requests, bytes, diskBytes)
}
