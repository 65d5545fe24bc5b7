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
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"strings"

	"github.com/distribution/reference"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/cozystack/cluster-api-workers/internal/redact"
)

// ValidateDigestReference checks that ref is a container image reference
// pinned by digest.
func ValidateDigestReference(ref string, path *field.Path) field.ErrorList {
	if ref == "" {
		return field.ErrorList{field.Required(path, "an image reference pinned by digest is required")}
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return field.ErrorList{field.Invalid(path, ref, "not a valid image reference: "+err.Error())}
	}
	if _, ok := named.(reference.Digested); !ok {
		return field.ErrorList{field.Invalid(path, ref, "the reference must be pinned by digest (name@sha256:<hex>)")}
	}
	return nil
}

// CanonicalReference returns the fully qualified form of a reference that
// ValidateDigestReference accepted, for example docker.io/library/x@sha256:...
func CanonicalReference(ref string) (string, bool) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", false
	}
	if _, ok := named.(reference.Digested); !ok {
		return "", false
	}
	return named.String(), true
}

// ValidateRepository checks an image repository without tag or digest.
func ValidateRepository(repo string, path *field.Path) field.ErrorList {
	named, err := reference.ParseNormalizedNamed(repo)
	if err != nil {
		return field.ErrorList{field.Invalid(path, repo, "not a valid image repository: "+err.Error())}
	}
	if !reference.IsNameOnly(named) {
		return field.ErrorList{field.Invalid(path, repo, "a repository has no tag or digest; the Talos version selects the tag")}
	}
	return nil
}

// ValidateURL checks an http or https endpoint without credentials, query
// or fragment.
func ValidateURL(raw string, path *field.Path) field.ErrorList {
	u, err := url.Parse(raw)
	// Every refusal echoes the value with its credentials masked: a URL
	// that fails another rule first may carry them too.
	shown := redact.URL(raw)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(path, shown, "not a valid URL")}
	case u.Scheme != "https" && u.Scheme != "http":
		return field.ErrorList{field.Invalid(path, shown, "the URL must use https or http")}
	case u.Host == "":
		return field.ErrorList{field.Invalid(path, shown, "the URL must name a host")}
	case u.User != nil:
		return field.ErrorList{field.Invalid(path, shown, "the URL must not carry credentials")}
	case u.RawQuery != "" || u.Fragment != "":
		return field.ErrorList{field.Invalid(path, shown, "the URL must not have a query or fragment")}
	}
	return nil
}

// ValidateCABundle checks a PEM bundle of one or more certificates.
func ValidateCABundle(bundle string, path *field.Path) field.ErrorList {
	rest := []byte(bundle)
	count := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return field.ErrorList{field.Invalid(path, field.OmitValueType{}, "the bundle may hold only CERTIFICATE blocks, found "+block.Type)}
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return field.ErrorList{field.Invalid(path, field.OmitValueType{}, "a certificate does not parse: "+err.Error())}
		}
		count++
	}
	if count == 0 || strings.TrimSpace(string(rest)) != "" {
		return field.ErrorList{field.Invalid(path, field.OmitValueType{}, "must be a PEM bundle of certificates")}
	}
	return nil
}

// ValidateRegistryHost checks a registry mirror key: a host with an
// optional port, or "*" for every registry.
func ValidateRegistryHost(host string, path *field.Path) field.ErrorList {
	if host == "*" {
		return nil
	}
	name := host
	if h, port, err := net.SplitHostPort(host); err == nil {
		if len(utilvalidation.IsValidPortNum(atoi(port))) > 0 {
			return field.ErrorList{field.Invalid(path, host, "the port is not valid")}
		}
		name = h
	}
	if net.ParseIP(name) != nil {
		return nil
	}
	if msgs := utilvalidation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(path, host, "must be a registry host[:port] or *: "+strings.Join(msgs, "; "))}
	}
	return nil
}

func atoi(s string) int {
	n := 0
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' || n > 65535 {
			return -1
		}
		n = n*10 + int(s[i]-'0')
	}
	if s == "" {
		return -1
	}
	return n
}
