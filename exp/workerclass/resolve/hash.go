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

package resolve

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"maps"
	"slices"
)

// contentHashVersion changes when the encoding below changes, so hashes of
// different encodings never collide.
const contentHashVersion = "workerclass.resolve/v1"

// contentHash hashes everything that changes a machine's bytes or boot:
// family, Kubernetes version, image source, Talos settings and the
// cloud-init datasource. The image factory CA is left out: it changes how
// the bytes are fetched, not which bytes boot.
func contentHash(res *Result) string {
	h := hashWriter{h: sha256.New()}
	h.str(contentHashVersion)
	h.str(string(res.Bootstrap))
	h.str(res.KubernetesVersion)
	h.str(string(res.KubernetesVersionMatch))
	h.str(string(res.CloudInitDatasource))
	switch img := res.Image; {
	case img.ContainerDisk != nil:
		h.str("containerDisk")
		h.str(img.ContainerDisk.Reference)
	case img.HTTPImport != nil:
		h.str("httpImport")
		h.str(img.HTTPImport.URL)
	case img.Clone != nil:
		h.str("clone")
		h.str(string(img.Clone.Kind))
		h.str(img.Clone.Namespace)
		h.str(img.Clone.Name)
	case img.ProxmoxTemplate != nil:
		h.str("proxmoxTemplate")
		h.strs(img.ProxmoxTemplate.Tags)
	}
	if t := res.Talos; t != nil {
		h.str("talos")
		h.str(t.Version)
		h.str(t.SchematicID)
		h.str(t.InstallerImage)
		h.count(len(t.KernelModules))
		for _, m := range t.KernelModules {
			h.str(m.Name)
			h.strs(m.Parameters)
		}
		h.count(len(t.RegistryMirrors))
		if len(t.RegistryMirrors) > 0 {
			for _, host := range slices.Sorted(maps.Keys(t.RegistryMirrors)) {
				h.str(host)
				h.strs(t.RegistryMirrors[host].Endpoints)
			}
		}
		// Appended only when a mirror skips the fallback, so hashes
		// resolved before skipFallback was read stay what they were; the
		// mirror count above tells where this section starts.
		var skipping []string
		for _, host := range slices.Sorted(maps.Keys(t.RegistryMirrors)) {
			if t.RegistryMirrors[host].SkipFallback {
				skipping = append(skipping, host)
			}
		}
		if len(skipping) > 0 {
			h.str("skipFallback")
			h.strs(skipping)
		}
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.h.Sum(sum[:0]))
}

// hashWriter writes length-prefixed fields so that no two different
// field sequences produce the same byte stream.
type hashWriter struct {
	h   hash.Hash
	buf [binary.MaxVarintLen64]byte
}

func (w *hashWriter) count(n int) {
	w.h.Write(w.buf[:binary.PutUvarint(w.buf[:], uint64(n))])
}

func (w *hashWriter) str(s string) {
	w.count(len(s))
	w.h.Write([]byte(s))
}

func (w *hashWriter) strs(list []string) {
	w.count(len(list))
	for _, s := range list {
		w.str(s)
	}
}
