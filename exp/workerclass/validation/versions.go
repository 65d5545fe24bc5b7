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

// Package validation checks the syntax of WorkerClass, WorkerPlatform and
// pool settings: versions, image references, URLs, certificates and SSH
// keys. It never looks anything up; the resolve package decides whether
// valid pieces fit together.
package validation

import (
	"strconv"
	"strings"
)

// ParseMinor parses a Kubernetes minor such as v1.35. It rejects patches,
// leading zeros and a missing "v".
func ParseMinor(s string) (major, minor uint64, ok bool) {
	rest, found := strings.CutPrefix(s, "v")
	if !found {
		return 0, 0, false
	}
	majorText, minorText, found := strings.Cut(rest, ".")
	if !found {
		return 0, 0, false
	}
	major, ok = parseNumber(majorText)
	if !ok {
		return 0, 0, false
	}
	minor, ok = parseNumber(minorText)
	return major, minor, ok
}

// ParseSemver parses a "v"-prefixed semantic version such as v1.35.6 or
// v1.13.0-beta.1+build.2 and returns its major and minor.
func ParseSemver(s string) (major, minor uint64, ok bool) {
	rest, found := strings.CutPrefix(s, "v")
	if !found {
		return 0, 0, false
	}
	core, build, hasBuild := strings.Cut(rest, "+")
	if hasBuild && !validIdentifiers(build, false) {
		return 0, 0, false
	}
	core, pre, hasPre := strings.Cut(core, "-")
	if hasPre && !validIdentifiers(pre, true) {
		return 0, 0, false
	}
	parts := [3]string{}
	for i := range parts {
		var found bool
		if i < 2 {
			parts[i], core, found = strings.Cut(core, ".")
			if !found {
				return 0, 0, false
			}
		} else {
			parts[i] = core
		}
	}
	major, ok = parseNumber(parts[0])
	if !ok {
		return 0, 0, false
	}
	if minor, ok = parseNumber(parts[1]); !ok {
		return 0, 0, false
	}
	if _, ok = parseNumber(parts[2]); !ok {
		return 0, 0, false
	}
	return major, minor, true
}

// parseNumber parses a semver numeric identifier: digits, no leading zero.
func parseNumber(s string) (uint64, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return n, err == nil
}

// validIdentifiers checks dot-separated semver identifiers; numeric
// pre-release identifiers must not have leading zeros.
func validIdentifiers(s string, prerelease bool) bool {
	for {
		id, rest, more := strings.Cut(s, ".")
		if !validIdentifier(id, prerelease) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

func validIdentifier(id string, prerelease bool) bool {
	if id == "" {
		return false
	}
	numeric := true
	for i := range len(id) {
		c := id[i]
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-':
			numeric = false
		default:
			return false
		}
	}
	return !prerelease || !numeric || len(id) == 1 || id[0] != '0'
}

// SameMinor reports whether an exact version belongs to a minor, both
// already known to parse.
func SameMinor(exact, minor string) bool {
	ma, mi, ok := ParseSemver(exact)
	if !ok {
		return false
	}
	pa, pi, ok := ParseMinor(minor)
	return ok && ma == pa && mi == pi
}

// IsSchematicID reports whether s is a Talos image factory schematic ID:
// 64 lowercase hexadecimal characters.
func IsSchematicID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
