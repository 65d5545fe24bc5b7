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

// Package sshkeys holds the project's one check of SSH public keys and its
// one detector of private keys, for every field where a tenant may paste a
// key (pool values, KairosConfig sshAuthorizedKeys). A message never
// carries the key.
package sshkeys

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"

	"golang.org/x/crypto/ssh"
)

// PublicKeyProblem returns why key is not one plain authorized_keys public
// key on one line, or "".
func PublicKeyProblem(key string) string {
	trimmed := strings.TrimSpace(key)
	if trimmed == "" {
		return "must be a public key such as \"ssh-ed25519 AAAA... comment\""
	}
	if strings.ContainsAny(trimmed, "\r\n") {
		return "must be a single public key on one line"
	}
	_, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(trimmed))
	switch {
	case err != nil:
		return "must be a public key such as \"ssh-ed25519 AAAA... comment\""
	case len(options) > 0:
		return "must be a plain public key without authorized_keys options"
	case len(bytes.TrimSpace(rest)) > 0:
		return "must be a single public key"
	}
	return ""
}

// PrivateKeyMessage is the refusal of a field that holds a private key.
const PrivateKeyMessage = "this looks like a private key; never put a private key here, only a public key"

// Markers that name private key material in text: PEM armour of every
// kind, PuTTY's key files, and the base64 form of "openssh-key-v1\x00",
// the start of every OpenSSH private key body. The in-apiserver admission
// policies look for the same (config/workerclass/policy).
var markers = []string{"PRIVATE KEY", "PuTTY-User-Key-File", "b3BlbnNzaC1rZXktdjEA"}

// maxWords and maxRunChars bound the search for a wrapped blob: from each
// of the first maxWords words, words are joined up to maxRunChars
// characters, whatever the width they are wrapped at (a 4096-bit RSA key in
// PKCS#8 is about 3,200 base64 characters, an 8192-bit one 6,400).
const (
	maxWords    = 1024
	maxRunChars = 8192
)

// LooksLikePrivateKey reports whether s holds private key material: PEM or
// OpenSSH armour, encrypted or not, PuTTY files, or a bare base64 (standard
// or URL alphabet, wrapped or not) PKCS#1, PKCS#8, SEC 1 or OpenSSH key
// anywhere in the text, a public key's comment included, or base64 of any
// of these.
func LooksLikePrivateKey(s string) bool {
	return looksLikePrivateKey(s, 2)
}

func looksLikePrivateKey(s string, depth int) bool {
	for _, m := range markers {
		if strings.Contains(s, m) {
			return true
		}
	}
	data := []byte(strings.TrimSpace(s))
	if block, _ := pem.Decode(data); block != nil && strings.Contains(block.Type, "PRIVATE") {
		return true
	}
	if _, err := ssh.ParseRawPrivateKey(data); err == nil {
		return true
	} else if missing := (*ssh.PassphraseMissingError)(nil); errors.As(err, &missing) {
		return true
	}
	if depth == 0 {
		return false
	}
	for _, blob := range base64Runs(s) {
		if isPrivateKeyDER(blob) || looksLikePrivateKey(string(blob), depth-1) {
			return true
		}
	}
	return false
}

// isPrivateKeyDER reports whether b is a private key in one of the binary
// encodings.
func isPrivateKeyDER(b []byte) bool {
	if bytes.HasPrefix(b, []byte("openssh-key-v1\x00")) {
		return true
	}
	if _, err := x509.ParsePKCS1PrivateKey(b); err == nil {
		return true
	}
	if _, err := x509.ParsePKCS8PrivateKey(b); err == nil {
		return true
	}
	_, err := x509.ParseECPrivateKey(b)
	return err == nil
}

// base64Runs decodes every word of s (a run of base64 characters, either
// alphabet) and every DER structure wrapped over several words: from each
// word that starts like a DER SEQUENCE ("M"), words are joined until they
// cover the length its header declares.
func base64Runs(s string) [][]byte {
	var out [][]byte
	words := strings.FieldsFunc(s, func(r rune) bool { return !isBase64Rune(r) })
	for _, word := range words {
		if len(word) < 16 {
			continue
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(word); err == nil {
				out = append(out, b)
				break
			}
		}
	}
	for i, word := range words[:min(len(words), maxWords)] {
		if word[0] != 'M' {
			continue
		}
		var joined strings.Builder
		for _, next := range words[i:] {
			joined.WriteString(strings.TrimRight(next, "="))
			b, ok, more := wrappedDER(joined.String())
			if ok {
				out = append(out, b)
			}
			if !more || joined.Len() > maxRunChars {
				break
			}
		}
	}
	return out
}

// wrappedDER decodes the DER SEQUENCE that text starts with once text is
// long enough to hold all of it; more is true while text is too short to
// tell.
func wrappedDER(text string) (der []byte, ok, more bool) {
	if len(text) < 8 {
		return nil, false, true
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		header, err := enc.DecodeString(text[:8])
		if err != nil || header[0] != 0x30 {
			continue
		}
		var total int
		switch l := int(header[1]); {
		case l < 0x80:
			total = 2 + l
		case l == 0x81:
			total = 3 + int(header[2])
		case l == 0x82:
			total = 4 + (int(header[2])<<8 | int(header[3]))
		default:
			continue
		}
		need := (total*4 + 2) / 3
		if len(text) < need {
			return nil, false, true
		}
		if b, err := enc.DecodeString(text[:need]); err == nil {
			return b, true, false
		}
	}
	return nil, false, false
}

func isBase64Rune(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '/' || r == '-' || r == '_' || r == '='
}
