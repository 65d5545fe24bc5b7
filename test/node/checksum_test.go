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

package node

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestContainerDiskChecksumFitsKubeVirt: the sum is virt-handler's
// (CRC-32 IEEE, as hash/crc32.NewIEEE in KubeVirt's getDigest), and a disk
// that sums to 2^31 or more, which virt-handler cannot write into an
// instance's status on kube-apiserver v1.36, is refused with the reason.
func TestContainerDiskChecksumFitsKubeVirt(t *testing.T) {
	for _, tc := range []struct {
		content string
		sum     uint32
		refused bool
	}{
		{content: "disk 0", sum: 953206382},
		{content: "disk 2", sum: 3604916034, refused: true},
	} {
		t.Run(tc.content, func(t *testing.T) {
			g := NewWithT(t)
			path := filepath.Join(t.TempDir(), "worker.qcow2")
			g.Expect(os.WriteFile(path, []byte(tc.content), 0o600)).To(Succeed())
			g.Expect(ContainerDiskChecksum(path)).To(Equal(tc.sum))
			err := checksumFitsKubeVirt(path)
			if tc.refused {
				g.Expect(err).To(MatchError(ContainSubstring("status.volumeStatus[].containerDiskVolume.checksum")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}
