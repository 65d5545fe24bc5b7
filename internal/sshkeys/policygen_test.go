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

package sshkeys

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// policyPaths are the admission policies that hold PolicyExpression.
var policyPaths = []string{
	filepath.Join("..", "..", "config", "workerclass", "policy", "private-keys.yaml"),
	filepath.Join("..", "..", "config", "bootstrap", "policy", "private-keys.yaml"),
}

// generatedBlock is the refusedKeys variable as the policies write it;
// -update replaces it.
var generatedBlock = regexp.MustCompile(`(?m)^  - name: refusedKeys\n    expression: \|-\n(?:      .*\n)+`)

// TestPolicyIsGenerated: both admission policies hold PolicyExpression as
// their refusedKeys variable, refuse when it is not empty, and say
// PolicyMessage; with -update it writes the expression into them.
func TestPolicyIsGenerated(t *testing.T) {
	block := "  - name: refusedKeys\n    expression: |-\n      " +
		strings.ReplaceAll(PolicyExpression(), "\n", "\n      ") + "\n"
	message := regexp.MustCompile(`: PLACEHOLDER'|: Invalid: a value is not one authorized_keys[^']*'`)
	for _, path := range policyPaths {
		if *update {
			data, err := os.ReadFile(filepath.Clean(path))
			if err != nil {
				t.Fatal(err)
			}
			out := generatedBlock.ReplaceAllLiteralString(string(data), block)
			out = message.ReplaceAllLiteralString(out, ": "+PolicyMessage+"'")
			if err := os.WriteFile(filepath.Clean(path), []byte(out), 0o600); err != nil { //nolint:gosec // One of policyPaths.
				t.Fatal(err)
			}
			continue
		}
		policy := readPolicy(t, path)
		var expression string
		for _, v := range policy.Spec.Variables {
			if v.Name == "refusedKeys" {
				expression = v.Expression
			}
		}
		if expression != PolicyExpression() {
			t.Errorf("%s: refusedKeys is not PolicyExpression; run go test ./internal/sshkeys -run TestPolicyIsGenerated -update", path)
		}
		if len(policy.Spec.Validations) != 1 {
			t.Fatalf("%s: %d validations, want 1", path, len(policy.Spec.Validations))
		}
		v := policy.Spec.Validations[0]
		if v.Expression != "size(variables.refusedKeys) == 0" {
			t.Errorf("%s: the validation is %q", path, v.Expression)
		}
		if v.Message != "spec.sshKeys: "+PolicyMessage {
			t.Errorf("%s: the message is %q", path, v.Message)
		}
		if v.MessageExpression != "" && !strings.HasSuffix(v.MessageExpression, " + ': "+PolicyMessage+"'") {
			t.Errorf("%s: the message expression is %q", path, v.MessageExpression)
		}
	}
}

func readPolicy(t *testing.T, path string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	data, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096).Decode(policy); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return policy
}
