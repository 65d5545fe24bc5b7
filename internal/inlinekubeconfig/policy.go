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

package inlinekubeconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The admission policy (config/bootstrap/policy/kubeconfig-secrets.yaml)
// sees a Secret's data as base64 text, and the apiserver's CEL has no
// base64 decoder, so its checks are regular expressions over the base64
// text that match exactly when the decoded value contains a given byte
// string. PolicyRules are those checks; the policy's expressions are
// generated from them (TestPolicyIsGenerated).

// PolicyRule is one check of the admission policy: the value is refused
// when its decoded text contains a match of any of the byte patterns.
type PolicyRule struct {
	// Patterns are byte patterns: each position is a set of bytes.
	Patterns [][]ByteSet
	// Message is the refusal, naming the field; never the value.
	Message string
	// Reason is the refusal's status reason.
	Reason string
}

// ByteSet is a set of bytes.
type ByteSet [256]bool

// Bytes is the set of the bytes of s.
func Bytes(s string) ByteSet {
	var set ByteSet
	for i := range len(s) {
		set[s[i]] = true
	}
	return set
}

// Literal is the pattern of s, byte by byte.
func Literal(s string) []ByteSet {
	out := make([]ByteSet, 0, len(s))
	for i := range len(s) {
		out = append(out, Bytes(s[i:i+1]))
	}
	return out
}

// keyEnds are the bytes that can follow a YAML or JSON scalar that is, or
// is an anchor for, a mapping key: a colon, a blank or a line break, a
// closing quote, and the flow indicators.
var keyEnds = Bytes(": \t\r\n\"',]}")

// forbiddenKeys are the kubeconfig fields that make client-go read a file,
// run a command or load a plugin.
var forbiddenKeys = []string{"tokenFile", "client-certificate", "client-key", "certificate-authority", "exec", "auth-provider"}

// PolicyRules are the policy's checks of a kubeconfig Secret's value,
// after its size.
//
// A key can be written without its name only through a backslash escape
// in a double-quoted scalar, a YAML tag (!!binary), or another encoding
// (UTF-16, with a byte order mark) or line break (NEL, LS, PS), so these
// bytes are refused anywhere: \, ! and every byte outside ASCII. Then each
// forbidden key's name followed by a byte a key can end with is refused
// (client-certificate-data and the other -data fields pass).
func PolicyRules() []PolicyRule {
	var nonASCII ByteSet
	for b := 0x80; b <= 0xff; b++ {
		nonASCII[b] = true
	}
	escapes := Bytes(`\!`)
	rules := make([]PolicyRule, 0, 1+len(forbiddenKeys))
	rules = append(rules, PolicyRule{
		Patterns: [][]ByteSet{{escapes}, {nonASCII}},
		Message:  "data.value: Invalid: a kubeconfig Secret's value must be ASCII text without backslash escapes or YAML tags (\\ and !)",
		Reason:   "Invalid",
	})
	for _, key := range forbiddenKeys {
		rules = append(rules, PolicyRule{
			Patterns: [][]ByteSet{append(Literal(key), keyEnds)},
			Message: fmt.Sprintf("data.value: Forbidden: a workload cluster's kubeconfig must carry its credentials inline; "+
				"%s names a file, a command or a plugin the provider would read or run", key),
			Reason: "Forbidden",
		})
	}
	return rules
}

// Expression is the policy's CEL expression of the rule: true when the
// value (base64 text) passes.
func (r PolicyRule) Expression() string {
	return "!variables.value.matches(r'" + r.Regexp() + "')"
}

// Regexp is the RE2 expression that matches standard, padded base64 text
// exactly when the text it encodes contains a match of one of patterns.
func (r PolicyRule) Regexp() string {
	alternatives := make([]string, 0, 3*len(r.Patterns))
	for _, p := range r.Patterns {
		for offset := range 3 {
			alternatives = append(alternatives, alignedPattern(p, offset))
		}
	}
	// Every match starts on a four-character boundary, where a group of
	// three bytes starts.
	return "^(?:.{4})*(?:" + strings.Join(alternatives, "|") + ")"
}

