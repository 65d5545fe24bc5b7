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

package cloudconfig

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
)

// FuzzRender feeds arbitrary labels, taints, kubelet flags, files and keys
// to the renderer: the output must always be a valid cloud-config whose
// structure is exactly what the input asks for, with every user string
// coming back unchanged and no key injected.
func FuzzRender(f *testing.F) {
	f.Add("vm-1", "example.com/tier", "batch", "dedicated", "gpu", "max-pods", "110", "/etc/motd", []byte("hello\n"), "ssh-ed25519 AAAA key", false)
	f.Add("vm-2", "a\nb: c", "v: w", "k\n- x", "'\"", "x\ncluster:", "{{ .Values }}", "/etc/a\n- path: /x", []byte("---\nstages: {}\n"), "key\nusers: {}", true)
	f.Add("vm-3", "", "", "", "", "", "", "/bin", []byte{0, 0xff, '{', '{'}, "", false)
	f.Add("vm-4", "#", "&anchor", "*alias", "!!binary", "? key", "- item", "/etc/%", []byte("\r\n\t\x1b[0m"), "\ufeff", true)
	f.Fuzz(func(t *testing.T, hostname, labelKey, labelValue, taintKey, taintValue, argName, argValue, path string, content []byte, sshKey string, provider bool) {
		in := minimalInput()
		used := []string{sshKey}
		if hostname != "" {
			in.Hostname = hostname
			used = append(used, hostname)
		}
		if provider {
			in.Mode = bootstrapv1.JoinModeClusterProvider
			in.ClusterToken = "0123456789abcdef"
			in.KubernetesVersion = "v1.35.6"
		}
		if labelKey != "" {
			in.NodeLabels = map[string]string{labelKey: labelValue}
			used = append(used, labelKey, labelValue)
		}
		if taintKey != "" {
			in.NodeTaints = []corev1.Taint{{Key: taintKey, Value: taintValue, Effect: corev1.TaintEffectNoExecute}}
			used = append(used, taintKey, taintValue)
		}
		if argName != "" {
			in.KubeletExtraArgs = []Arg{{Name: argName, Value: argValue}}
			used = append(used, argName, argValue)
		}
		if path != "" {
			in.Files = []File{{Path: path, Content: content, Permissions: 0o600}}
			used = append(used, path)
		}
		in.SSHAuthorizedKey = sshKey
		out, err := Render(in)
		valid := true
		for _, s := range used {
			valid = valid && IsText(s)
		}
		if !valid {
			if err == nil {
				t.Fatal("Render accepted a string that is not UTF-8 text")
			}
			return
		}
		if err != nil {
			t.Fatalf("Render failed on valid join parameters: %v", err)
		}
		checkStructure(t, in, out)
	})
}
