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
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// TestKubeVirtWritesTheSeed: the guests' cloud-init disks are KubeVirt's
// own (pkg/cloud-init, as virt-launcher calls it): the user data byte for
// byte, and the metadata KubeVirt derives from the instance, which is not
// what the tier's own writer guessed before (docs/real-guests.md#seeds):
// NoCloud's meta-data is JSON whose instance-id is the firmware UUID, not
// the VM's name; ConfigDrive's meta_data.json has instance_id
// <name>.<namespace> beside the uuid; the hostname is the instance's
// spec.hostname.
func TestKubeVirtWritesTheSeed(t *testing.T) {
	const userData = "#cloud-config\nhostname: pool-abc\n# bytes kept as they are: \x01\n"
	for _, tc := range []struct {
		kind     SeedKind
		label    string
		files    []string
		metaFile string
		meta     map[string]any
	}{
		{NoCloud, "cidata", []string{"meta-data", "user-data"}, "meta-data",
			map[string]any{"instance-id": "7f0c6d51-08a9-5d6e-9d4e-8c3b2a1f0e11", "local-hostname": "pool-abc-host"}},
		{ConfigDrive, "config-2", []string{"openstack/latest/meta_data.json", "openstack/latest/user_data"}, "openstack/latest/meta_data.json",
			map[string]any{"instance_id": "pool-abc.tenant", "uuid": "7f0c6d51-08a9-5d6e-9d4e-8c3b2a1f0e11", "hostname": "pool-abc-host"}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			g := NewWithT(t)
			vmi := seedInstance("pool-abc", tc.kind)
			vmi.Namespace = "tenant"
			vmi.Spec.Hostname = "pool-abc-host"
			vmi.Spec.Domain.Firmware = &kubevirtv1.Firmware{UUID: types.UID("7f0c6d51-08a9-5d6e-9d4e-8c3b2a1f0e11")}
			dir := t.TempDir()
			iso := filepath.Join(dir, "seed.iso")
			g.Expect(WriteSeed(t.Context(), iso, vmi, []byte(userData))).To(Succeed())

			label, err := exec.CommandContext(t.Context(), "blkid", "-o", "value", "-s", "LABEL", iso).Output() //nolint:gosec // The seed the test just wrote.
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(label)).To(Equal(tc.label + "\n"))
			tree := filepath.Join(dir, "tree")
			out, err := exec.CommandContext(t.Context(), "xorriso", "-osirrox", "on", "-indev", iso, "-extract", "/", tree).CombinedOutput() //nolint:gosec // The seed the test just wrote, into its own directory.
			g.Expect(err).NotTo(HaveOccurred(), string(out))
			var files []string
			g.Expect(filepath.WalkDir(tree, func(path string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(tree, path)
					files = append(files, rel)
				}
				return err
			})).To(Succeed())
			g.Expect(files).To(ConsistOf(tc.files))
			data, err := os.ReadFile(filepath.Join(tree, tc.files[1])) //nolint:gosec // A file of the seed the test extracted.
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(data)).To(Equal(userData))
			raw, err := os.ReadFile(filepath.Join(tree, tc.metaFile)) //nolint:gosec // A file of the seed the test extracted.
			g.Expect(err).NotTo(HaveOccurred())
			meta := map[string]any{}
			g.Expect(json.Unmarshal(raw, &meta)).To(Succeed(), string(raw))
			g.Expect(meta).To(Equal(tc.meta))
		})
	}
}
