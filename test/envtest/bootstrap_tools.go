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

package envtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// KubeadmBinary returns the path of a kubeadm built from k8s.io/kubernetes
// by hack/tools-bins.sh: $KUBEADM_BIN when set, otherwise the cache (built
// on first use).
func KubeadmBinary() (string, error) {
	if bin := os.Getenv("KUBEADM_BIN"); bin != "" {
		return bin, nil
	}
	dir, err := ToolsBinary("kubeadm")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kubeadm"), nil
}

// YipBinary returns the path of the yip binary (github.com/mudler/yip,
// the stage runner Kairos uses): $YIP_BIN when set, otherwise what
// hack/tool.sh installs.
func YipBinary() (string, error) { return HackTool("yip") }

// HackTool returns the path of a pinned tool hack/tool.sh installs (and
// builds on first use): $<NAME>_BIN when set.
func HackTool(name string) (string, error) {
	if bin := os.Getenv(strings.ToUpper(name) + "_BIN"); bin != "" {
		return bin, nil
	}
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "tool.sh"), name) //nolint:gosec,noctx // The harness's own command; it ends on its own.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/tool.sh %s: %w: %s", name, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}
