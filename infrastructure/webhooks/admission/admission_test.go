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

package admission

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/infrastructure/placement"
)

const digestRef = "registry.example.com/workers/kairos@sha256:1111111111111111111111111111111111111111111111111111111111111111"

func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "image factory CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func spec(mutate ...func(*infrav1.KubeVirtMachineSpec)) infrav1.KubeVirtMachineSpec {
	s := infrav1.KubeVirtMachineSpec{
		Image:  &infrav1.ImageSource{ContainerDisk: &infrav1.ContainerDiskSource{Reference: digestRef}},
		CPU:    &infrav1.CPU{Cores: 2},
		Memory: ptr.To(resource.MustParse("4Gi")),
	}
	for _, f := range mutate {
		f(&s)
	}
	return s
}

func fields(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Field)
	}
	return out
}

func TestValidateMachineSpec(t *testing.T) {
	ca := testCA(t)
	for _, tc := range []struct {
		name   string
		spec   infrav1.KubeVirtMachineSpec
		fields []string
	}{
		{"a digest-pinned container disk with cpu and memory is valid", spec(), nil},
		{"a container disk by tag is rejected: machines could boot different bytes",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image.ContainerDisk.Reference = "registry.example.com/workers/kairos:v1"
			}),
			[]string{"spec.image.containerDisk.reference"}},
		{"a container disk reference that does not parse is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) { s.Image.ContainerDisk.Reference = "UPPER/case@sha256:zz" }),
			[]string{"spec.image.containerDisk.reference"}},
		{"an HTTPS import with a CA and a size is valid",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://factory.example.com/image/x/v1/nocloud-amd64.raw.xz", CABundle: ca}}
				s.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
			}), nil},
		{"an HTTP import without a size is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw"}}
			}), []string{"spec.rootDisk.size"}},
		{"an import URL that is not http(s) is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "ftp://x.example.com/d.raw"}}
				s.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
			}), []string{"spec.image.httpImport.url"}},
		{"an import URL with credentials is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://tenant:s3cr3t@x.example.com/d.raw"}}
				s.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
			}), []string{"spec.image.httpImport.url"}},
		{"an import URL with a query, where signed URLs carry their signature, is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw?X-Amz-Signature=abc"}}
				s.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
			}), []string{"spec.image.httpImport.url"}},
		{"an import CA bundle that is not PEM certificates is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://x.example.com/d.raw", CABundle: "not a certificate"}}
				s.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
			}), []string{"spec.image.httpImport.caBundle"}},
		{"a clone with a bad name is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: "Golden", Name: "talos_1"}}
			}), []string{"spec.image.clone.namespace", "spec.image.clone.name"}},
		{"two image sources are rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image.Clone = &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Name: "golden"}
			}), []string{"spec.image"}},
		{"an instancetype with cpu is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Instancetype = &infrav1.InstancetypeReference{Name: "u1.large"}
			}),
			[]string{"spec.instancetype"}},
		{"an instancetype alone is valid",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.CPU, s.Memory = nil, nil
				s.Instancetype = &infrav1.InstancetypeReference{Name: "u1.large"}
			}), nil},
		{"no sizing at all is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) { s.CPU = nil }), []string{"spec.cpu"}},
		{"a zero memory is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) { s.Memory = ptr.To(resource.MustParse("0")) }), []string{"spec.memory"}},
		{"a GPU device name that is not a resource name is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/A10 GPU", NodeResourceName: "nvidia.com/gpu"}}
			}), []string{"spec.gpus[0].deviceName"}},
		{"LiveMigrate of a VM KubeVirt cannot migrate is rejected: its drains would never end",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.EvictionStrategy = infrav1.EvictionLiveMigrate
				s.Networks = []infrav1.Network{{Name: "pod", Pod: &infrav1.PodNetwork{}, Binding: infrav1.BridgeBinding}}
			}), []string{"spec.evictionStrategy"}},
		{"LiveMigrateIfPossible of the same VM is valid",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.EvictionStrategy = infrav1.EvictionLiveMigrateIfPossible
				s.Networks = []infrav1.Network{{Name: "pod", Pod: &infrav1.PodNetwork{}, Binding: infrav1.BridgeBinding}}
			}), nil},
		{"a class selection without an image is valid",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = nil
				s.WorkerClass = &infrav1.WorkerClassSelection{Name: "kairos", PoolSettings: workerclassv1.PoolSettings{Version: "v1.35"}}
			}), nil},
		{"a class selection beside an image is rejected: the class supplies it",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.WorkerClass = &infrav1.WorkerClassSelection{Name: "kairos"}
			}), []string{"spec.image"}},
		{"a class selection's GPUs that differ from the VM's are rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Image = nil
				s.WorkerClass = &infrav1.WorkerClassSelection{Name: "kairos", PoolSettings: workerclassv1.PoolSettings{GPUs: []workerclassv1.GPU{{Name: "nvidia.com/A10"}}}}
			}), []string{"spec.workerClass.gpus"}},
		{"a host device name that is not a resource name is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.HostDevices = []infrav1.HostDevice{{Name: "nic", DeviceName: "/bad"}}
			}), []string{"spec.hostDevices[0].deviceName"}},
		{"a pod network and a Multus network are valid",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Networks = []infrav1.Network{{Name: "pod", Pod: &infrav1.PodNetwork{}}, {Name: "storage", Multus: &infrav1.MultusNetwork{NetworkName: "infra/storage"}}}
			}), nil},
		{"two pod networks are rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Networks = []infrav1.Network{{Name: "a", Pod: &infrav1.PodNetwork{}}, {Name: "b", Pod: &infrav1.PodNetwork{}}}
			}), []string{"spec.networks"}},
		{"a pod network beside a default Multus network is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Networks = []infrav1.Network{{Name: "a", Pod: &infrav1.PodNetwork{}}, {Name: "b", Multus: &infrav1.MultusNetwork{NetworkName: "vlan", Default: true}}}
			}), []string{"spec.networks"}},
		{"masquerade on a Multus network is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Networks = []infrav1.Network{{Name: "b", Multus: &infrav1.MultusNetwork{NetworkName: "vlan"}, Binding: infrav1.MasqueradeBinding}}
			}), []string{"spec.networks[0].binding"}},
		{"a network with neither pod nor multus is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) { s.Networks = []infrav1.Network{{Name: "a"}} }), []string{"spec.networks[0]"}},
		{"a duplicate network name is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Networks = []infrav1.Network{{Name: "a", Pod: &infrav1.PodNetwork{}}, {Name: "a", Multus: &infrav1.MultusNetwork{NetworkName: "x"}}}
			}), []string{"spec.networks[1].name"}},
		{"a Multus network name that is not <namespace>/<name> is rejected",
			spec(func(s *infrav1.KubeVirtMachineSpec) {
				s.Networks = []infrav1.Network{{Name: "b", Multus: &infrav1.MultusNetwork{NetworkName: "a/b/c"}}}
			}), []string{"spec.networks[0].multus.networkName"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := ValidateMachineSpec(&tc.spec, field.NewPath("spec"))
			if tc.fields == nil {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(fields(errs)).To(ConsistOf(tc.fields))
		})
	}
}

