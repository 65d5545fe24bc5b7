package envtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

const externalCRDNamespace = "external-crds"

var strict = client.FieldValidation(metav1.FieldValidationStrict)

// TestExternalCRDsValidateKubeVirtAndCDIObjects proves the generated KubeVirt
// and CDI schemas accept the objects the providers create, and reject wrong
// types, missing required fields and (with strict field validation) unknown
// fields, as a cluster running KubeVirt and CDI would.
func TestExternalCRDsValidateKubeVirtAndCDIObjects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := DefaultScheme()
	for _, add := range []func(*kruntime.Scheme) error{kubevirtv1.AddToScheme, instancetypev1beta1.AddToScheme, cdiv1.AddToScheme} {
		g.Expect(add(scheme)).To(Succeed())
	}
	env, err := Start(ctx, Options{Scheme: scheme, CRDPaths: ExternalCRDPaths()})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	c := env.Client
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: externalCRDNamespace}})).To(Succeed())

	t.Run("accepted unchanged with strict field validation", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			obj  client.Object
		}{
			{"VirtualMachine with a containerDisk and cloud-init NoCloud user data from a Secret", containerDiskVM("containerdisk-nocloud")},
			{"VirtualMachine with cloud-init ConfigDrive user data from a Secret", configDriveVM("configdrive")},
			{"VirtualMachine with an instancetype and a preference", instancetypeVM("instancetype")},
			{"VirtualMachine with DataVolume templates importing over HTTP and cloning a DataSource", dataVolumeTemplateVM("dvtemplates")},
			{"DataVolume importing over HTTP with a CA ConfigMap", httpDataVolume("http-import")},
			{"DataVolume cloning a PVC", pvcCloneDataVolume("pvc-clone")},
			{"DataVolume cloning a DataSource by sourceRef", sourceRefDataVolume("sourceref-clone")},
			{"DataSource pointing at a golden PVC", goldenDataSource("golden")},
			{"VirtualMachineClusterInstancetype with guest CPU and memory", clusterInstancetype("u1.medium")},
			{"VirtualMachineClusterPreference with a preferred disk bus", clusterPreference("virtio")},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				want, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(tc.obj.DeepCopyObject())
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(c.Create(ctx, tc.obj, strict)).To(Succeed())

				// Read back what was stored: a pruning schema that lacked a
				// field we set would have dropped it silently.
				gvk, err := apiutil.GVKForObject(tc.obj, scheme)
				g.Expect(err).NotTo(HaveOccurred())
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(gvk)
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tc.obj), got)).To(Succeed())
				stored, err := json.Marshal(got.Object["spec"])
				g.Expect(err).NotTo(HaveOccurred())
				submitted, err := json.Marshal(want["spec"])
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(stored).To(MatchJSON(submitted), "the stored spec differs from the submitted one")
			})
		}
	})

	t.Run("rejected", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			obj    client.Object
			mutate func(obj map[string]any) error
			reason metav1.StatusReason
			detail string
		}{
			{
				name: "VirtualMachine with a string for CPU cores",
				obj:  containerDiskVM("cores-string"),
				mutate: func(o map[string]any) error {
					return set(o, "two", "spec", "template", "spec", "domain", "cpu", "cores")
				},
				reason: metav1.StatusReasonInvalid,
				detail: `spec.template.spec.domain.cpu.cores: Invalid value: "string"`,
			},
			{
				name: "VirtualMachine with a string for the NoCloud secretRef",
				obj:  containerDiskVM("secretref-string"),
				mutate: func(o map[string]any) error {
					return set(o, "bootstrap", "spec", "template", "spec", "volumes", "1", "cloudInitNoCloud", "secretRef")
				},
				reason: metav1.StatusReasonInvalid,
				detail: `spec.template.spec.volumes[1].cloudInitNoCloud.secretRef: Invalid value: "string"`,
			},
			{
				name:   "VirtualMachine without a template",
				obj:    containerDiskVM("no-template"),
				mutate: func(o map[string]any) error { return remove(o, "spec", "template") },
				reason: metav1.StatusReasonInvalid,
				detail: "spec.template: Required value",
			},
			{
				name: "VirtualMachine with a containerDisk without an image",
				obj:  containerDiskVM("no-image"),
				mutate: func(o map[string]any) error {
					return remove(o, "spec", "template", "spec", "volumes", "0", "containerDisk", "image")
				},
				reason: metav1.StatusReasonInvalid,
				detail: "spec.template.spec.volumes[0].containerDisk.image: Required value",
			},
			{
				name: "VirtualMachine with an unknown field in a disk",
				obj:  containerDiskVM("unknown-disk-field"),
				mutate: func(o map[string]any) error {
					return set(o, true, "spec", "template", "spec", "domain", "devices", "disks", "0", "readonly")
				},
				reason: metav1.StatusReasonBadRequest,
				detail: `unknown field "spec.template.spec.domain.devices.disks[0].readonly"`,
			},
			{
				name: "VirtualMachine with an unknown field in a DataVolume template's source",
				obj:  dataVolumeTemplateVM("unknown-template-field"),
				mutate: func(o map[string]any) error {
					return set(o, "PEM", "spec", "dataVolumeTemplates", "0", "spec", "source", "http", "caBundle")
				},
				reason: metav1.StatusReasonBadRequest,
				detail: `unknown field "spec.dataVolumeTemplates[0].spec.source.http.caBundle"`,
			},
			{
				name:   "DataVolume HTTP source without a URL",
				obj:    httpDataVolume("no-url"),
				mutate: func(o map[string]any) error { return remove(o, "spec", "source", "http", "url") },
				reason: metav1.StatusReasonInvalid,
				detail: "spec.source.http.url: Required value",
			},
			{
				name:   "DataVolume HTTP source with a CA bundle field CDI does not have",
				obj:    httpDataVolume("unknown-http-field"),
				mutate: func(o map[string]any) error { return set(o, "PEM", "spec", "source", "http", "caBundle") },
				reason: metav1.StatusReasonBadRequest,
				detail: `unknown field "spec.source.http.caBundle"`,
			},
			{
				name:   "DataVolume PVC clone with a number for the namespace",
				obj:    pvcCloneDataVolume("namespace-number"),
				mutate: func(o map[string]any) error { return set(o, int64(7), "spec", "source", "pvc", "namespace") },
				reason: metav1.StatusReasonInvalid,
				detail: `spec.source.pvc.namespace: Invalid value: "integer"`,
			},
			{
				name:   "DataVolume sourceRef without a name",
				obj:    sourceRefDataVolume("sourceref-no-name"),
				mutate: func(o map[string]any) error { return remove(o, "spec", "sourceRef", "name") },
				reason: metav1.StatusReasonInvalid,
				detail: "spec.sourceRef.name: Required value",
			},
			{
				name:   "DataVolume with a string for access modes",
				obj:    httpDataVolume("accessmodes-string"),
				mutate: func(o map[string]any) error { return set(o, "ReadWriteOnce", "spec", "storage", "accessModes") },
				reason: metav1.StatusReasonInvalid,
				detail: `spec.storage.accessModes: Invalid value: "string"`,
			},
			{
				name:   "VirtualMachineClusterInstancetype without guest CPUs",
				obj:    clusterInstancetype("no-guest-cpu"),
				mutate: func(o map[string]any) error { return remove(o, "spec", "cpu", "guest") },
				reason: metav1.StatusReasonInvalid,
				detail: "spec.cpu.guest: Required value",
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				u := toUnstructured(g, scheme, tc.obj)
				g.Expect(tc.mutate(u.Object)).To(Succeed())
				err := c.Create(ctx, u, strict)
				g.Expect(err).To(HaveOccurred())
				g.Expect(apierrors.ReasonForError(err)).To(Equal(tc.reason), "error: %v", err)
				g.Expect(err.Error()).To(ContainSubstring(tc.detail))
			})
		}
	})

	// Without strict validation the same unknown field is pruned rather than
	// stored: the schemas are structural, not preserve-unknown-fields stubs,
	// which is why tests must ask for strict validation to see such mistakes.
	t.Run("unknown fields are pruned without strict field validation", func(t *testing.T) {
		g := NewWithT(t)
		u := toUnstructured(g, scheme, httpDataVolume("pruned"))
		g.Expect(set(u.Object, "PEM", "spec", "source", "http", "caBundle")).To(Succeed())
		g.Expect(c.Create(ctx, u)).To(Succeed())
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed())
		http, found, err := unstructured.NestedMap(got.Object, "spec", "source", "http")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(found).To(BeTrue())
		g.Expect(http).To(HaveKeyWithValue("url", "https://factory.talos.dev/image/abc/v1.11.0/nocloud-amd64.raw.xz"))
		g.Expect(http).NotTo(HaveKey("caBundle"))
	})
}

