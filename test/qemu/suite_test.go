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
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/harness"
)

// The suite runs the real-guest scenarios inside the harness: upstream
// Cluster API (MachineDeployment, MachineSet, Machine, MachineHealthCheck)
// with the Kairos bootstrap and KubeVirt infrastructure providers on a
// management apiserver, KubeVirt's real virt-api and virt-controller with
// the QEMU runner booting the guests of their instances and importing
// their DataVolumes (the node side and CDI are stand-ins, test/infra), and
// one workload Cluster whose control plane is a kubeadm-prepared one on the
// host that the guests join. Everything is set up once here and shared:
// the worker disk, the harness, the control plane. Each scenario brings its
// own pool (a MachineDeployment of the example Kairos template) into that
// Cluster. Build tag qemu keeps it out of `go test ./...`.

const (
	kubernetesVersion = "v1.36.3"
	// workerImage is the platform's Kairos image for v1.36, as a pool of
	// the built-in kairos class boots it: a containerDisk reference the
	// runner maps to the worker disk (there is no registry here).
	workerImage = "registry.example.com/cozystack/kairos-worker@sha256:d15cd15cd15cd15cd15cd15cd15cd15cd15cd15cd15cd15cd15cd15cd15cd15c"
	// joinTimeout bounds a pool's Machines from creation to Running with
	// Ready Nodes: about two minutes per guest under TCG on two busy cores.
	joinTimeout = 10 * time.Minute
	poll        = time.Second
	// kairosDiskRef is the containerDisk reference the runner maps to the
	// Kairos disk of hack/kairos-disk when QEMU_KAIROS_DISK=1.
	kairosDiskRef = "registry.example.com/cozystack/kairos-disk@sha256:ca105ca105ca105ca105ca105ca105ca105ca105ca105ca105ca105ca105ca10"
)

var (
	harnessLog = flag.Bool("harness.log", false, "print the controllers' logs (also written to $QEMU_ARTIFACTS/harness.log when set)")

	suiteCtx      context.Context
	disk          Disk
	kairosDisk    *Disk // the Kairos disk, built only with QEMU_KAIROS_DISK=1
	runner        *Runner
	controlPlanes *ControlPlanes
	h             *harness.Harness
	// workload is the one Cluster every pool joins.
	workload *harness.WorkloadCluster
	timings  timingLog
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	suiteCtx = ctx
	started := time.Now()
	artifacts := os.Getenv("QEMU_ARTIFACTS")
	log, closeLog, err := harness.SuiteLogger(*harnessLog, artifacts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "opening the harness log:", err)
		return 1
	}
	defer closeLog()
	klog.SetLogger(log)

	if disk, err = BuildDisk(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "building the worker disk: %v\n", err)
		return 1
	}
	containerDisks := map[string]Disk{workerImage: disk}
	if os.Getenv("QEMU_KAIROS_DISK") == "1" {
		// Opt-in: the first build of the Kairos disk takes more than an
		// hour (docs/real-guests.md), a cached one minutes.
		kd, err := BuildKairosDisk(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "building the Kairos disk: %v\n", err)
			return 1
		}
		kairosDisk = &kd
		containerDisks[kairosDiskRef] = kd
	}
	// With QEMU_ARTIFACTS, every guest's seed, serial logs and QEMU output
	// are kept there (guests/<n>-<namespace>-<vm>/), and virt-api's and
	// virt-controller's logs (kubevirt/).
	if runner, err = NewRunner(ctx, RunnerOptions{Disk: disk, ContainerDisks: containerDisks, Dir: artifacts}); err != nil {
		fmt.Fprintf(os.Stderr, "starting the QEMU runner: %v\n", err)
		return 1
	}
	defer runner.Stop()
	opts := harness.Options{Logger: log, WorkerClasses: true, VMs: runner}
	if artifacts != "" {
		opts.Infra.KubeVirt.LogDir = filepath.Join(artifacts, "kubevirt")
	}
	if h, err = harness.Start(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "starting the harness: %v\n", err)
		return 1
	}
	defer func() {
		if err := h.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the harness:", err)
		}
	}()
	if err := h.ConfigurePlatform(ctx, func(p *workerclassv1.WorkerPlatformSpec) {
		p.KubernetesVersions = []workerclassv1.KubernetesVersion{{Minor: "v1.36", Patch: kubernetesVersion}}
		p.KairosImages = []workerclassv1.KairosImage{{Minor: "v1.36", Reference: workerImage}}
		p.TalosFactory.Version = "v1.13.6"
		p.TalosFactory.SchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	}); err != nil {
		fmt.Fprintln(os.Stderr, "configuring the platform:", err)
		return 1
	}
	controlPlanes = &ControlPlanes{KubernetesVersion: kubernetesVersion}
	key := client.ObjectKey{Namespace: "real-guests", Name: "workload"}
	if workload, err = h.CreateCluster(ctx, key, harness.ClusterOptions{ControlPlanes: controlPlanes}); err != nil {
		fmt.Fprintf(os.Stderr, "creating the workload cluster: %v\n", err)
		return 1
	}
	timings.setUp = time.Since(started)
	code := m.Run()
	fmt.Print(timings.report(Accelerator()))
	return code
}