func kvm(name string, s infrav1.KubeVirtMachineSpec) *infrav1.KubeVirtMachine {
	return &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: s}
}

func TestKubeVirtMachineWebhook(t *testing.T) {
	ctx := context.Background()
	w := &KubeVirtMachine{}
	t.Run("a name longer than a DNS label is rejected: the VM, hostname and providerID take it", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateCreate(ctx, kvm(strings.Repeat("a", 64), spec()))
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue())
		g.Expect(err.Error()).To(ContainSubstring("metadata.name"))
	})
	t.Run("a foreign providerID is rejected", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateCreate(ctx, kvm("w", spec(func(s *infrav1.KubeVirtMachineSpec) { s.ProviderID = "kubevirt://other" })))
		g.Expect(err).To(MatchError(ContainSubstring("spec.providerID")))
	})
	t.Run("the controller may set the providerID once", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateUpdate(ctx, kvm("w", spec()), kvm("w", spec(func(s *infrav1.KubeVirtMachineSpec) { s.ProviderID = "kubevirt://w" })))
		g.Expect(err).NotTo(HaveOccurred())
	})
	t.Run("a set providerID cannot change", func(t *testing.T) {
		g := NewWithT(t)
		withID := spec(func(s *infrav1.KubeVirtMachineSpec) { s.ProviderID = "kubevirt://w" })
		_, err := w.ValidateUpdate(ctx, kvm("w", withID), kvm("w", spec()))
		g.Expect(err).To(MatchError(ContainSubstring("spec.providerID")))
	})
	t.Run("the spec is immutable", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateUpdate(ctx, kvm("w", spec()), kvm("w", spec(func(s *infrav1.KubeVirtMachineSpec) { s.CPU.Cores = 4 })))
		g.Expect(err).To(MatchError(ContainSubstring("immutable")))
	})
	t.Run("an import URL with credentials is refused without echoing it", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateCreate(ctx, kvm("w", spec(func(s *infrav1.KubeVirtMachineSpec) {
			s.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://tenant:s3cr3t@x.example.com/d.raw"}}
			s.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
		})))
		g.Expect(err).To(MatchError(ContainSubstring("spec.image.httpImport.url")))
		g.Expect(err).To(MatchError(ContainSubstring("must not carry credentials")))
		g.Expect(err.Error()).NotTo(ContainSubstring("s3cr3t"))
		g.Expect(err.Error()).NotTo(ContainSubstring("tenant:"))
	})
}

