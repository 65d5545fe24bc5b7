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

// Package sshkeys holds the project's one check of SSH public keys, for
// every field where a tenant may paste a key (pool values, KairosConfig
// sshKeys): a value is accepted only when it is one authorized_keys public
// key line (line.go says exactly what that is), and the admission policies
// apply the same rule in the apiserver (PolicyExpression). Its private-key
// detector names a refused value that holds a private key as one, and
// finds them in log lines. A message never carries the key.
package sshkeys

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// PublicKeyProblem returns why key is not one accepted authorized_keys
// public key line, or "": the line matches the admission policies' rule
// (LineRegexp, LongWordRegexp) and its blob parses as a public key of the
// type the line names. The reason never quotes the key.
func PublicKeyProblem(key string) string {
	if !matchesLine(key) {
		return lineProblem(key)
	}
	typ, rest, _ := strings.Cut(key, " ")
	blob, _, _ := strings.Cut(rest, " ")
	return blobProblem(typ, blob)
}

// blobProblem says why blob is not a public key of type typ, or "".
func blobProblem(typ, blob string) string {
	data, err := base64.StdEncoding.DecodeString(blob)
	if err != nil {
		return "the key after " + typ + " must be base64"
	}
	parsed, err := ssh.ParsePublicKey(data)
	if err != nil {
		return "the key after " + typ + " does not parse as an " + typ + " public key"
	}
	if parsed.Type() != typ {
		return "the key is an " + parsed.Type() + " key, not the " + typ + " its line names"
	}
	return ""
}

// example is how an accepted line looks.
const example = "must be a public key such as \"ssh-ed25519 AAAA... comment\""

// lineProblem says why a line that does not match the policies' rule
// fails it, naming the first part at fault; it is never "".
func lineProblem(key string) string {
	switch {
	case strings.TrimSpace(key) == "":
		return example
	case strings.ContainsAny(key, "\r\n"):
		return "must be a single public key on one line"
	case strings.TrimSpace(key) != key:
		return "must have no leading or trailing blanks"
	}
	typ, rest, _ := strings.Cut(key, " ")
	if _, known := blobREs[typ]; !known {
		if _, _, options, _, err := ssh.ParseAuthorizedKey([]byte(key)); err == nil && len(options) > 0 {
			return "must be a plain public key without authorized_keys options"
		}
		if typ == "ssh-dss" {
			return "ssh-dss (DSA) keys are refused: OpenSSH no longer accepts them"
		}
		return "must start with a key type: " + typeNames()
	}
	blob, comment, hasComment := strings.Cut(rest, " ")
	if blob == "" {
		return "must hold the base64 key after " + typ
	}
	if !blobREs[typ].MatchString(blob) {
		if p := blobProblem(typ, blob); p != "" {
			return p
		}
		return "the key after " + typ + " must be base64 of an " + typ + " key of its length"
	}
	if !hasComment {
		return example
	}
	for _, word := range strings.Split(comment, " ") {
		if _, known := blobREs[word]; known {
			return "must be a single public key"
		}
	}
	switch {
	case comment == "" || comment[0] == ' ':
		return "the comment must follow the key after one space"
	case len(comment) > MaxCommentBytes:
		return "the comment must be at most " + strconv.Itoa(MaxCommentBytes) + " bytes"
	case strings.IndexFunc(comment, func(r rune) bool { return r < ' ' || r > '~' }) >= 0:
		return "the comment must be printable ASCII"
	}
	for _, word := range strings.Split(comment, " ") {
		if len(word) > MaxWordChars {
			return "each word of the comment must be at most " + strconv.Itoa(MaxWordChars) +
				" characters: a longer run may be key material"
		}
	}
	return "must be one authorized_keys public key line: a key type, its base64 key and an optional comment"
}

func typeNames() string {
	names := make([]string, 0, len(KeyTypes))
	for _, t := range KeyTypes {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}

// PrivateKeyMessage is the refusal of a field that holds a private key.
const PrivateKeyMessage = "this looks like a private key; never put a private key here, only a public key"

// Markers that name private key material in text: PEM armour of every
// kind, PuTTY's key files, and the base64 form of "openssh-key-v1\x00",
// the start of every OpenSSH private key body.
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
