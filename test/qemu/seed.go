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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/cozystack/cluster-api-workers/test/envtest"
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

// seedSecret is the name the instance's cloud-init volume is given for its
// user data Secret: the writer reads the Secret from files, as
// virt-launcher reads the Secret volume the kubelet mounts for it, so the
// name only has to be set.
const seedSecret = "userdata"

// WriteSeed writes the instance's cloud-init disk at path with KubeVirt's
// own code, as virt-launcher writes it before it starts the domain
// (kubevirt-cloudinit, built from kubevirt.io/kubevirt's pkg/cloud-init):
// the instance's NoCloud or ConfigDrive volume, whose user data is
// userData (the bootstrap Secret's value after the runner's tamper hook),
// read from a Secret volume laid out as the kubelet mounts it.
func WriteSeed(ctx context.Context, path string, vmi *kubevirtv1.VirtualMachineInstance, userData []byte) error {
	writer, err := cloudInitWriter()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(path), "seed-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	instance := vmi.DeepCopy()
	volume := seedVolume(instance)
	if volume == nil {
		return fmt.Errorf("VirtualMachineInstance %s has no cloud-init volume", vmi.Name)
	}
	secrets := filepath.Join(work, "secrets")
	ref := &corev1.LocalObjectReference{Name: seedSecret}
	switch {
	case volume.CloudInitNoCloud != nil:
		volume.CloudInitNoCloud = &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: ref}
	default:
		volume.CloudInitConfigDrive = &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: ref}
	}
	if err := os.MkdirAll(filepath.Join(secrets, volume.Name), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(secrets, volume.Name, "userdata"), userData, 0o600); err != nil {
		return err
	}
	raw, err := json.Marshal(instance)
	if err != nil {
		return err
	}
	vmiFile := filepath.Join(work, "vmi.json")
	if err := os.WriteFile(vmiFile, raw, 0o600); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, writer, "-vmi", vmiFile, "-secrets", secrets, "-out", filepath.Join(work, "cloud-init-dir")).Output() //nolint:gosec // The tier's own build of KubeVirt's writer.
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("KubeVirt's cloud-init writer: %w: %s", err, strings.TrimSpace(string(exit.Stderr)))
		}
		return fmt.Errorf("KubeVirt's cloud-init writer: %w", err)
	}
	return os.Rename(strings.TrimSpace(string(out)), path)
}

// seedVolume is the instance's cloud-init volume, nil when it has none.
func seedVolume(vmi *kubevirtv1.VirtualMachineInstance) *kubevirtv1.Volume {
	for i := range vmi.Spec.Volumes {
		if v := &vmi.Spec.Volumes[i]; v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil {
			return v
		}
	}
	return nil
}

// seedInstance is the instance a guest started without one (StartVM's
// callers that boot a disk directly) stands for: named after the guest,
// with one cloud-init volume of the kind, as a VM the provider renders has.
func seedInstance(name string, kind SeedKind) *kubevirtv1.VirtualMachineInstance {
	volume := kubevirtv1.Volume{Name: "cloudinitdisk"}
	ref := &corev1.LocalObjectReference{Name: seedSecret}
	if kind == ConfigDrive {
		volume.CloudInitConfigDrive = &kubevirtv1.CloudInitConfigDriveSource{UserDataSecretRef: ref}
	} else {
		volume.CloudInitNoCloud = &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: ref}
	}
	return &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       kubevirtv1.VirtualMachineInstanceSpec{Volumes: []kubevirtv1.Volume{volume}},
	}
}

var cloudInitWriter = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("KUBEVIRT_CLOUDINIT_BIN"); bin != "" {
		return bin, nil
	}
	bins, err := envtest.ToolsBinary("kubevirt")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(bins, "kubevirt-cloudinit")
	if _, err := exec.LookPath("xorrisofs"); err != nil {
		return "", fmt.Errorf("KubeVirt's cloud-init writer runs xorrisofs (apt-get install xorriso): %w", err)
	}
	return bin, nil
})
