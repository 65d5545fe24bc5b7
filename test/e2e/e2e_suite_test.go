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

// Package e2e runs the providers for real: a kind management cluster with
// KubeVirt and CDI, Cluster API and both providers installed by clusterctl
// from the release manifests, and a second kind cluster as the tenant's
// control plane that the Kairos workers join. It covers join, replacement
// and scale from zero with the cluster autoscaler.
//
// It needs Docker, kind, kubectl, network access to the KubeVirt, CDI,
// Cluster API and autoscaler releases, and a Kairos worker container disk;
// it is opt-in (E2E=1) and skips with the reason when anything is missing.
// See docs/testing.md.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// config is the suite's environment, from E2E_* variables.
type config struct {
	// kairosImage is the worker container disk, pinned by digest
	// (E2E_KAIROS_IMAGE, required).
	kairosImage string
	// kubernetesVersion is the kubelet version of that disk and of the
	// tenant control plane (E2E_KUBERNETES_VERSION).
	kubernetesVersion string
	// tenantNodeImage is the kind node image of the tenant control plane
	// (E2E_TENANT_NODE_IMAGE); its Kubernetes version must be
	// kubernetesVersion.
	tenantNodeImage string
	kubevirtVersion string
	cdiVersion      string
	// autoscalerImage is the cluster autoscaler
	// (E2E_AUTOSCALER_IMAGE).
	autoscalerImage string
	// keep leaves the kind clusters running after the suite
	// (E2E_SKIP_CLEANUP=1).
	keep bool
	// workDir holds kubeconfigs, the release and the clusterctl repository.
	workDir string
}

var cfg config

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func loadConfig() config {
	return config{
		kairosImage:       os.Getenv("E2E_KAIROS_IMAGE"),
		kubernetesVersion: env("E2E_KUBERNETES_VERSION", "v1.35.0"),
		tenantNodeImage:   env("E2E_TENANT_NODE_IMAGE", "kindest/node:v1.35.0"),
		kubevirtVersion:   env("E2E_KUBEVIRT_VERSION", "v1.7.0"),
		cdiVersion:        env("E2E_CDI_VERSION", "v1.65.0"),
		autoscalerImage:   env("E2E_AUTOSCALER_IMAGE", "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0"),
		keep:              os.Getenv("E2E_SKIP_CLEANUP") == "1",
	}
}

// skipReason says why the suite cannot run here, or "".
func skipReason(ctx context.Context, c config) string {
	if os.Getenv("E2E") != "1" {
		return "the kind + KubeVirt suite is opt-in: set E2E=1 (see docs/testing.md)"
	}
	for _, tool := range []string{"docker", "kind", "kubectl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("%s is not installed; the suite needs Docker, kind and kubectl", tool)
		}
	}
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Sprintf("the Docker daemon is not reachable (docker info: %s)", strings.TrimSpace(string(out)))
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, url := range []string{"https://github.com", "https://registry.k8s.io", "https://quay.io"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, http.NoBody)
		if err != nil {
			return fmt.Sprintf("checking network access to %s: %v", url, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Sprintf("no network access to %s (%v); the suite downloads KubeVirt, CDI, Cluster API and images", url, err)
		}
		_ = resp.Body.Close()
	}
	if c.kairosImage == "" || !strings.Contains(c.kairosImage, "@sha256:") {
		return "E2E_KAIROS_IMAGE must name a Kairos worker container disk with kubeadm, pinned by digest (registry/repository@sha256:...)"
	}
	return ""
}

func TestE2E(t *testing.T) {
	cfg = loadConfig()
	if reason := skipReason(t.Context(), cfg); reason != "" {
		t.Skip(reason)
	}
	RegisterFailHandler(Fail)
	suite, reporter := GinkgoConfiguration()
	suite.Timeout = 90 * time.Minute
	reporter.Verbose = true
	RunSpecs(t, "kind + KubeVirt end-to-end", suite, reporter)
}

// ctx bounds every call of the suite.
func ctx() context.Context { return context.Background() }