func template(mutate ...func(*infrav1.KubeVirtMachineTemplate)) *infrav1.KubeVirtMachineTemplate {
	t := &infrav1.KubeVirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "workers-r1", Namespace: "ns"},
		Spec: infrav1.KubeVirtMachineTemplateSpec{
			Template: infrav1.KubeVirtMachineTemplateResource{Spec: spec()},
		},
	}
	for _, f := range mutate {
		f(t)
	}
	return t
}

func classBased(t *infrav1.KubeVirtMachineTemplate) {
	t.Spec.Template.Spec.WorkerClass = &infrav1.WorkerClassSelection{Name: "kairos", PoolSettings: workerclassv1.PoolSettings{Version: "v1.35"}}
	t.Spec.Template.Spec.Image = nil
}

func withRequest(dryRun bool) context.Context {
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(dryRun)}})
}

func TestKubeVirtMachineTemplateWebhook(t *testing.T) {
	w := &KubeVirtMachineTemplate{Instancetypes: instancetypeReader(t), Placement: placement.Policy{DeviceNames: []string{"nvidia.com/A10"}}}
	ctx := withRequest(false)
	for _, tc := range []struct {
		name     string
		template *infrav1.KubeVirtMachineTemplate
		field    string
	}{
		{"a classless template with an explicit image is valid", template(), ""},
		{"a class-based template is valid", template(classBased), ""},
		{"a classless template without an image is rejected", template(func(t *infrav1.KubeVirtMachineTemplate) { t.Spec.Template.Spec.Image = nil }), "spec.template.spec.image"},
		{"a class-based template with an image is rejected: the class supplies it", template(classBased, func(t *infrav1.KubeVirtMachineTemplate) {
			t.Spec.Template.Spec.Image = spec().Image
		}), "spec.template.spec.image"},
		{"a template providerID is rejected", template(func(t *infrav1.KubeVirtMachineTemplate) { t.Spec.Template.Spec.ProviderID = "kubevirt://x" }), "spec.template.spec.providerID"},
		{"pool GPUs that differ from the VM's GPUs are rejected", template(classBased, func(t *infrav1.KubeVirtMachineTemplate) {
			t.Spec.Template.Spec.WorkerClass.GPUs = []workerclassv1.GPU{{Name: "nvidia.com/A10"}}
		}), "spec.template.spec.workerClass.gpus"},
		{"pool GPUs matching the VM's GPUs are valid", template(classBased, func(t *infrav1.KubeVirtMachineTemplate) {
			t.Spec.Template.Spec.WorkerClass.GPUs = []workerclassv1.GPU{{Name: "nvidia.com/A10"}}
			t.Spec.Template.Spec.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/A10"}}
		}), ""},
		{"with a GPU instancetype, pool GPUs the instancetype attaches are valid (checked at resolution)", template(classBased, func(t *infrav1.KubeVirtMachineTemplate) {
			t.Spec.Template.Spec.WorkerClass.GPUs = []workerclassv1.GPU{{Name: "nvidia.com/A10"}}
			t.Spec.Template.Spec.CPU, t.Spec.Template.Spec.Memory = nil, nil
			t.Spec.Template.Spec.Instancetype = &infrav1.InstancetypeReference{Name: "gn1.xlarge"}
		}), ""},
		{"with an instancetype, a VM GPU the pool does not list is rejected", template(classBased, func(t *infrav1.KubeVirtMachineTemplate) {
			t.Spec.Template.Spec.CPU, t.Spec.Template.Spec.Memory = nil, nil
			t.Spec.Template.Spec.Instancetype = &infrav1.InstancetypeReference{Name: "gn1.xlarge"}
			t.Spec.Template.Spec.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/A10"}}
		}), "spec.template.spec.gpus[0].deviceName"},
		{"machine spec errors carry the template path", template(func(t *infrav1.KubeVirtMachineTemplate) {
			t.Spec.Template.Spec.Image.ContainerDisk.Reference = "registry.example.com/x:latest"
		}), "spec.template.spec.image.containerDisk.reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(w.Default(ctx, tc.template)).To(Succeed())
			_, err := w.ValidateCreate(ctx, tc.template)
			if tc.field == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.field + ":"))
		})
	}

	t.Run("defaulting labels a class-based template with its class", func(t *testing.T) {
		g := NewWithT(t)
		tmpl := template(classBased)
		g.Expect(w.Default(ctx, tmpl)).To(Succeed())
		g.Expect(tmpl.Labels).To(HaveKeyWithValue(infrav1.WorkerClassLabel, "kairos"))
		// Topology copies the ClusterClass template's label into a clone
		// whose class a variable then changes.
		copied := template(classBased, func(t *infrav1.KubeVirtMachineTemplate) {
			t.Labels = map[string]string{infrav1.WorkerClassLabel: "talos"}
		})
		g.Expect(w.Default(ctx, copied)).To(Succeed())
		g.Expect(copied.Labels).To(HaveKeyWithValue(infrav1.WorkerClassLabel, "kairos"))
		_, err := w.ValidateCreate(ctx, copied)
		g.Expect(err).NotTo(HaveOccurred())
		classless := template()
		g.Expect(w.Default(ctx, classless)).To(Succeed())
		g.Expect(classless.Labels).NotTo(HaveKey(infrav1.WorkerClassLabel))
		// A class label on a classless template would pin that class: it
		// goes, and is refused where defaulting did not run.
		pinning := template(func(t *infrav1.KubeVirtMachineTemplate) {
			t.Labels = map[string]string{infrav1.WorkerClassLabel: "kairos", "team": "a"}
		})
		_, err = w.ValidateCreate(ctx, pinning)
		g.Expect(err).To(MatchError(ContainSubstring("a template without spec.template.spec.workerClass uses no class")))
		_, err = w.ValidateUpdate(ctx, template(), pinning)
		g.Expect(err).To(MatchError(ContainSubstring("uses no class")))
		g.Expect(w.Default(ctx, pinning)).To(Succeed())
		g.Expect(pinning.Labels).To(Equal(map[string]string{"team": "a"}))
	})
	t.Run("the spec is immutable", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateUpdate(ctx, template(), template(func(t *infrav1.KubeVirtMachineTemplate) { t.Spec.Template.Spec.CPU.Cores = 8 }))
		g.Expect(err).To(MatchError(ContainSubstring("immutable")))
	})
	t.Run("metadata changes are allowed", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateUpdate(ctx, template(), template(func(t *infrav1.KubeVirtMachineTemplate) { t.Annotations = map[string]string{"a": "b"} }))
		g.Expect(err).NotTo(HaveOccurred())
	})
	t.Run("a topology dry run may change the spec", func(t *testing.T) {
		g := NewWithT(t)
		newT := template(func(t *infrav1.KubeVirtMachineTemplate) {
			t.Spec.Template.Spec.CPU.Cores = 8
			t.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
		})
		_, err := w.ValidateUpdate(withRequest(true), template(), newT)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = w.ValidateUpdate(withRequest(false), template(), newT)
		g.Expect(err).To(HaveOccurred(), "without dry run the annotation alone allows nothing")
	})
}

