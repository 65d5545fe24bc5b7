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

// Package redact is the project's one masking of URL credentials: every
// message that prints a URL, or text that may hold one (an admission
// error's value, CDI's or KubeVirt's words copied into a condition, an API
// server's refusal), goes through URLCredentials first.
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces a URL's whole userinfo: a user name may be a token too.
const Mask = "***"

// userinfo is a URL's scheme and userinfo, anywhere in a text: up to the
// last "@" before the host ends (a password may hold an unescaped "@"),
// never past a path, whitespace or a quote. It masks too much rather than
// too little (a query holding "@" without a path).
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/\s"'<>]*@`)

// URLCredentials returns s with the userinfo of every URL in it masked,
// "https://user:password@host/x" as "https://***@host/x"; a URL that does
// not parse is masked as well, and text without credentials is returned
// unchanged.
func URLCredentials(s string) string {
	return userinfo.ReplaceAllString(s, "${1}"+Mask+"@")
}

// URL returns one URL value with its userinfo masked, also when it does not
// parse (a space in a password, say): everything between "://" (or the
// start) and the last "@" before the path.
func URL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + len("://")
	}
	authority := raw[start:]
	if end := strings.IndexAny(authority, "/?#"); end >= 0 {
		authority = authority[:end]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return URLCredentials(raw)
	}
	return raw[:start] + Mask + raw[start+at:]
}
