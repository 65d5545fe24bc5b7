// Command kubevirt-manifests writes what virt-operator installs for KubeVirt's
// control plane, built by the same virt-operator code that installs it in a
// real cluster (its install strategy), as YAML files for the tests:
//
//   - -crds: every CustomResourceDefinition (the install strategy's and the
//     KubeVirt CRD that virt-operator's own manifest carries);
//   - -install: the service accounts and RBAC of virt-api, virt-controller
//     and virt-handler, virt-api's admission webhook configurations, the
//     ValidatingAdmissionPolicy that confines virt-handler, KubeVirt's
//     PriorityClass, and the common cluster instancetypes and preferences;
//     and virt-handler's DaemonSet (virt-handler.yaml), for the real node of
//     test/node, with the images named as virt-operator names them for the
//     quay.io/kubevirt registry at this version;
//   - -operator: virt-operator's own manifest, what KubeVirt's release
//     kubevirt-operator.yaml holds (its namespace, the KubeVirt CRD, the
//     PriorityClass, the operator's RBAC and Deployment, for the
//     quay.io/kubevirt registry at this version), which hack/kind applies.
//
// It lives in its own module because kubevirt.io/kubevirt pins older k8s.io
// modules through replace directives that the main module cannot share; the
// same module builds virt-api and virt-controller (go.mod's tool block).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"

	corev1 "k8s.io/api/core/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/install"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/rbac"
	operatorutil "kubevirt.io/kubevirt/pkg/virt-operator/util"
	"sigs.k8s.io/yaml"
)

const (
	sourceModule = "kubevirt.io/kubevirt"
	// namespace is where KubeVirt is installed, virt-operator's default.
	namespace = "kubevirt"
)

func main() {
	crds := flag.String("crds", "", "directory to write the CRD files into")
	installDir := flag.String("install", "", "directory to write the control plane's install manifests into")
	operator := flag.String("operator", "", "file to write virt-operator's manifest into (alone)")
	flag.Parse()
	if *operator != "" {
		if err := writeOperator(*operator); err != nil {
			fmt.Fprintf(os.Stderr, "kubevirt-manifests: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *crds == "" || *installDir == "" {
		fmt.Fprintln(os.Stderr, "kubevirt-manifests: -crds and -install, or -operator, are required")
		os.Exit(2)
	}
	if err := run(*crds, *installDir); err != nil {
		fmt.Fprintf(os.Stderr, "kubevirt-manifests: %v\n", err)
		os.Exit(1)
	}
}

func run(crdDir, installDir string) error {
	version, err := sourceVersion()
	if err != nil {
		return err
	}
	kv := &v1.KubeVirt{}
	kv.Namespace = namespace
	strategy, err := install.GenerateCurrentInstallStrategy(operatorutil.GetTargetConfigFromKV(kv), "", namespace)
	if err != nil {
		return fmt.Errorf("generating virt-operator's install strategy: %w", err)
	}
	kubevirtCRD, err := components.NewKubeVirtCrd()
	if err != nil {
		return err
	}
	for _, dir := range []string{crdDir, installDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	for _, crd := range append(strategy.CRDs(), kubevirtCRD) {
		file := filepath.Join(crdDir, crd.Spec.Group+"_"+crd.Spec.Names.Plural+".yaml")
		if err := write(file, version, "virt-operator components", []any{withKind(crd, extv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))}); err != nil {
			return err
		}
	}

	rbac := []any{}
	for _, sa := range strategy.ServiceAccounts() {
		rbac = append(rbac, withKind(sa, schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}))
	}
	for _, o := range strategy.ClusterRoles() {
		rbac = append(rbac, withKind(o, rbacKind("ClusterRole")))
	}
	for _, o := range strategy.ClusterRoleBindings() {
		rbac = append(rbac, withKind(o, rbacKind("ClusterRoleBinding")))
	}
	for _, o := range strategy.Roles() {
		rbac = append(rbac, withKind(o, rbacKind("Role")))
	}
	for _, o := range strategy.RoleBindings() {
		rbac = append(rbac, withKind(o, rbacKind("RoleBinding")))
	}

	// virt-operator's own webhook (it validates KubeVirt CR updates) is left
	// out: virt-operator does not run in the tests, and its webhook fails
	// closed.
	webhooks := []any{
		withKind(components.NewVirtAPIValidatingWebhookConfiguration(namespace), admissionKind("ValidatingWebhookConfiguration")),
		withKind(components.NewVirtAPIMutatingWebhookConfiguration(namespace), admissionKind("MutatingWebhookConfiguration")),
	}
	policies := []any{}
	for _, o := range strategy.ValidatingAdmissionPolicies() {
		policies = append(policies, withKind(o, admissionKind("ValidatingAdmissionPolicy")))
	}
	for _, o := range strategy.ValidatingAdmissionPolicyBindings() {
		policies = append(policies, withKind(o, admissionKind("ValidatingAdmissionPolicyBinding")))
	}
	// virt-handler's DaemonSet as virt-operator deploys it for a KubeVirt CR
	// naming the upstream registry and this version: the launcher image in
	// its node-labeller init container is the one virt-controller is given
	// (test/kubevirt.LauncherImage).
	kvImages := kv.DeepCopy()
	kvImages.Spec.ImageRegistry = "quay.io/kubevirt"
	kvImages.Spec.ImageTag = version
	imageStrategy, err := install.GenerateCurrentInstallStrategy(operatorutil.GetTargetConfigFromKV(kvImages), "", namespace)
	if err != nil {
		return fmt.Errorf("generating virt-operator's install strategy with images: %w", err)
	}
	handler := []any{}
	for _, ds := range imageStrategy.DaemonSets() {
		handler = append(handler, withKind(ds, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}))
	}
	if len(handler) != 1 {
		return fmt.Errorf("virt-operator's install strategy has %d DaemonSets, want virt-handler's alone", len(handler))
	}
	priority := []any{withKind(components.NewKubeVirtPriorityClassCR(), schema.GroupVersionKind{Group: "scheduling.k8s.io", Version: "v1", Kind: "PriorityClass"})}
	catalog := []any{}
	for _, o := range strategy.Instancetypes() {
		catalog = append(catalog, withKind(o, schema.GroupVersionKind{Group: "instancetype.kubevirt.io", Version: "v1beta1", Kind: "VirtualMachineClusterInstancetype"}))
	}
	for _, o := range strategy.Preferences() {
		catalog = append(catalog, withKind(o, schema.GroupVersionKind{Group: "instancetype.kubevirt.io", Version: "v1beta1", Kind: "VirtualMachineClusterPreference"}))
	}

	for file, objs := range map[string][]any{
		"rbac.yaml":                 rbac,
		"webhooks.yaml":             webhooks,
		"admission-policies.yaml":   policies,
		"priorityclass.yaml":        priority,
		"common-instancetypes.yaml": catalog,
		"virt-handler.yaml":         handler,
	} {
		if err := write(filepath.Join(installDir, file), version, "virt-operator install strategy", objs); err != nil {
			return err
		}
	}
	return nil
}

