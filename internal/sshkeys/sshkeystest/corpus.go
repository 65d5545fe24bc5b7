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

// Verdicts of the in-apiserver admission policy on a corpus entry.
const (
	Refused  = "Refused"
	Admitted = "Admitted"
)

// Entry is one value of the shared corpus: what the Go detector
// (sshkeys.LooksLikePrivateKey) must say of it, and what the admission
// policies (config/workerclass/policy, config/bootstrap/policy) do with it
// as an sshKeys item, on the real kube-apiserver.
type Entry struct {
	// Name is "type/encoding".
	Name string `json:"name"`
	// Value is an sshKeys item.
	Value string `json:"value"`
	// PrivateKey is what the Go detector reports.
	PrivateKey bool `json:"privateKey"`
	// Policy is the policy's verdict, Refused or Admitted.
	Policy string `json:"policy"`
	// Note says why the two sides differ, when they do.
	Note string `json:"note,omitempty"`
}

//go:embed testdata/corpus.json
var corpusJSON []byte

// Corpus is the shared corpus (testdata/corpus.json): real private keys
// of every type in every encoding the detector claims, and values that are
// none, each with what the detector and the policies do with it. Both
// sides' tests read it; MakeCorpus wrote it (go test
// ./internal/sshkeys -run TestCorpus -update).
func Corpus() ([]Entry, error) {
	var entries []Entry
	if err := json.Unmarshal(corpusJSON, &entries); err != nil {
		return nil, fmt.Errorf("reading the private key corpus: %w", err)
	}
	return entries, nil
}

// MakeCorpus makes a new corpus with new keys: EncodedPrivateKeys, the
// encodings only the detector's decoding used to find (base64 of armour
// at any alignment, base64 twice, a header wrapped over lines, Ed25519 in
// PKCS#8 v2) and values that are no private key.
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
		out = append(out, Entry{Name: name, Value: values[name], PrivateKey: true, Policy: Refused})
	}
	public, _ := KeyPair()
	cert := certificatePEM()
	return append(out,
		Entry{Name: "none/ed25519-public-key", Value: public, Policy: Admitted},
		Entry{Name: "none/rsa-public-key-prefix", Value: "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 user@host", Policy: Admitted},
		Entry{Name: "none/base64-of-text", Value: base64.StdEncoding.EncodeToString([]byte("an ordinary base64 value that decodes to text")), Policy: Admitted},
		Entry{Name: "none/long-base64-word", Value: strings.Repeat("QUJD", 100), Policy: Refused,
			Note: "no private key, but a base64 word of key length that is no SSH key blob: the policy cannot decode it, so it refuses it"},
		Entry{Name: "none/certificate-pem-base64", Value: base64.StdEncoding.EncodeToString([]byte(cert)), Policy: Refused,
			Note: "no private key, but armour in base64 is no public key either: the policy refuses base64 of any PEM armour, the webhook's public key check refuses it too"},
	)
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