func TestKubeVirtClusterWebhooks(t *testing.T) {
	ctx := withRequest(false)
	w := &KubeVirtCluster{}
	cluster := func(host string, port int32) *infrav1.KubeVirtCluster {
		return &infrav1.KubeVirtCluster{ObjectMeta: metav1.ObjectMeta{Name: "c"},
			Spec: infrav1.KubeVirtClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: host, Port: port}}}
	}
	t.Run("an empty endpoint is left to the control plane provider", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateCreate(ctx, cluster("", 0))
		g.Expect(err).NotTo(HaveOccurred())
	})
	t.Run("a host without a port is rejected", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateCreate(ctx, cluster("api.example.com", 0))
		g.Expect(err).To(MatchError(ContainSubstring("spec.controlPlaneEndpoint")))
	})
	t.Run("a set endpoint cannot change", func(t *testing.T) {
		g := NewWithT(t)
		_, err := w.ValidateUpdate(ctx, cluster("a.example.com", 6443), cluster("b.example.com", 6443))
		g.Expect(err).To(MatchError(ContainSubstring("cannot be changed")))
		_, err = w.ValidateUpdate(ctx, cluster("", 0), cluster("b.example.com", 6443))
		g.Expect(err).NotTo(HaveOccurred(), "an empty endpoint may be filled in")
	})
	t.Run("a cluster template is immutable", func(t *testing.T) {
		g := NewWithT(t)
		tw := &KubeVirtClusterTemplate{}
		oldT := &infrav1.KubeVirtClusterTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
		newT := oldT.DeepCopy()
		newT.Spec.Template.Spec.FailureDomains = []clusterv1.FailureDomain{{Name: "zone-a"}}
		_, err := tw.ValidateUpdate(ctx, oldT, newT)
		g.Expect(err).To(MatchError(ContainSubstring("immutable")))
	})
}

