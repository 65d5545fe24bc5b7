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

// Package imports benchmarks what a pool whose image is an HTTP import
// downloads, and how long its machines take to run, with every machine
// importing the image itself (before) and with the template's shared
// import cloned per machine (after). The harness runs the real providers,
// Cluster API, KubeVirt's virt-controller and virt-api, and CDI's stand-in
// with its FileImporter: the bytes are downloaded from a local image
// server and written to volume files for real; the VMs boot in the node
// simulator. `make bench-imports` runs it (docs/benchmarks.md).
package imports

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/infra"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	nodesim "github.com/cozystack/cluster-api-workers/test/sim/guest"
	"github.com/cozystack/cluster-api-workers/test/sim/imageserver"
)

const (
	// imageSize is the image's size on the wire; imageData of it is
	// random data, the rest zeros the importer writes as holes, as a
	// worker disk is mostly holes.
	imageSize = 64 << 20
	imageData = 16 << 20
	className = "talos-import-bench-r1"
	// machinesEnv overrides the machine counts, space-separated.
	machinesEnv = "IMPORT_BENCH_MACHINES"
	// uplinkEnv limits the image server's bandwidth, shared by all
	// downloads, in Mbit/s; unset or 0 is a loopback copy's speed.
	uplinkEnv  = "IMPORT_BENCH_UPLINK_MBPS"
	runTimeout = 20 * time.Minute
	poll       = 250 * time.Millisecond
)

// bench is one harness, cluster, image server and class for every run.
type bench struct {
	h        *harness.Harness
	cluster  client.ObjectKey
	server   *imageserver.Server
	imageURL string
	// spec is the machines' shape; the class-based runs add the class.
	spec infrav1.KubeVirtMachineSpec
}

// BenchmarkImports scales a pool whose image is an HTTP import from zero
// to N machines, each run from nothing downloaded: "own" machines each
// name the import (every machine downloads the image, as before the
// shared import), "shared" machines come from a template whose shared
// import they clone. It reports per run the requests and MiB the image
// server sent and the time from the machines' creation to the first, the
// median and the last VirtualMachineInstance Running.
func BenchmarkImports(b *testing.B) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		b.Skip("needs the harness's binaries: run `make bench-imports`")
	}
	counts := []int{10, 100}
	if v := os.Getenv(machinesEnv); v != "" {
		counts = nil
		for _, f := range strings.Fields(v) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("%s: %q is not a machine count", machinesEnv, f)
			}
			counts = append(counts, n)
		}
	}
	uplink := 0
	if v := os.Getenv(uplinkEnv); v != "" {
		mbps, err := strconv.Atoi(v)
		if err != nil || mbps < 0 {
			b.Fatalf("%s: %q is not a bandwidth in Mbit/s", uplinkEnv, v)
		}
		uplink = mbps * 1000 * 1000 / 8
	}
	s := start(b, uplink)
	for _, n := range counts {
		b.Run(fmt.Sprintf("own/N=%d", n), func(b *testing.B) { s.run(b, n, false) })
		b.Run(fmt.Sprintf("shared/N=%d", n), func(b *testing.B) { s.run(b, n, true) })
	}
}

