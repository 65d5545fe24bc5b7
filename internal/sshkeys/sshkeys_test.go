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

	"golang.org/x/crypto/ssh"

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

// TestPublicKeyProblem: each part of the rule names itself in the reason,
// and no reason quotes the value.
func TestPublicKeyProblem(t *testing.T) {
	public := sshkeystest.PublicKey()
	key := strings.Join(strings.Fields(public)[:2], " ")
	blob := strings.Fields(public)[1]
	for _, tc := range []struct {
		name, value, want string
	}{
		{"a key with a comment", public, ""},
		{"a key without a comment", key, ""},
		{"a security key", sshkeystest.SecurityKeyEd25519("ssh:"), ""},
		{"empty", "", "must be a public key such as"},
		{"blanks", "   ", "must be a public key such as"},
		{"two lines", public + "\n" + public, "single public key on one line"},
		{"a trailing blank", public + " ", "no leading or trailing blanks"},
		{"options", `command="x" ` + public, "without authorized_keys options"},
		{"ssh-dss", "ssh-dss " + blob, "ssh-dss (DSA) keys are refused"},
		{"an unknown type", "ssh-foo " + blob, "must start with a key type: ssh-ed25519, ssh-rsa"},
		{"the blob of another type", "ssh-rsa " + blob, "the key is an ssh-ed25519 key, not the ssh-rsa its line names"},
		{"a blob that is no key", "ssh-ed25519 " + base64.StdEncoding.EncodeToString(make([]byte, 51)), "does not parse as an ssh-ed25519 public key"},
		{"no blob", "ssh-ed25519", "must hold the base64 key after ssh-ed25519"},
		{"two keys", key + " " + key, "must be a single public key"},
		{"two spaces", key + "  admin", "the comment must follow the key after one space"},
		{"a long comment", key + strings.Repeat(" word", 52), "at most 256 bytes"},
		{"a control character", key + " a\x00b", "printable ASCII"},
		{"a long word", key + " " + strings.Repeat("0f", 17), "at most 32 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PublicKeyProblem(tc.value)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("PublicKeyProblem = %q, want %q", got, tc.want)
			}
			if len(blob) > 8 && strings.Contains(got, blob) {
				t.Fatalf("the reason quotes the key: %q", got)
			}
		})
	}
}

// TestBlobRegexpsMatchEveryLengthOfTheirType: each type's blob expression
// matches a blob of every length the type allows that starts with its
// header, at the bounds and between, and none one byte beyond them or with
// a header byte changed.
func TestBlobRegexpsMatchEveryLengthOfTheirType(t *testing.T) {
	for _, typ := range KeyTypes {
		re := blobREs[typ.Name]
		blobOf := func(n int) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(i*7 + 1)
				if i < len(typ.header) && typ.header[i] >= 0 {
					b[i] = byte(typ.header[i])
				}
			}
			return b
		}
		for n := typ.minBlob - 1; n <= typ.maxBlob+1; n++ {
			want := n >= typ.minBlob && n <= typ.maxBlob
			if got := re.MatchString(base64.StdEncoding.EncodeToString(blobOf(n))); got != want {
				t.Errorf("%s: a blob of %d bytes matches %v, want %v", typ.Name, n, got, want)
			}
		}
		for i, h := range typ.header {
			if h < 0 {
				continue
			}
			b := blobOf(typ.minBlob)
			b[i] ^= 0x01
			if re.MatchString(base64.StdEncoding.EncodeToString(b)) {
				t.Errorf("%s: header byte %d changed still matches", typ.Name, i)
			}
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

var update = flag.Bool("update", false, "write a new SSH key corpus (sshkeystest/testdata/corpus.json) and the policies' expression")

// FuzzPublicKeyLines: a value the check accepts is an authorized_keys
// line golang.org/x/crypto/ssh reads as one key of the type it names,
// without options or anything after it, whose comment keeps the rule's
// bounds; and the check never panics.
func FuzzPublicKeyLines(f *testing.F) {
	entries, err := sshkeystest.Corpus()
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if len(e.Value) < 1024 {
			f.Add(e.Value)
		}
	}
	f.Fuzz(func(t *testing.T, value string) {
		if PublicKeyProblem(value) != "" {
			return
		}
		key, comment, options, rest, err := ssh.ParseAuthorizedKey([]byte(value))
		if err != nil || len(options) > 0 || len(rest) > 0 {
			t.Fatalf("accepted, but not one plain authorized_keys line: %v", err)
		}
		typ, _, _ := strings.Cut(value, " ")
		if key.Type() != typ {
			t.Fatalf("accepted an %s key named %s", key.Type(), typ)
		}
		if len(comment) > MaxCommentBytes {
			t.Fatalf("accepted a comment of %d bytes", len(comment))
		}
		for _, word := range strings.Fields(comment) {
			if len(word) > MaxWordChars {
				t.Fatalf("accepted a comment word of %d characters", len(word))
			}
		}
	})
}

// TestCorpus: the Go check gives every value of the shared corpus the
// verdict the corpus says, which the admission policies' test on the real
// apiserver holds them to as well (TestPrivateKeyPolicies), and the
// detector reports what the corpus says.
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
		verdict := sshkeystest.Admitted
		if PublicKeyProblem(e.Value) != "" {
			verdict = sshkeystest.Refused
		}
		if verdict != e.Verdict {
			t.Errorf("%s: PublicKeyProblem gives %s, the corpus says %s", e.Name, verdict, e.Verdict)
		}
		if got := LooksLikePrivateKey(e.Value); got != e.PrivateKey {
			t.Errorf("%s: LooksLikePrivateKey = %v, the corpus says %v", e.Name, got, e.PrivateKey)
		}
	}
}
