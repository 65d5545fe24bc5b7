package envtest

import "path/filepath"

// ExternalCRDPaths returns the directories, relative to the repository root,
// that hold the real KubeVirt (VirtualMachine, VirtualMachineInstance,
// instancetypes, preferences) and CDI (DataVolume, DataSource) CRDs, for
// Options.CRDPaths. hack/gen-external-crds.sh generates them from the upstream
// sources at the versions go.mod pins; see test/crds/README.md.
//
// The apiserver drops unknown fields silently unless the client asks for
// strict field validation, so tests that prove an object is valid should
// create it with client.FieldValidation(metav1.FieldValidationStrict).
func ExternalCRDPaths() []string {
	return []string{
		filepath.Join("test", "crds", "kubevirt"),
		filepath.Join("test", "crds", "cdi"),
	}
}

// CDIControllerCRDPath returns the directory, relative to the repository
// root, of the CDI kinds only CDI's own cdi-controller needs (it watches
// every CDI kind and exits on one the apiserver does not serve):
// test/cdi installs them when it runs the controller, and no other tier
// loads them.
func CDIControllerCRDPath() string {
	return filepath.Join("test", "crds", "cdi-controller")
}