// start starts the harness with the file importer, the image server (its
// uplink limited to uplink bytes a second, when more than zero), the
// platform's image factory pointed at it, the class and a cluster.
func start(b *testing.B, uplink int) *bench {
	b.Helper()
	ctx := b.Context()
	dir := b.TempDir()
	image := filepath.Join(dir, "image.raw")
	writeImage(b, image)
	s := &bench{server: imageserver.New(image, "").WithUplink(uplink)}
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	server := &http.Server{Handler: s.server, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()
	b.Cleanup(func() { _ = server.Close() })
	factoryURL := "http://" + listener.Addr().String()

	s.h, err = harness.Start(ctx, harness.Options{
		WorkerClasses: true,
		Infra: infra.Options{CDI: cdisim.Options{
			Importer:  cdisim.FileImporter{},
			VolumeDir: filepath.Join(dir, "volumes"),
		}},
	})
	if err != nil {
		b.Fatalf("starting the harness: %v", err)
	}
	b.Cleanup(func() {
		if err := s.h.Stop(); err != nil {
			b.Errorf("stopping the harness: %v", err)
		}
	})
	if err := s.h.ConfigurePlatform(ctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: harness.ControlPlaneKubernetesVersion}}
		p.TalosFactory = workerclassv1.TalosFactoryDefaults{URL: factoryURL, Version: "v1.13.6",
			SchematicID: "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"}
	}); err != nil {
		b.Fatalf("configuring the platform: %v", err)
	}
	class := &workerclassv1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: className}, Spec: workerclassv1.WorkerClassSpec{
		Bootstrap: workerclassv1.BootstrapTalos,
		KubeVirt:  &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{}}},
	}}
	if err := s.h.Client.Create(ctx, class); err != nil {
		b.Fatalf("creating the WorkerClass: %v", err)
	}
	w, err := s.h.CreateCluster(ctx, client.ObjectKey{Namespace: "imports", Name: "bench"}, harness.ClusterOptions{})
	if err != nil {
		b.Fatalf("creating the cluster: %v", err)
	}
	s.cluster = w.Key
	s.spec = infrav1.KubeVirtMachineSpec{
		CPU:      &infrav1.CPU{Cores: 1},
		Memory:   ptr.To(resource.MustParse("1Gi")),
		RootDisk: &infrav1.RootDisk{Size: ptr.To(resource.MustParse("1Gi"))},
	}
	// The class resolves to an import from the factory; the own-import
	// machines name that URL themselves. Every run's template resolves as
	// the probe does, so its machines clone the shared import the probe
	// names: both sources boot before any machine is created.
	probe := s.template(b, "probe")
	s.imageURL = probe.Status.Resolved.Image.HTTPImport.URL
	s.h.Nodes.SetImage(s.imageURL, bootImage())
	s.h.Nodes.SetImage("PVC "+probe.Namespace+"/"+sharedimage.Name(probe), bootImage())
	s.deleteTemplate(b, probe)
	return s
}

// bootImage is what the image boots in the node simulator: the machines'
// bootstrap data is plain cloud-config, so they run without joining.
func bootImage() nodesim.Image {
	return nodesim.Image{KubernetesVersion: harness.ControlPlaneKubernetesVersion, OSImage: "Talos (imported)", CloudInit: true}
}

// writeImage writes the image: imageData random bytes, then zeros up to
// imageSize.
func writeImage(b *testing.B, path string) {
	b.Helper()
	data := make([]byte, imageData)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(path, imageSize); err != nil {
		b.Fatal(err)
	}
}

// run creates n machines at once and waits until each one's instance is
// Running, then deletes them and what they left.
func (s *bench) run(b *testing.B, n int, shared bool) {
	b.Helper()
	prefix := fmt.Sprintf("own-%d", n)
	if shared {
		prefix = fmt.Sprintf("shared-%d", n)
	}
	for range b.N {
		requests0, bytes0 := s.server.Counts()
		start := time.Now()
		var template *infrav1.KubeVirtMachineTemplate
		if shared {
			// The pool's template and its machines are created together,
			// as a new pool's are.
			template = s.createTemplate(b, prefix)
		}
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s-%d", prefix, i)
			s.createMachine(b, names[i], template)
		}
		running := s.waitRunning(b, names, start)
		requests, sent := s.server.Counts()
		slices.Sort(running)
		b.ReportMetric(float64(requests-requests0), "requests")
		b.ReportMetric(float64(sent-bytes0)/(1<<20), "MiB-fetched")
		b.ReportMetric(running[0].Seconds(), "first-s")
		b.ReportMetric(running[len(running)/2].Seconds(), "median-s")
		b.ReportMetric(running[len(running)-1].Seconds(), "last-s")
		b.StopTimer()
		s.cleanUp(b, names, template)
		b.StartTimer()
	}
}

// template creates a class-based template and returns it resolved.
func (s *bench) template(b *testing.B, name string) *infrav1.KubeVirtMachineTemplate {
	b.Helper()
	return s.resolved(b, s.createTemplate(b, name))
}

func (s *bench) createTemplate(b *testing.B, name string) *infrav1.KubeVirtMachineTemplate {
	b.Helper()
	spec := *s.spec.DeepCopy()
	spec.WorkerClass = &infrav1.WorkerClassSelection{Name: className, PoolSettings: workerclassv1.PoolSettings{Version: "v1.36"}}
	t := &infrav1.KubeVirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cluster.Namespace},
		Spec:       infrav1.KubeVirtMachineTemplateSpec{Template: infrav1.KubeVirtMachineTemplateResource{Spec: spec}},
	}
	if err := s.h.Client.Create(b.Context(), t); err != nil {
		b.Fatalf("creating KubeVirtMachineTemplate %s: %v", name, err)
	}
	return t
}

