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

package kubevirtmachinetemplate

import (
	"testing"

	. "github.com/onsi/gomega"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/exp/workerclass/resolve"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

const ref = "registry.example.com/w@sha256:1111111111111111111111111111111111111111111111111111111111111111"

func TestClassless(t *testing.T) {
	g := NewWithT(t)
	spec := &infrav1.KubeVirtMachineSpec{Image: &infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: ref}}}
	r := Classless(spec)
	g.Expect(r.Image).To(Equal(*spec.Image))
	g.Expect(r.CloudInitDatasource).To(Equal(infrav1.NoCloudDatasource), "NoCloud by default")
	g.Expect(r.WorkerClassName).To(BeEmpty())
	g.Expect(r.KubernetesVersion).To(BeEmpty(), "a classless image declares no Kubernetes version")
	g.Expect(r.ContentHash).To(HaveLen(64))
	g.Expect(Classless(spec).ContentHash).To(Equal(r.ContentHash), "the hash is stable")

	configDrive := spec.DeepCopy()
	configDrive.CloudInitDatasource = infrav1.ConfigDriveDatasource
	g.Expect(Classless(configDrive).ContentHash).NotTo(Equal(r.ContentHash), "the datasource changes how machines boot")
	other := spec.DeepCopy()
	other.Image.ContainerDisk.Reference += "2"
	g.Expect(Classless(other).ContentHash).NotTo(Equal(r.ContentHash), "the image changes the machines' bytes")
	sized := spec.DeepCopy()
	sized.CPU = &infrav1.CPU{Cores: 8}
	g.Expect(Classless(sized).ContentHash).To(Equal(r.ContentHash), "sizing is not image content")
}

func TestFromResult(t *testing.T) {
	talos := &resolve.TalosSettings{Version: "v1.13.6", SchematicID: "abc"}
	for _, tc := range []struct {
		name  string
		res   resolve.Result
		image infrav1.ImageSource
	}{
		{"a fixed Kairos container disk", resolve.Result{
			Bootstrap: workerclassv1.BootstrapKairos, KubernetesVersion: "v1.35.6", KubernetesVersionMatch: workerclassv1.KubernetesVersionMatchExact,
			Image: resolve.Image{ContainerDisk: &resolve.ContainerDisk{Reference: ref}}, CloudInitDatasource: workerclassv1.CloudInitNoCloud, Hash: "h1",
		}, infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: ref}}},
		{"a Talos factory HTTP import with its CA", resolve.Result{
			Bootstrap: workerclassv1.BootstrapTalos, KubernetesVersion: "v1.35.6", KubernetesVersionMatch: workerclassv1.KubernetesVersionMatchMinor, Talos: talos,
			Image: resolve.Image{HTTPImport: &resolve.HTTPImport{URL: "https://factory/image/abc/v1.13.6/nocloud-amd64.raw.xz", CABundle: "PEM"}}, CloudInitDatasource: workerclassv1.CloudInitNoCloud, Hash: "h2",
		}, infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory/image/abc/v1.13.6/nocloud-amd64.raw.xz", CABundle: "PEM"}}},
		{"a golden DataSource clone", resolve.Result{
			Bootstrap: workerclassv1.BootstrapTalos, KubernetesVersion: "v1.35.6", KubernetesVersionMatch: workerclassv1.KubernetesVersionMatchMinor, Talos: talos,
			Image: resolve.Image{Clone: &resolve.Clone{Kind: workerclassv1.GoldenDataSource, Namespace: "cozy-golden", Name: "talos"}}, CloudInitDatasource: workerclassv1.CloudInitConfigDrive, Hash: "h3",
		}, infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: "cozy-golden", Name: "talos"}}},
		{"a golden PVC clone", resolve.Result{
			Bootstrap: workerclassv1.BootstrapTalos, KubernetesVersion: "v1.35.6", KubernetesVersionMatch: workerclassv1.KubernetesVersionMatchMinor, Talos: talos,
			Image: resolve.Image{Clone: &resolve.Clone{Kind: workerclassv1.GoldenPersistentVolumeClaim, Namespace: "cozy-golden", Name: "talos"}}, CloudInitDatasource: workerclassv1.CloudInitNoCloud, Hash: "h4",
		}, infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromPersistentVolumeClaim, Namespace: "cozy-golden", Name: "talos"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out, errs := FromResult("c", &tc.res, "")
			g.Expect(errs).To(BeEmpty())
			g.Expect(out.Image).To(Equal(tc.image))
			g.Expect(out.WorkerClassName).To(Equal("c"))
			g.Expect(out.Bootstrap).To(Equal(tc.res.Bootstrap))
			g.Expect(out.KubernetesVersion).To(Equal(tc.res.KubernetesVersion))
			g.Expect(out.KubernetesVersionMatch).To(Equal(tc.res.KubernetesVersionMatch))
			g.Expect(string(out.CloudInitDatasource)).To(Equal(string(tc.res.CloudInitDatasource)))
			g.Expect(out.ContentHash).To(Equal(tc.res.Hash), "the class resolution's hash is kept")
			if tc.res.Talos != nil {
				g.Expect(out.TalosVersion).To(Equal("v1.13.6"))
				g.Expect(out.SchematicID).To(Equal("abc"))
			} else {
				g.Expect(out.TalosVersion).To(BeEmpty())
			}
		})
	}

	t.Run("a template's datasource overrides the class's and changes the hash", func(t *testing.T) {
		g := NewWithT(t)
		res := &resolve.Result{Bootstrap: workerclassv1.BootstrapKairos, Image: resolve.Image{ContainerDisk: &resolve.ContainerDisk{Reference: ref}},
			CloudInitDatasource: workerclassv1.CloudInitNoCloud, Hash: "h"}
		same, _ := FromResult("c", res, infrav1.NoCloudDatasource)
		g.Expect(same.ContentHash).To(Equal("h"), "repeating the class's choice changes nothing")
		override, _ := FromResult("c", res, infrav1.ConfigDriveDatasource)
		g.Expect(override.CloudInitDatasource).To(Equal(infrav1.ConfigDriveDatasource))
		g.Expect(override.ContentHash).NotTo(Equal("h"))
		g.Expect(override.ContentHash).To(HaveLen(64))
	})
	t.Run("a Proxmox template is no KubeVirt disk", func(t *testing.T) {
		g := NewWithT(t)
		res := &resolve.Result{Bootstrap: workerclassv1.BootstrapTalos, Image: resolve.Image{ProxmoxTemplate: &resolve.ProxmoxTemplate{Tags: []string{"t"}}}}
		out, errs := FromResult("c", res, "")
		g.Expect(out).To(BeNil())
		g.Expect(errs).To(HaveLen(1))
		g.Expect(errs[0].Field).To(Equal("spec.template.spec.workerClass.name"))
	})
}
