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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SeedKind is how the bootstrap data reaches the guest, as KubeVirt's
// cloud-init volumes carry it.
type SeedKind string

const (
	// NoCloud is a volume labelled cidata with user-data and meta-data.
	NoCloud SeedKind = "NoCloud"
	// ConfigDrive is a volume labelled config-2 with
	// openstack/latest/user_data and meta_data.json.
	ConfigDrive SeedKind = "ConfigDrive"
)

// WriteSeed writes an ISO 9660 seed image at path holding userData
// unchanged, as KubeVirt attaches a cloud-init volume. instanceID names the
// instance in the meta-data.
func WriteSeed(ctx context.Context, path string, kind SeedKind, instanceID string, userData []byte) error {
	tree, err := os.MkdirTemp(filepath.Dir(path), "seed-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tree) }()
	var label string
	files := map[string][]byte{}
	switch kind {
	case NoCloud:
		label = "cidata"
		files["user-data"] = userData
		files["meta-data"] = []byte(fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", instanceID, instanceID))
	case ConfigDrive:
		label = "config-2"
		files["openstack/latest/user_data"] = userData
		files["openstack/latest/meta_data.json"] = []byte(fmt.Sprintf("{\"uuid\": %q, \"hostname\": %q}\n", instanceID, instanceID))
	default:
		return fmt.Errorf("unknown seed kind %q", kind)
	}
	for name, content := range files {
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, content, 0o600); err != nil {
			return err
		}
	}
	xorriso, err := exec.LookPath("xorriso")
	if err != nil {
		return fmt.Errorf("xorriso is needed for seed images (apt-get install xorriso): %w", err)
	}
	out, err := exec.CommandContext(ctx, xorriso, "-as", "mkisofs", "-quiet", "-output", path, //nolint:gosec // xorriso from PATH, writing the seed into the guest's directory.
		"-volid", label, "-joliet", "-rock", tree).CombinedOutput()
	if err != nil {
		return fmt.Errorf("building the %s seed: %w: %s", kind, err, strings.TrimSpace(string(out)))
	}
	return nil
}
