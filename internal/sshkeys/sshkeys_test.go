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
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// encodedKeys are real private keys of every type, in every encoding the
// detector claims, made once: the oracle the tests and the fuzz target
// check the detector against.
var encodedKeys = sync.OnceValue(func() map[string]string {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	keys := map[string]crypto.PrivateKey{"rsa": rsaKey, "ecdsa-p256": p256, "ecdsa-p384": p384, "ecdsa-p521": p521, "ed25519": edKey}

	out := map[string]string{}
	for name, key := range keys {
		pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			panic(err)
		}
		ders := map[string][]byte{"pkcs8": pkcs8}
		switch k := key.(type) {
		case *rsa.PrivateKey:
			ders["pkcs1"] = x509.MarshalPKCS1PrivateKey(k)
		case *ecdsa.PrivateKey:
			sec1, err := x509.MarshalECPrivateKey(k)
			if err != nil {
				panic(err)
			}
			ders["sec1"] = sec1
		}
		openssh, err := ssh.MarshalPrivateKey(key, "comment")
		if err != nil {
			panic(err)
		}
		encrypted, err := ssh.MarshalPrivateKeyWithPassphrase(key, "comment", []byte("passphrase"))
		if err != nil {
			panic(err)
		}
		out[name+"/openssh-pem"] = string(pem.EncodeToMemory(openssh))
		out[name+"/openssh-encrypted-pem"] = string(pem.EncodeToMemory(encrypted))
		out[name+"/openssh-bare-base64"] = base64.StdEncoding.EncodeToString(openssh.Bytes)
		for form, der := range ders {
			out[name+"/"+form+"-pem"] = string(pem.EncodeToMemory(&pem.Block{Type: pemType(form), Bytes: der}))
			out[name+"/"+form+"-base64"] = base64.StdEncoding.EncodeToString(der)
			out[name+"/"+form+"-base64url"] = base64.RawURLEncoding.EncodeToString(der)
			out[name+"/"+form+"-base64-wrapped-64"] = wrap(base64.StdEncoding.EncodeToString(der), 64)
			out[name+"/"+form+"-base64-wrapped-76"] = wrap(base64.StdEncoding.EncodeToString(der), 76)
			out[name+"/"+form+"-base64-of-pem"] = base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: pemType(form), Bytes: der}))
		}
	}
	return out
})

func pemType(form string) string {
	switch form {
	case "pkcs1":
		return "RSA PRIVATE KEY"
	case "sec1":
		return "EC PRIVATE KEY"
	}
	return "PRIVATE KEY"
}

func wrap(s string, width int) string {
	var b strings.Builder
	for len(s) > width {
		b.WriteString(s[:width] + "\n")
		s = s[width:]
	}
	b.WriteString(s)
	return b.String()
}

// publicKey is a real public key line.
var publicKey = sync.OnceValue(func() string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " admin@example"
})

func TestEveryPrivateKeyEncodingIsDetected(t *testing.T) {
	for name, encoded := range encodedKeys() {
		for place, value := range map[string]string{
			"alone":                       encoded,
			"folded into a public key":    publicKey() + " " + strings.ReplaceAll(encoded, "\n", ""),
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
		publicKey(),
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
		publicKey():                      true,
		"command=\"x\" " + publicKey():   false,
		publicKey() + "\n" + publicKey(): false,
		"not a key":                      false,
		"   ":                            false,
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
	names := make([]string, 0, len(encodedKeys()))
	for name := range encodedKeys() {
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
		value := before + sep + encodedKeys()[name] + sep + after
		if !LooksLikePrivateKey(value) {
			t.Fatalf("%s between %q and %q: not detected", name, before, after)
		}
	})
}