// alignedPattern matches the base64 characters of groups whose bytes,
// from offset within the first group, match p.
func alignedPattern(p []ByteSet, offset int) string {
	root := &trieNode{}
	var walk func(i int, prefix []byte)
	walk = func(i int, prefix []byte) {
		if i == len(p) {
			root.insert(charClasses(prefix, offset))
			return
		}
		for b := range 256 {
			if p[i][b] {
				walk(i+1, append(prefix, byte(b)))
			}
		}
	}
	walk(0, nil)
	return root.render()
}

// charClasses are the sets of base64 digits that can stand at each
// character of the groups spanning bytes (from offset in the first group),
// the bytes outside them being anything; trailing characters that can be
// any digit are dropped.
func charClasses(bytes []byte, offset int) []uint64 {
	span := offset + len(bytes)
	groups := (span + 2) / 3
	var classes []uint64
	for c := range groups * 4 {
		var class uint64
		for digit := range 64 {
			if digitFits(digit, c, bytes, offset) {
				class |= 1 << digit
			}
		}
		classes = append(classes, class)
	}
	for len(classes) > 0 && classes[len(classes)-1] == allDigits {
		classes = classes[:len(classes)-1]
	}
	return classes
}

const allDigits = ^uint64(0)

// digitFits says whether digit, at character c, agrees with every bit the
// known bytes put there.
func digitFits(digit, c int, bytes []byte, offset int) bool {
	for bit := range 6 {
		// Bit 5 is the digit's most significant; character c holds bits
		// 6c..6c+5 of the byte stream, most significant first.
		stream := c*6 + (5 - bit)
		pos := stream/8 - offset
		if pos < 0 || pos >= len(bytes) {
			continue
		}
		want := (bytes[pos] >> (7 - stream%8)) & 1
		if byte(digit>>bit)&1 != want {
			return false
		}
	}
	return true
}

// trieNode is a prefix tree of character classes; render merges siblings
// whose subtrees render alike.
type trieNode struct {
	children map[uint64]*trieNode
	end      bool
}

func (n *trieNode) insert(classes []uint64) {
	for _, c := range classes {
		if n.children == nil {
			n.children = map[uint64]*trieNode{}
		}
		next, ok := n.children[c]
		if !ok {
			next = &trieNode{}
			n.children[c] = next
		}
		n = next
	}
	n.end = true
}

func (n *trieNode) render() string {
	if n.end {
		// A shorter match already suffices.
		return ""
	}
	bySubtree := map[string]uint64{}
	for class, child := range n.children {
		bySubtree[child.render()] |= class
	}
	var parts []string
	for _, sub := range slices.Sorted(maps.Keys(bySubtree)) {
		parts = append(parts, renderClass(bySubtree[sub])+sub)
	}
	slices.Sort(parts)
	if len(parts) == 1 {
		return parts[0]
	}
	return "(?:" + strings.Join(parts, "|") + ")"
}

const base64Digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// renderClass writes a set of base64 digits as a regular expression.
func renderClass(class uint64) string {
	if class == allDigits {
		return "."
	}
	var digits []int
	for d := range 64 {
		if class&(1<<d) != 0 {
			digits = append(digits, d)
		}
	}
	if len(digits) == 1 {
		return regexpLiteral(base64Digits[digits[0]])
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(digits); {
		j := i
		// Runs of consecutive digits that are consecutive characters.
		for j+1 < len(digits) && digits[j+1] == digits[j]+1 && base64Digits[digits[j+1]] == base64Digits[digits[j]]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			b.WriteString(string(base64Digits[digits[i]]) + "-" + string(base64Digits[digits[j]]))
		case j-i == 1:
			b.WriteString(string(base64Digits[digits[i]]) + string(base64Digits[digits[j]]))
		default:
			b.WriteByte(base64Digits[digits[i]])
		}
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}

func regexpLiteral(c byte) string {
	if c == '+' {
		return `\+`
	}
	return string(c)
}
