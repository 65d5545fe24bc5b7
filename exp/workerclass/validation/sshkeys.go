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
	"bytes"
	"encoding/pem"
	"errors"
	"strings"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// MaxKairosSSHKeys is how many public keys a Kairos pool accepts.
const MaxKairosSSHKeys = 1

// ValidateSSHKeys applies the pool's sshKeys rules: Kairos takes zero or
// one valid public key, Talos only an empty list, and anything that looks
// like a private key is rejected. No message ever contains a key.
func ValidateSSHKeys(family v1alpha1.BootstrapFamily, keys []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, key := range keys {
		if LooksLikePrivateKey(key) {
			errs = append(errs, field.Forbidden(path.Index(i), "this looks like a private key; never put a private key in pool values, only a public key"))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	switch family {
	case v1alpha1.BootstrapTalos:
		if len(keys) > 0 {
			errs = append(errs, field.Forbidden(path, "Talos has no SSH server; only an empty list is allowed"))
		}
	case v1alpha1.BootstrapKairos:
		if len(keys) > MaxKairosSSHKeys {
			errs = append(errs, field.TooMany(path, len(keys), MaxKairosSSHKeys))
		}
		for i, key := range keys {
			if err := validatePublicKey(key); err != "" {
				errs = append(errs, field.Invalid(path.Index(i), field.OmitValueType{}, err))
			}
		}
	}
	return errs
}

// validatePublicKey returns why key is not one complete authorized_keys
// public key, or "".
func validatePublicKey(key string) string {
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

// opensshKeyMagic is the base64 form of "openssh-key-v1\x00", the start of
// every OpenSSH private key body, so a key pasted without its armour is
// still caught.
const opensshKeyMagic = "b3BlbnNzaC1rZXktdjEA"

// LooksLikePrivateKey reports whether s holds private key material in any
// form x/crypto/ssh or PEM recognise, encrypted or not.
func LooksLikePrivateKey(s string) bool {
	if strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "PuTTY-User-Key-File") || strings.Contains(s, opensshKeyMagic) {
		return true
	}
	data := []byte(strings.TrimSpace(s))
	if block, _ := pem.Decode(data); block != nil && strings.Contains(block.Type, "PRIVATE") {
		return true
	}
	if _, err := ssh.ParseRawPrivateKey(data); err == nil {
		return true
	} else {
		var missing *ssh.PassphraseMissingError
		return errors.As(err, &missing)
	}
}
