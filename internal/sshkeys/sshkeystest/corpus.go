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

package sshkeystest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
)

// Verdicts on a corpus entry, of sshkeys.PublicKeyProblem and of the
// admission policies alike.
const (
	Refused  = "Refused"
	Admitted = "Admitted"
)

// Entry is one value of the shared corpus: what the Go check
// (sshkeys.PublicKeyProblem) and the admission policies
// (config/workerclass/policy, config/bootstrap/policy, on the real
// kube-apiserver) both do with it as an sshKeys item, and what the
// private-key detector (sshkeys.LooksLikePrivateKey, which names a refusal
// and scans logs) reports.
type Entry struct {
	// Name is "type/encoding" for a private key alone, "comment/type/encoding"
	// for one in a public key's comment, "public/..." and "refused/..." for
	// the others.
	Name string `json:"name"`
	// Value is an sshKeys item.
	Value string `json:"value"`
	// PrivateKey is what the detector reports.
	PrivateKey bool `json:"privateKey"`
	// Verdict is the Go check's and the policies' verdict, Refused or
	// Admitted.
	Verdict string `json:"verdict"`
}

//go:embed testdata/corpus.json
var corpusJSON []byte

// Corpus is the shared corpus (testdata/corpus.json): real public keys of
// every accepted type, real private keys of every type in every encoding
// the detector claims, alone and in a public key's comment in the
// encodings a paste produces, and lines that break each part of the rule.
// Both sides' tests read it; MakeCorpus wrote it (go test
// ./internal/sshkeys -run TestCorpus -update).
func Corpus() ([]Entry, error) {
	var entries []Entry
	if err := json.Unmarshal(corpusJSON, &entries); err != nil {
		return nil, fmt.Errorf("reading the SSH key corpus: %w", err)
	}
	return entries, nil
}

// MakeCorpus makes a new corpus with new keys.
func MakeCorpus() []Entry {
	encoded := EncodedPrivateKeys()
	values := maps.Clone(encoded)
	for _, name := range slices.Sorted(maps.Keys(encoded)) {
		typ, form, _ := strings.Cut(name, "/")
		v := encoded[name]
		switch form {
		case "pkcs8-pem", "openssh-pem":
			values[typ+"/"+form+"-base64-after-1-byte"] = base64.StdEncoding.EncodeToString([]byte("x" + v))
			values[typ+"/"+form+"-base64-after-2-bytes"] = base64.StdEncoding.EncodeToString([]byte("xy" + v))
			values[typ+"/"+form+"-base64-twice"] = base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString([]byte(v))))
			values[typ+"/"+form+"-header-split-over-lines"] = strings.ReplaceAll(v, "PRIVATE KEY", "PRIVATE\nKEY")
		case "pkcs8-base64":
			values[typ+"/pkcs8-base64-twice"] = base64.StdEncoding.EncodeToString([]byte(v))
			values[typ+"/pkcs8-base64-wrapped-4"] = wrap(v, 4)
			values[typ+"/pkcs8-base64-wrapped-5"] = wrap(v, 5)
		}
	}
	v2 := ed25519PKCS8v2()
	values["ed25519/pkcs8-v2-pem"] = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: v2}))
	values["ed25519/pkcs8-v2-base64"] = base64.StdEncoding.EncodeToString(v2)
	values["ed25519/pkcs8-v2-base64url"] = base64.RawURLEncoding.EncodeToString(v2)

	var out []Entry
	for _, name := range slices.Sorted(maps.Keys(values)) {
		out = append(out, Entry{Name: name, Value: values[name], PrivateKey: true, Verdict: Refused})
	}
	out = append(out, inComments()...)
	out = append(out, publicKeys()...)
	return append(out, refusedLines()...)
}

// ed25519PKCS8v2 is an Ed25519 key as RFC 8410's OneAsymmetricKey version 2
// (RFC 5958): version 1 and the public key after the private one, which
// OpenSSL 3 and others write; Go writes version 1 without it.
func ed25519PKCS8v2() []byte {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	der := []byte{0x30, 0x51, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20}
	der = append(der, priv.Seed()...)
	der = append(der, 0x81, 0x21, 0x00)
	return append(der, pub...)
}

func certificatePEM() string {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(1)}
	der, err := x509.CreateCertificate(rand.Reader, template, template, priv.Public(), priv)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