// writeOperator writes virt-operator's manifest as KubeVirt's release
// templates it (manifests/release/kubevirt-operator.yaml.in): the namespace
// privileged for virt-handler, the KubeVirt CRD, the PriorityClass, the
// operator's RBAC, and its Deployment naming the quay.io/kubevirt images of
// this version, from which virt-operator names every other image.
func writeOperator(file string) error {
	version, err := sourceVersion()
	if err != nil {
		return err
	}
	kubevirtCRD, err := components.NewKubeVirtCrd()
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
		"kubevirt.io":                        "",
		"pod-security.kubernetes.io/enforce": "privileged",
	}}}
	objs := []any{
		withKind(ns, schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}),
		withKind(kubevirtCRD, extv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")),
		withKind(components.NewKubeVirtPriorityClassCR(), schema.GroupVersionKind{Group: "scheduling.k8s.io", Version: "v1", Kind: "PriorityClass"}),
	}
	objs = append(objs, rbac.GetAllOperator(namespace)...)
	objs = append(objs, components.NewOperatorDeployment(namespace, "quay.io/kubevirt", "", version, "2",
		"", "", "", "", "", "", "", "", "", "", "", "", "", corev1.PullIfNotPresent))
	return write(file, version, "virt-operator's release manifest", objs)
}

func rbacKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: kind}
}

func admissionKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: kind}
}

// withKind sets the object's apiVersion and kind, which typed constructors
// leave empty.
func withKind(obj runtime.Object, gvk schema.GroupVersionKind) runtime.Object {
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj
}

// sourceVersion reports the kubevirt.io/kubevirt version linked into this
// binary, so the header of every file names exactly what produced it.
func sourceVersion() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("binary carries no build information")
	}
	for _, dep := range info.Deps {
		if dep.Path == sourceModule {
			return dep.Version, nil
		}
	}
	return "", fmt.Errorf("%s is not linked into this binary", sourceModule)
}

// write renders the objects as an apply-ready multi-document manifest: the
// empty status and null creationTimestamp that typed objects carry are
// dropped, documents are sorted by kind, namespace and name, and keys by
// sigs.k8s.io/yaml, so the output is stable byte for byte.
func write(file, version, origin string, objs []any) error {
	docs := make([]map[string]any, 0, len(objs))
	for _, o := range objs {
		raw, err := json.Marshal(o)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			return err
		}
		delete(obj, "status")
		if meta, ok := obj["metadata"].(map[string]any); ok {
			delete(meta, "creationTimestamp")
		}
		docs = append(docs, obj)
	}
	sort.SliceStable(docs, func(i, j int) bool { return sortKey(docs[i]) < sortKey(docs[j]) })
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Code generated by hack/gen-external-crds.sh from %s %s (%s). DO NOT EDIT.\n", sourceModule, version, origin)
	for _, d := range docs {
		body, err := yaml.Marshal(d)
		if err != nil {
			return fmt.Errorf("rendering %s: %w", sortKey(d), err)
		}
		buf.WriteString("---\n")
		buf.Write(body)
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

func sortKey(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	kind, _ := obj["kind"].(string)
	if kind == "Namespace" {
		// First, so that what is in it can be applied after it.
		kind = " " + kind
	}
	return kind + "/" + ns + "/" + name
}