// TestUnchangedSpecsAreNotValidatedAgain: a template stored before a rule
// was tightened (an import URL with credentials, refused since) can still
// lose its finalizer or gain an owner reference, so deletion and
// clusterctl move never block on it; a spec change is refused, and the
// class label is still checked.
func TestUnchangedSpecsAreNotValidatedAgain(t *testing.T) {
	g := NewWithT(t)
	ctx := withRequest(false)
	w := &KubeVirtMachineTemplate{}
	stored := template(func(t *infrav1.KubeVirtMachineTemplate) {
		t.Spec.Template.Spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: "https://tenant:s3cr3t@x.example.com/d.raw"}}
		t.Spec.Template.Spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("20Gi"))}
		t.Finalizers = []string{"example.com/keep"}
	})
	_, err := w.ValidateCreate(ctx, stored)
	g.Expect(err).To(MatchError(ContainSubstring("spec.template.spec.image.httpImport.url")), "today's rules refuse the stored template")

	moved := stored.DeepCopy()
	moved.Finalizers = nil
	moved.OwnerReferences = []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: "c", UID: "u"}}
	_, err = w.ValidateUpdate(ctx, stored, moved)
	g.Expect(err).NotTo(HaveOccurred())

	changed := moved.DeepCopy()
	changed.Spec.Template.Spec.CPU.Cores = 8
	_, err = w.ValidateUpdate(ctx, stored, changed)
	g.Expect(err).To(MatchError(ContainSubstring("immutable")))

	classed := template(classBased)
	relabelled := classed.DeepCopy()
	relabelled.Labels = map[string]string{infrav1.WorkerClassLabel: "talos"}
	_, err = w.ValidateUpdate(ctx, classed, relabelled)
	g.Expect(err).To(MatchError(ContainSubstring(`must name the template's class "kairos"`)))

	cluster := &infrav1.KubeVirtCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Finalizers: []string{"x"}},
		Spec: infrav1.KubeVirtClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.1"}}}
	released := cluster.DeepCopy()
	released.Finalizers = nil
	_, err = (&KubeVirtCluster{}).ValidateUpdate(ctx, cluster, released)
	g.Expect(err).NotTo(HaveOccurred(), "a stored endpoint without a port does not block the finalizer")
}

