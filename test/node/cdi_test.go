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
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	certutil "k8s.io/client-go/util/cert"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/reconcilers/sharedimage"
	"github.com/cozystack/cluster-api-workers/test/harness"
	"github.com/cozystack/cluster-api-workers/test/node"
	cdisim "github.com/cozystack/cluster-api-workers/test/sim/cdi"
	"github.com/cozystack/cluster-api-workers/test/sim/imageserver"
)

// TestRealCDIImportsOverHTTP: CDI's own cdi-controller (v1.65.0, built
// from its module, a host process as virt-controller is) imports a pool
// template's HTTP image with its own importer Pod on the real node. The
// pool is autoscaled at zero, so its template's shared import is the only
// DataVolume (a machine's would be a clone, which needs cdi-apiserver).
// The image is the worker disk as raw, served over TLS by
// test/sim/imageserver on the host with a certificate of a CA the
// template carries (httpImport.caBundle, which the provider hands CDI as
// the DataVolume's certConfigMap), reached by the importer Pod through the
// node's forward at tenantHost. The importer (CDI's, with nbdkit and qemu-img, from the
// image built over hack/node/cdi.sh's root) writes disk.img into the
// claim's volume, which the stand-in's provisioner made; the DataVolume
// reaches Succeeded and the volume holds the served disk.
func TestRealCDIImportsOverHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	const namespace = "node-real-cdi"

	disk := serveWorkerDisk(t, true)
	k := startKubeVirtNodeWith(ctx, t, namespace, nodeSetup{realCDI: true, forwards: disk.forwards})
	c := k.h.Management.Client
	cdiLog := func() string { return tail(k.h.RealCDI.Process.Tail(), 40) }

	p := k.pool("cdi")
	p.Autoscaled = true
	p.apply(ctx, t, map[string]string{"WORKER_MIN_COUNT": "0", "WORKER_MAX_COUNT": "1"}, disk.imports()...)

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
	dvKey := client.ObjectKey{Namespace: namespace, Name: sharedimage.Name(template)}

	// The DataVolume's phases as CDI reports them, each the first time.
	dv := &cdiv1.DataVolume{}
	var phases []string
	t0 := time.Now()
	var importer corev1.Pod
	// CDI v1.65's importer downloads an HTTP image into a scratch claim
	// (<claim>-scratch) before it converts it into the claim; its first
	// Pod only validates the source and asks for that claim.
	scratchSeen := false
	if err := waitFor(ctx, 20*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, dvKey, dv); err != nil {
			return false, err.Error()
		}
		phase := fmt.Sprintf("%s %s", dv.Status.Phase, dv.Status.Progress)
		if len(phases) == 0 || !strings.HasPrefix(phases[len(phases)-1], phase+" ") {
			phases = append(phases, fmt.Sprintf("%s at %s", phase, time.Since(t0).Round(time.Second)))
		}
		if !scratchSeen {
			scratch := &corev1.PersistentVolumeClaim{}
			scratchSeen = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: dvKey.Name + "-scratch"}, scratch) == nil
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"app": "containerized-data-importer"}); err == nil && len(pods.Items) > 0 {
			importer = pods.Items[0]
		}
		return dv.Status.Phase == cdiv1.Succeeded, fmt.Sprintf("phase %s, progress %s, conditions %+v", dv.Status.Phase, dv.Status.Progress, dv.Status.Conditions)
	}); err != nil {
		t.Fatalf("the shared import did not succeed: %v\nphases %v\nimporter Pod %s: %+v\n%s\ncdi-controller:\n%s", err, phases, importer.Name, importer.Status, podLogs(k.node, &importer), cdiLog())
	}
	t.Logf("the shared import (%d MiB) went %s; scratch claim seen: %v", disk.size>>20, strings.Join(phases, ", "), scratchSeen)

	if src := dv.Spec.Source; src == nil || src.HTTP == nil || src.HTTP.CertConfigMap == "" {
		t.Errorf("the shared import's source is %+v, want an HTTP import with the template's CA", dv.Spec.Source)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, dvKey, pvc); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	t.Logf("claim %s requests %s of class %q, access modes %v, volume mode %v; annotations %v",
		pvc.Name, pvc.Spec.Resources.Requests.Storage(), ptrString(pvc.Spec.StorageClassName), pvc.Spec.AccessModes, ptrString((*string)(pvc.Spec.VolumeMode)), pvc.Annotations)
	if err := samePrefix(disk.raw, cdisim.DiskImage(pv)); err != nil {
		t.Errorf("the claim's disk.img is not the served disk: %v", err)
	}
	if fi, err := os.Stat(cdisim.DiskImage(pv)); err == nil {
		t.Logf("disk.img: %d bytes (the served disk %d)", fi.Size(), disk.size)
	}
	requests, sent := disk.server.Counts()
	t.Logf("the image server answered %d requests, %d MiB; load average %s", requests, sent>>20, loadAverage())
	if k.artifacts != "" {
		_ = os.WriteFile(filepath.Join(k.artifacts, "cdi-phases.txt"), []byte(strings.Join(phases, "\n")+"\n"), 0o600)
	}
}

