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
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cozystack/cluster-api-workers/internal/sshkeys/sshkeystest"
)

func TestEveryPrivateKeyEncodingIsDetected(t *testing.T) {
	for name, encoded := range sshkeystest.EncodedPrivateKeys() {
		for place, value := range map[string]string{
			"alone":                       encoded,
			"folded into a public key":    sshkeystest.PublicKey() + " " + strings.ReplaceAll(encoded, "\n", ""),
			"between lines of other text": "values:\n  note: hello\n" + encoded + "\nend",
		} {
			if !LooksLikePrivateKey(value) {
				t.Errorf("%s %s: not detected", name, place)
			}
		}
	}
}

func TestPublicKeysAndOrdinaryTextAreNotPrivateKeys(t *testing.T) {
	for _, s := range []string{
		sshkeystest.PublicKey(),
		"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 user@host",
		"",
		"just a sentence about PRIVATE matters",
		strings.Repeat("QUJD", 100),
		base64.StdEncoding.EncodeToString([]byte("an ordinary base64 value that decodes to text")),
	} {
		if LooksLikePrivateKey(s) {
			t.Errorf("%q: detected as a private key", s)
		}
	}
}

func TestPublicKeyProblem(t *testing.T) {
	for s, want := range map[string]bool{
		sshkeystest.PublicKey():                                  true,
		"command=\"x\" " + sshkeystest.PublicKey():               false,
		sshkeystest.PublicKey() + "\n" + sshkeystest.PublicKey(): false,
		"not a key": false,
		"   ":       false,
	} {
		if got := PublicKeyProblem(s) == ""; got != want {
			t.Errorf("%q: valid %v, want %v", s, got, want)
		}
	}
}

// FuzzDetectsInsertedPrivateKeys: whatever text surrounds a real private
// key, in whatever encoding, the detector finds it. The oracle is the
// construction: a key was put in.
func FuzzDetectsInsertedPrivateKeys(f *testing.F) {
	names := make([]string, 0, len(sshkeystest.EncodedPrivateKeys()))
	for name := range sshkeystest.EncodedPrivateKeys() {
		names = append(names, name)
	}
	slices.Sort(names)
	f.Add(uint8(0), "prefix", "suffix", false)
	f.Add(uint8(7), "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKx", "", true)
	f.Add(uint8(30), "QUJDRA==", "QUJDRA==", true)
	f.Fuzz(func(t *testing.T, which uint8, before, after string, ownLines bool) {
		name := names[int(which)%len(names)]
		sep := " "
		if ownLines {
			sep = "\n"
		}
		value := before + sep + sshkeystest.EncodedPrivateKeys()[name] + sep + after
		if !LooksLikePrivateKey(value) {
			t.Fatalf("%s between %q and %q: not detected", name, before, after)
		}
	})
}

var update = flag.Bool("update", false, "write a new private key corpus (sshkeystest/testdata/corpus.json)")

// TestCorpus: the Go detector says of every value of the shared corpus what
// the corpus says; the admission policies' test on the real apiserver
// reads the same corpus (exp/workerclass/webhooks, TestPrivateKeyPolicies).
func TestCorpus(t *testing.T) {
	if *update {
		out, err := json.MarshalIndent(sshkeystest.MakeCorpus(), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("sshkeystest", "testdata", "corpus.json"), append(out, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote a new corpus; run the test again without -update")
		return
	}
	entries, err := sshkeystest.Corpus()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("the corpus is empty")
	}
	for _, e := range entries {
		if got := LooksLikePrivateKey(e.Value); got != e.PrivateKey {
			t.Errorf("%s: LooksLikePrivateKey = %v, the corpus says %v", e.Name, got, e.PrivateKey)
		}
	}
}
