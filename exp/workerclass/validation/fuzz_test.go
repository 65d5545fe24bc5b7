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

package validation

import (
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys"
)

// FuzzParseVersions checks the version parsers against apimachinery's
// semantic version parser: whatever ParseSemver accepts, apimachinery
// accepts with the same major and minor, and a minor is never a semver.
func FuzzParseVersions(f *testing.F) {
	for _, s := range []string{"v1.35.6", "v1.35", "v1.13.0-beta.1", "v1.35.0-rc.0+k3s1", "1.35.6", "v01.2.3", "v1.2.3-", "v1.2.3+a.b", "v0.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if major, minor, ok := ParseSemver(s); ok {
			v, err := version.ParseSemantic(s)
			if err != nil {
				t.Fatalf("ParseSemver accepted %q, apimachinery rejects it: %v", s, err)
			}
			if uint64(v.Major()) != major || uint64(v.Minor()) != minor {
				t.Fatalf("%q: got %d.%d, apimachinery %d.%d", s, major, minor, v.Major(), v.Minor())
			}
			if !SameMinor(s, "v"+strconv.FormatUint(major, 10)+"."+strconv.FormatUint(minor, 10)) {
				t.Fatalf("%q is not in its own minor", s)
			}
		}
		if _, _, ok := ParseMinor(s); ok {
			if _, _, semver := ParseSemver(s); semver {
				t.Fatalf("%q parses as both a minor and a full version", s)
			}
		}
	})
}

// FuzzSSHKeys checks that the sshKeys rules never panic, refuse every
// value that is no public key line (Kairos) and every such value that
// looks like a private key (either family), and never echo it.
func FuzzSSHKeys(f *testing.F) {
	for _, s := range []string{
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKx admin",
		"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
		"PuTTY-User-Key-File-3: ssh-ed25519",
		"",
	} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, key string, kairos bool) {
		family := workerclassv1.BootstrapTalos
		if kairos {
			family = workerclassv1.BootstrapKairos
		}
		errs := ValidateSSHKeys(family, []string{key}, field.NewPath("spec", "sshKeys"))
		problem := sshkeys.PublicKeyProblem(key)
		if problem != "" && kairos && len(errs) == 0 {
			t.Fatalf("a value that is no public key line was accepted: %s", problem)
		}
		if problem != "" && sshkeys.LooksLikePrivateKey(key) {
			if len(errs) == 0 {
				t.Fatal("a private key was accepted")
			}
			if msg := errs.ToAggregate().Error(); strings.TrimSpace(key) != "" && strings.Contains(msg, strings.TrimSpace(key)) {
				t.Fatalf("the message echoes the key: %s", msg)
			}
		}
	})
}