// workerDisk is the worker container disk's image as raw, served by
// test/sim/imageserver on the host for an HTTP import.
type workerDisk struct {
	server *imageserver.Server
	// raw is the served file, size its size.
	raw  string
	size int64
	// url is where the importer fetches it; ca is the PEM CA bundle that
	// verifies the server ("" over plain HTTP).
	url, ca string
	// forwards are what the node needs to reach url.
	forwards map[string]string
}

// serveWorkerDisk serves the worker disk. For real CDI (onNode), whose
// importer Pod runs on the node, over TLS with a certificate for
// tenantHost, signed by a CA of the test's, reached through a forward of
// the node; for the stand-in, whose importer runs on the host, over plain
// HTTP on the host's loopback. It builds the worker disk first (cached):
// the server listens before the node starts, which forwards its port.
func serveWorkerDisk(t *testing.T, onNode bool) *workerDisk {
	t.Helper()
	t0 := time.Now()
	worker, err := node.BuildWorkerContainerDisk()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := worker.RawDisk()
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(raw)
	if err != nil {
		t.Fatal(err)
	}
	const imagePath = "/worker-disk.img"
	d := &workerDisk{server: imageserver.New(raw, imagePath), raw: raw, size: st.Size()}
	var lc net.ListenConfig
	listener, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpServer := &http.Server{Handler: d.server, ReadHeaderTimeout: 10 * time.Second}
	t.Cleanup(func() { _ = httpServer.Close() })
	if !onNode {
		go func() { _ = httpServer.Serve(listener) }()
		d.url = "http://" + listener.Addr().String() + imagePath
		t.Logf("the worker disk as raw (%d MiB) converted or reused in %s, served at %s", d.size>>20, time.Since(t0).Round(time.Second), d.url)
		return d
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(tenantHost, []net.IP{net.ParseIP(tenantHost)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// The PEM holds the serving certificate, then its CA.
	chain, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(chain) < 2 {
		t.Fatalf("the image server's certificate: %v", err)
	}
	ca, err := certutil.EncodeCertificates(chain[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	httpServer.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	go func() { _ = httpServer.ServeTLS(listener, "", "") }()
	port := strconv.Itoa(listener.Addr().(*net.TCPAddr).Port)
	d.url, d.ca = "https://"+net.JoinHostPort(tenantHost, port)+imagePath, string(ca)
	d.forwards = map[string]string{net.JoinHostPort(tenantHost, port): listener.Addr().String()}
	t.Logf("the worker disk as raw (%d MiB) converted or reused in %s, served at %s (on the host at %s)", d.size>>20, time.Since(t0).Round(time.Second), d.url, listener.Addr())
	return d
}

// imports are the template edits of a pool booting the disk from a
// classless HTTP import of exactly its size (the stand-in, as CDI, refuses
// an image larger than its claim), with a ConfigDrive seed; with the
// server's CA in the template when it has one.
func (d *workerDisk) imports() []func(*unstructured.Unstructured, map[string]any) {
	edits := []func(*unstructured.Unstructured, map[string]any){
		harness.ClasslessImport(d.url, resource.NewQuantity(d.size, resource.BinarySI).String(), string(infrav1.ConfigDriveDatasource)),
	}
	if d.ca != "" {
		edits = append(edits, func(_ *unstructured.Unstructured, machine map[string]any) {
			machine["image"].(map[string]any)["httpImport"].(map[string]any)["caBundle"] = d.ca
		})
	}
	return edits
}

func ptrString(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// samePrefix checks that file b starts with all of file a's bytes.
func samePrefix(a, b string) error {
	fa, err := os.Open(a) //nolint:gosec // Files of the test.
	if err != nil {
		return err
	}
	defer func() { _ = fa.Close() }()
	fb, err := os.Open(b) //nolint:gosec // Files of the test.
	if err != nil {
		return err
	}
	defer func() { _ = fb.Close() }()
	bufA, bufB := make([]byte, 4<<20), make([]byte, 4<<20)
	var off int64
	for {
		n, errA := io.ReadFull(fa, bufA)
		if n > 0 {
			if _, err := io.ReadFull(fb, bufB[:n]); err != nil {
				return fmt.Errorf("%s ends before %d bytes: %w", b, off+int64(n), err)
			}
			if !bytes.Equal(bufA[:n], bufB[:n]) {
				return fmt.Errorf("they differ in the %d bytes at %d", n, off)
			}
			off += int64(n)
		}
		if errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF) {
			return nil
		}
		if errA != nil {
			return errA
		}
	}
}