// resolved waits for the template's resolution.
func (s *bench) resolved(b *testing.B, t *infrav1.KubeVirtMachineTemplate) *infrav1.KubeVirtMachineTemplate {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := &infrav1.KubeVirtMachineTemplate{}
		if err := s.h.Client.Get(b.Context(), client.ObjectKeyFromObject(t), got); err != nil {
			b.Fatal(err)
		}
		if got.Status.Resolved != nil {
			return got
		}
		if time.Now().After(deadline) {
			b.Fatalf("KubeVirtMachineTemplate %s was not resolved in a minute", t.Name)
		}
		time.Sleep(poll)
	}
}

// createMachine creates a Machine with plain bootstrap data and its
// KubeVirtMachine: as a MachineSet of template creates it, or naming the
// image's import itself when template is nil.
func (s *bench) createMachine(b *testing.B, name string, template *infrav1.KubeVirtMachineTemplate) {
	b.Helper()
	ctx := b.Context()
	ns, cluster := s.cluster.Namespace, s.cluster.Name
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: ns, Labels: labels},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#cloud-config\nhostname: " + name + "\n"), "format": []byte("cloud-config")},
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(secret.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "KubeVirtMachine", Name: name},
		},
	}
	for _, obj := range []client.Object{secret, m} {
		if err := s.h.Client.Create(ctx, obj); err != nil {
			b.Fatalf("creating %s: %v", name, err)
		}
	}
	kvm := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine",
			Name: m.Name, UID: m.UID, Controller: ptr.To(true)}}}}
	if template != nil {
		kvm.Spec = *template.Spec.Template.Spec.DeepCopy()
		kvm.Annotations = map[string]string{
			clusterv1.TemplateClonedFromNameAnnotation:      template.Name,
			clusterv1.TemplateClonedFromGroupKindAnnotation: "KubeVirtMachineTemplate.infrastructure.cozystack.io",
		}
	} else {
		kvm.Spec = *s.spec.DeepCopy()
		kvm.Spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: s.imageURL}}
	}
	if err := s.h.Client.Create(ctx, kvm); err != nil {
		b.Fatalf("creating KubeVirtMachine %s: %v", name, err)
	}
}

// waitRunning returns, per machine, the time from start until its
// VirtualMachineInstance was first seen Running.
func (s *bench) waitRunning(b *testing.B, names []string, start time.Time) []time.Duration {
	b.Helper()
	ctx := b.Context()
	running := map[string]time.Duration{}
	deadline := start.Add(runTimeout)
	for len(running) < len(names) {
		list := &kubevirtv1.VirtualMachineInstanceList{}
		if err := s.h.Client.List(ctx, list, client.InNamespace(s.cluster.Namespace)); err != nil {
			b.Fatal(err)
		}
		now := time.Since(start)
		for _, vmi := range list.Items {
			if _, seen := running[vmi.Name]; !seen && slices.Contains(names, vmi.Name) && vmi.Status.Phase == kubevirtv1.Running {
				running[vmi.Name] = now
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d instances Running after %s", len(running), len(names), runTimeout)
		}
		time.Sleep(poll)
	}
	out := make([]time.Duration, 0, len(running))
	for _, d := range running {
		out = append(out, d)
	}
	return out
}

// cleanUp deletes the run's Machines and template and waits until no
// DataVolume is left, the shared import included, so that the next run
// downloads from nothing.
func (s *bench) cleanUp(b *testing.B, names []string, template *infrav1.KubeVirtMachineTemplate) {
	b.Helper()
	ctx := b.Context()
	ns := s.cluster.Namespace
	for _, name := range names {
		for _, obj := range []client.Object{
			&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: ns}},
		} {
			if err := s.h.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
				b.Fatal(err)
			}
		}
	}
	if template != nil {
		s.deleteTemplate(b, template)
		return
	}
	s.waitNoDataVolumes(b)
}

// deleteTemplate deletes a template and waits until its machines' and its
// shared import's DataVolumes are gone.
func (s *bench) deleteTemplate(b *testing.B, t *infrav1.KubeVirtMachineTemplate) {
	b.Helper()
	if err := s.h.Client.Delete(b.Context(), t); err != nil && !apierrors.IsNotFound(err) {
		b.Fatal(err)
	}
	s.waitNoDataVolumes(b)
}

func (s *bench) waitNoDataVolumes(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(runTimeout)
	for {
		list := &cdiv1.DataVolumeList{}
		if err := s.h.Client.List(b.Context(), list, client.InNamespace(s.cluster.Namespace)); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d DataVolumes left after %s, %s among them", len(list.Items), runTimeout, list.Items[0].Name)
		}
		time.Sleep(poll)
	}
}
