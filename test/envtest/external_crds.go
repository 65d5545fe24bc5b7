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