// TestExternalCRDsMatchPinnedAPIVersions catches a kubevirt.io/api or CDI API
// bump without regenerated CRDs: the header of every generated file must name
// the version of the API module that go.mod selects.
func TestExternalCRDsMatchPinnedAPIVersions(t *testing.T) {
	g := NewWithT(t)
	// The KubeVirt CRDs come from kubevirt.io/kubevirt, which is released in
	// lockstep with kubevirt.io/api.
	wantVersion := map[string]string{
		"kubevirt.io/kubevirt":                        moduleVersion(g, "kubevirt.io/api"),
		"kubevirt.io/containerized-data-importer-api": moduleVersion(g, "kubevirt.io/containerized-data-importer-api"),
	}
	header := regexp.MustCompile(`^# Code generated by hack/gen-external-crds\.sh from (\S+) (\S+) `)

	files := map[string]int{}
	for _, dir := range append(ExternalCRDPaths(), CDIControllerCRDPath()) {
		matches, err := filepath.Glob(filepath.Join(RepoRoot(), dir, "*.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(matches).NotTo(BeEmpty(), "no CRDs in %s", dir)
		for _, file := range matches {
			first := firstLine(g, file)
			m := header.FindStringSubmatch(first)
			g.Expect(m).To(HaveLen(3), "%s: unexpected header %q", file, first)
			g.Expect(wantVersion).To(HaveKey(m[1]), "%s: generated from an unexpected module", file)
			g.Expect(m[2]).To(Equal(wantVersion[m[1]]),
				"%s was generated from %s %s but go.mod selects %s; run hack/gen-external-crds.sh", file, m[1], m[2], wantVersion[m[1]])
			files[m[1]]++
		}
	}
	// Every kind virt-operator installs (the KubeVirt CR included), and the
	// CDI kinds the stand-in and the provider use (6), with the rest of
	// CDI's that its own controller watches (6).
	g.Expect(files).To(Equal(map[string]int{"kubevirt.io/kubevirt": 17, "kubevirt.io/containerized-data-importer-api": 12}))
}

func moduleVersion(g Gomega, module string) string {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module) //nolint:gosec,noctx // The harness's own command; it ends on its own.
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred(), "go list -m %s", module)
	version := strings.TrimSpace(string(out))
	g.Expect(version).NotTo(BeEmpty(), "go.mod selects no version of %s", module)
	return version
}