// TestCloneSourcesFailClosed: a webhook that cannot authorize a clone
// source refuses it rather than letting the provider's permission decide.
func TestCloneSourcesFailClosed(t *testing.T) {
	g := NewWithT(t)
	clone := &infrav1.ImageSource{Clone: &infrav1.CloneSource{Kind: infrav1.CloneFromDataSource, Namespace: "golden", Name: "talos"}}
	tmpl := template(func(t *infrav1.KubeVirtMachineTemplate) { t.Spec.Template.Spec.Image = clone })
	_, err := (&KubeVirtMachineTemplate{}).ValidateCreate(withRequest(false), tmpl)
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "got %v", err)
	m := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: spec(func(s *infrav1.KubeVirtMachineSpec) { s.Image = clone })}
	_, err = (&KubeVirtMachine{}).ValidateCreate(withRequest(false), m)
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "got %v", err)
}

// TestPlacementPolicy: both webhooks refuse a spec that asks for more
// placement than the hoster's policy allows, on the field that asks for
// it, and admit what it allows; an unchanged template is not judged again
// by a policy tightened since it was stored.
func TestPlacementPolicy(t *testing.T) {
	ctx := withRequest(false)
	policy := placement.DefaultPolicy()
	policy.DeviceNames = []string{"nvidia.com/A10"}
	machineWebhook := &KubeVirtMachine{Instancetypes: instancetypeReader(t), Placement: policy}
	templateWebhook := &KubeVirtMachineTemplate{Instancetypes: instancetypeReader(t), Placement: policy}
	controlPlane := corev1.Toleration{Key: placement.ControlPlaneLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name   string
		mutate func(*infrav1.KubeVirtMachineSpec)
		// field is under spec (a machine) or spec.template.spec; empty
		// when admitted.
		field string
	}{
		{name: "an allowed GPU and toleration", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/A10"}}
			s.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists}}
		}},
		{name: "the control plane's taint", mutate: func(s *infrav1.KubeVirtMachineSpec) { s.Tolerations = []corev1.Toleration{controlPlane} },
			field: "tolerations[0].key"},
		{name: "a GPU the hoster does not hand out", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.GPUs = []infrav1.GPU{{Name: "gpu", DeviceName: "nvidia.com/H100"}}
		}, field: "gpus[0].deviceName"},
		{name: "dedicated CPUs", mutate: func(s *infrav1.KubeVirtMachineSpec) { s.CPU.DedicatedCPUPlacement = true }, field: "cpu.dedicatedCPUPlacement"},
		{name: "pod affinity to kube-system", mutate: func(s *infrav1.KubeVirtMachineSpec) {
			s.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
				{TopologyKey: corev1.LabelHostname, Namespaces: []string{"kube-system"}}}}}
		}, field: "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			machine := kvm("w", spec(tc.mutate))
			tmpl := template(func(t *infrav1.KubeVirtMachineTemplate) { tc.mutate(&t.Spec.Template.Spec) })
			_, machineErr := machineWebhook.ValidateCreate(ctx, machine)
			_, templateErr := templateWebhook.ValidateCreate(ctx, tmpl)
			if tc.field == "" {
				g.Expect(machineErr).NotTo(HaveOccurred())
				g.Expect(templateErr).NotTo(HaveOccurred())
				return
			}
			g.Expect(causes(machineErr)).To(ConsistOf("spec." + tc.field))
			g.Expect(causes(templateErr)).To(ConsistOf("spec.template.spec." + tc.field))
			g.Expect(templateErr.Error()).To(ContainSubstring("Forbidden"))
		})
	}
	t.Run("a stored template is not judged again by a tightened policy", func(t *testing.T) {
		g := NewWithT(t)
		stored := template(func(t *infrav1.KubeVirtMachineTemplate) {
			t.Spec.Template.Spec.Tolerations = []corev1.Toleration{controlPlane}
		})
		relabelled := stored.DeepCopy()
		relabelled.Labels = map[string]string{"moved": "true"}
		_, err := templateWebhook.ValidateUpdate(ctx, stored, relabelled)
		g.Expect(err).NotTo(HaveOccurred())
	})
}
