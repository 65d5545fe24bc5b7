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
	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/internal/sshkeys"
)

// MaxKairosSSHKeys is how many public keys a Kairos pool accepts.
const MaxKairosSSHKeys = 1

// ValidateSSHKeys applies the pool's sshKeys rules: Kairos takes zero or
// one authorized_keys public key line (sshkeys.PublicKeyProblem, the rule
// the admission policies apply too), Talos only an empty list, and a value
// that is no such line and holds a private key is refused as one, for
// either family. No message ever contains a key.
func ValidateSSHKeys(family workerclassv1.BootstrapFamily, keys []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, key := range keys {
		// An accepted line is never called a private key: its comment may
		// name one ("PRIVATE KEY") without holding any.
		if sshkeys.PublicKeyProblem(key) != "" && sshkeys.LooksLikePrivateKey(key) {
			errs = append(errs, field.Forbidden(path.Index(i), sshkeys.PrivateKeyMessage))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	switch family {
	case workerclassv1.BootstrapTalos:
		if len(keys) > 0 {
			errs = append(errs, field.Forbidden(path, "Talos has no SSH server; only an empty list is allowed"))
		}
	case workerclassv1.BootstrapKairos:
		if len(keys) > MaxKairosSSHKeys {
			errs = append(errs, field.TooMany(path, len(keys), MaxKairosSSHKeys))
		}
		for i, key := range keys {
			if err := sshkeys.PublicKeyProblem(key); err != "" {
				errs = append(errs, field.Invalid(path.Index(i), field.OmitValueType{}, err))
			}
		}
	}
	return errs
}