func firstLine(g Gomega, file string) string {
	f, err := os.Open(file) //nolint:gosec // A file of the repository or one the harness wrote.
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	g.Expect(s.Scan()).To(BeTrue(), "%s is empty", file)
	return s.Text()
}

func toUnstructured(g Gomega, scheme *kruntime.Scheme, obj client.Object) *unstructured.Unstructured {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	g.Expect(err).NotTo(HaveOccurred())
	m, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	g.Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u
}

// parent returns the object holding the last element of path, following
// list indexes given as decimal strings.
func parent(obj map[string]any, path []string) (map[string]any, string, error) {
	var cur any = obj
	for _, p := range path[:len(path)-1] {
		switch node := cur.(type) {
		case map[string]any:
			cur = node[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(node) {
				return nil, "", fmt.Errorf("%v: no list item %q", path, p)
			}
			cur = node[i]
		default:
			return nil, "", fmt.Errorf("%v: %q is below a scalar", path, p)
		}
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, "", fmt.Errorf("%v: does not lead into an object", path)
	}
	return m, path[len(path)-1], nil
}

func set(obj map[string]any, value any, path ...string) error {
	m, key, err := parent(obj, path)
	if err == nil {
		m[key] = value
	}
	return err
}

func remove(obj map[string]any, path ...string) error {
	m, key, err := parent(obj, path)
	if err != nil {
		return err
	}
	if _, ok := m[key]; !ok {
		return fmt.Errorf("%v: nothing to remove", path)
	}
	delete(m, key)
	return nil
}

func vm(name string, spec kubevirtv1.VirtualMachineSpec) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: externalCRDNamespace, Name: name},
		Spec:       spec,
	}
}

// vmTemplate is a VMI template booting the first volume, with cloud-init
// user data taken unchanged from the bootstrap Secret through datasource.
func vmTemplate(boot kubevirtv1.VolumeSource, datasource kubevirtv1.VolumeSource) *kubevirtv1.VirtualMachineInstanceTemplateSpec {
	return &kubevirtv1.VirtualMachineInstanceTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "tenant"}},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Hostname: "worker-0",
			Domain: kubevirtv1.DomainSpec{
				CPU:       &kubevirtv1.CPU{Cores: 2},
				Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}},
				Devices: kubevirtv1.Devices{
					Disks: []kubevirtv1.Disk{
						{Name: "root", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
						{Name: "cloudinit", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
					},
					Interfaces: []kubevirtv1.Interface{{Name: "default", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}}},
				},
			},
			Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
			Volumes: []kubevirtv1.Volume{
				{Name: "root", VolumeSource: boot},
				{Name: "cloudinit", VolumeSource: datasource},
			},
		},
	}
}

func noCloud() kubevirtv1.VolumeSource {
	return kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{
		UserDataSecretRef: &corev1.LocalObjectReference{Name: "worker-0-bootstrap"},
	}}
}

func containerDisk() kubevirtv1.VolumeSource {
	return kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{
		Image: "registry.example.com/kairos/ubuntu@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	}}
}

func containerDiskVM(name string) *kubevirtv1.VirtualMachine {
	return vm(name, kubevirtv1.VirtualMachineSpec{
		RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
		Template:    vmTemplate(containerDisk(), noCloud()),
	})
}

func configDriveVM(name string) *kubevirtv1.VirtualMachine {
	return vm(name, kubevirtv1.VirtualMachineSpec{
		RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
		Template: vmTemplate(containerDisk(), kubevirtv1.VolumeSource{CloudInitConfigDrive: &kubevirtv1.CloudInitConfigDriveSource{
			UserDataSecretRef: &corev1.LocalObjectReference{Name: "worker-0-bootstrap"},
		}}),
	})
}

func instancetypeVM(name string) *kubevirtv1.VirtualMachine {
	m := containerDiskVM(name)
	m.Spec.Instancetype = &kubevirtv1.InstancetypeMatcher{Kind: "VirtualMachineClusterInstancetype", Name: "u1.medium"}
	m.Spec.Preference = &kubevirtv1.PreferenceMatcher{Kind: "VirtualMachineClusterPreference", Name: "virtio"}
	// CPU and memory come from the instancetype; setting them too is an
	// error KubeVirt's webhook reports.
	m.Spec.Template.Spec.Domain.CPU = nil
	m.Spec.Template.Spec.Domain.Resources = kubevirtv1.ResourceRequirements{}
	return m
}

func dataVolumeTemplateVM(name string) *kubevirtv1.VirtualMachine {
	m := vm(name, kubevirtv1.VirtualMachineSpec{
		RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
		DataVolumeTemplates: []kubevirtv1.DataVolumeTemplateSpec{
			{ObjectMeta: metav1.ObjectMeta{Name: name + "-root"}, Spec: httpDataVolume(name + "-root").Spec},
			{ObjectMeta: metav1.ObjectMeta{Name: name + "-golden"}, Spec: sourceRefDataVolume(name + "-golden").Spec},
		},
		Template: vmTemplate(kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: name + "-root"}}, noCloud()),
	})
	m.Spec.Template.Spec.Domain.Devices.Disks = append(m.Spec.Template.Spec.Domain.Devices.Disks,
		kubevirtv1.Disk{Name: "data", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}})
	m.Spec.Template.Spec.Volumes = append(m.Spec.Template.Spec.Volumes,
		kubevirtv1.Volume{Name: "data", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: name + "-golden"}}})
	return m
}

func storage() *cdiv1.StorageSpec {
	return &cdiv1.StorageSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}},
		StorageClassName: ptr.To("replicated"),
	}
}

func dataVolume(name string, spec cdiv1.DataVolumeSpec) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: externalCRDNamespace, Name: name}, Spec: spec}
}

func httpDataVolume(name string) *cdiv1.DataVolume {
	return dataVolume(name, cdiv1.DataVolumeSpec{
		Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{
			URL:           "https://factory.talos.dev/image/abc/v1.11.0/nocloud-amd64.raw.xz",
			CertConfigMap: "factory-ca",
		}},
		Storage: storage(),
	})
}

func pvcCloneDataVolume(name string) *cdiv1.DataVolume {
	return dataVolume(name, cdiv1.DataVolumeSpec{
		Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden-images", Name: "kairos-v1-35"}},
		Storage: storage(),
	})
}

func sourceRefDataVolume(name string) *cdiv1.DataVolume {
	return dataVolume(name, cdiv1.DataVolumeSpec{
		SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: ptr.To("golden-images"), Name: "talos-v1-11"},
		Storage:   storage(),
	})
}

func goldenDataSource(name string) *cdiv1.DataSource {
	return &cdiv1.DataSource{
		ObjectMeta: metav1.ObjectMeta{Namespace: externalCRDNamespace, Name: name},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{
			PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden-images", Name: "talos-v1-11"},
		}},
	}
}

func clusterInstancetype(name string) *instancetypev1beta1.VirtualMachineClusterInstancetype {
	return &instancetypev1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: instancetypev1beta1.VirtualMachineInstancetypeSpec{
			CPU:    instancetypev1beta1.CPUInstancetype{Guest: 2},
			Memory: instancetypev1beta1.MemoryInstancetype{Guest: resource.MustParse("4Gi")},
		},
	}
}

func clusterPreference(name string) *instancetypev1beta1.VirtualMachineClusterPreference {
	return &instancetypev1beta1.VirtualMachineClusterPreference{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: instancetypev1beta1.VirtualMachinePreferenceSpec{
			Devices: &instancetypev1beta1.DevicePreferences{PreferredDiskBus: kubevirtv1.DiskBusVirtio},
		},
	}
}
