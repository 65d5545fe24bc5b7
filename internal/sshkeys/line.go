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

package sshkeys

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"strings"
)

// The accepted line. A value is accepted when it is, exactly, one
// authorized_keys public key line without options:
//
//	TYPE SP BLOB [SP COMMENT]
//
// TYPE is one of KeyTypes (ssh-dss is refused: OpenSSH 9.8 removed DSA).
// BLOB is padded standard base64 of a public key blob of that very type:
// it starts with the bytes every blob of the type starts with (the
// length-prefixed type name, and for ECDSA the curve and the point's
// length and form; for security keys the application's "ssh:"), and its
// length is the type's. COMMENT is 1 to MaxCommentBytes printable ASCII
// characters (0x20-0x7e) that start and end with a non-space, holding no
// word (a run of characters other than a space) longer than MaxWordChars.
// Nothing else: no options, no leading or trailing blanks, no tabs, no
// second line.
//
// The regular expressions below say all of that but whether the blob's
// numbers are a key (an ECDSA point on its curve, an RSA exponent). The
// admission policies run them in the apiserver (PolicyExpression) and
// PublicKeyProblem runs the same ones and then parses the blob with
// golang.org/x/crypto/ssh, so the webhook refuses everything the policies
// refuse; a blob only the parser refuses must be made by hand.

const (
	// MaxCommentBytes bounds a comment: ssh-keygen writes user@host (a
	// login of up to 32 bytes, a host name of up to 64), and a short
	// sentence fits beside it, while the policy's cost stays small.
	MaxCommentBytes = 256

	// MaxWordChars bounds each word of a comment. The smallest private
	// key, a 32-byte Ed25519 seed or P-256 scalar, is 40 characters in
	// the densest printable encoding (Ascii85), 43 in base64, 52 in
	// base32, 64 in hex and more quoted-printable; a PEM line, a base64
	// line of any tool and a hex dump line of openssl are longer still.
	// A user@host of up to 32 characters still fits.
	MaxWordChars = 32

	// maxApplicationBytes bounds a security key's application string
	// ("ssh:" and a name chosen at ssh-keygen -O application=).
	maxApplicationBytes = 64
)

// KeyType is a key type an accepted line may name.
type KeyType struct {
	// Name is the line's first word and the blob's type.
	Name string
	// header are the bytes every blob of the type starts with; -1 is any
	// byte.
	header []int
	// minBlob and maxBlob bound the blob's length in bytes.
	minBlob, maxBlob int
}

// KeyTypes are the accepted key types, in the order messages list them.
var KeyTypes = []KeyType{
	{Name: "ssh-ed25519", header: cat(sshString("ssh-ed25519"), u32(32)), minBlob: 51, maxBlob: 51},
	// An RSA blob is the type, the exponent (at most 24 bits, so its
	// length's first three bytes are zero) and the modulus: 149 bytes for
	// 1024 bits with e=3, 2072 for 16384 bits, the parser's largest.
	{Name: "ssh-rsa", header: cat(sshString("ssh-rsa"), []int{0, 0, 0}), minBlob: 149, maxBlob: 2072},
	ecdsa("ecdsa-sha2-nistp256", "nistp256", 65),
	ecdsa("ecdsa-sha2-nistp384", "nistp384", 97),
	ecdsa("ecdsa-sha2-nistp521", "nistp521", 133),
	securityKey(KeyType{Name: "sk-ssh-ed25519@openssh.com",
		header: cat(sshString("sk-ssh-ed25519@openssh.com"), u32(32), anyBytes(32))}),
	securityKey(ecdsa("sk-ecdsa-sha2-nistp256@openssh.com", "nistp256", 65)),
}

// ecdsa is an ECDSA type: the type, the curve, and an uncompressed point.
func ecdsa(name, curve string, pointBytes int) KeyType {
	header := cat(sshString(name), sshString(curve), u32(pointBytes), []int{4}, anyBytes(pointBytes-1))
	return KeyType{Name: name, header: header, minBlob: len(header), maxBlob: len(header)}
}

// securityKey adds a FIDO key's application string, "ssh:" and up to
// maxApplicationBytes in all, to the key of t.
func securityKey(t KeyType) KeyType {
	key := len(t.header)
	t.header = cat(t.header, []int{0, 0, 0, -1}, literal("ssh:"))
	t.minBlob = len(t.header)
	t.maxBlob = key + 4 + maxApplicationBytes
	return t
}

func literal(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

func u32(n int) []int {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return literal(string(b[:]))
}

func sshString(s string) []int { return cat(u32(len(s)), literal(s)) }

func anyBytes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = -1
	}
	return out
}

func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// CommentRegexp is an optional comment after its space.
var commentRegexp = fmt.Sprintf(`(?: [!-~](?:[ -~]{0,%d}[!-~])?)?`, MaxCommentBytes-2)

// LineRegexp is the RE2 expression an accepted line matches, whole.
func LineRegexp() string {
	alternatives := make([]string, 0, len(KeyTypes))
	for _, t := range KeyTypes {
		alternatives = append(alternatives, regexp.QuoteMeta(t.Name)+" "+t.blobRegexp())
	}
	return "^(?:" + strings.Join(alternatives, "|") + ")" + commentRegexp + "$"
}

// LongWordRegexp is the RE2 expression that matches a line, its type and
// blob already matched, whose comment holds a word longer than
// MaxWordChars.
func LongWordRegexp() string {
	return fmt.Sprintf(`^[^ ]+ [^ ]+ .*[!-~]{%d}`, MaxWordChars+1)
}

var (
	lineRE     = regexp.MustCompile(LineRegexp())
	longWordRE = regexp.MustCompile(LongWordRegexp())
	blobREs    = func() map[string]*regexp.Regexp {
		out := map[string]*regexp.Regexp{}
		for _, t := range KeyTypes {
			out[t.Name] = regexp.MustCompile("^" + t.blobRegexp() + "$")
		}
		return out
	}()
)

// matchesLine says whether line passes the admission policies' check.
func matchesLine(line string) bool {
	return lineRE.MatchString(line) && !longWordRE.MatchString(line)
}

// PolicyMessage is the admission policies' refusal, after the field path.
// CEL cannot tell a private key from another value that is no public key
// line, so it names both; it never carries the value.
const PolicyMessage = "Invalid: a value is not one authorized_keys public key line " +
	"(a key type, its base64 key and an optional comment of short words); never put a private key here, only a public key"

// PolicyExpression is the admission policies' refusedKeys variable: the
// values of variables.keys that an object brings (not in
// variables.storedKeys) and that are no accepted line. Both policies
// (config/workerclass/policy, config/bootstrap/policy) hold it as written
// here (TestPolicyIsGenerated).
func PolicyExpression() string {
	return "variables.keys.filter(k, !(k in variables.storedKeys) &&\n" +
		"  !(k.matches(r'" + LineRegexp() + "') &&\n" +
		"  !k.matches(r'" + LongWordRegexp() + "')))"
}

const base64Digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

const anyDigit = "[A-Za-z0-9+/]"

// blobRegexp matches the padded standard base64 of every blob of the
// type's length that starts with its header: the digits the header
// fixes, then as many groups of four as the length allows, then the
// padding the length ends with.
func (t KeyType) blobRegexp() string {
	headerGroups := (len(t.header) + 2) / 3
	common := min(headerGroups, t.minBlob/3)
	var alternatives []string
	for rem := range 3 {
		lo, hi := -1, -1
		for n := t.minBlob; n <= t.maxBlob; n++ {
			switch {
			case n%3 != rem:
			case n/3 < headerGroups:
				// The blob ends within the header's last group.
				alternatives = append(alternatives, t.digits(4*common, 4*(n/3)+rem+1)+strings.Repeat("=", 3-rem))
			case lo < 0:
				lo, hi = n/3, n/3
			default:
				hi = n / 3
			}
		}
		if lo < 0 {
			continue
		}
		tail := [3]string{"", anyDigit + "{2}==", anyDigit + "{3}="}[rem]
		alternatives = append(alternatives, t.digits(4*common, 4*headerGroups)+repeatGroups(lo-headerGroups, hi-headerGroups)+tail)
	}
	prefix := t.digits(0, 4*common)
	if len(alternatives) == 1 {
		return prefix + alternatives[0]
	}
	return prefix + "(?:" + strings.Join(alternatives, "|") + ")"
}

// digits matches the characters [from, to) of a blob of the type, each one a
// digit that agrees with the header bits it carries.
func (t KeyType) digits(from, to int) string {
	var b strings.Builder
	free := 0
	flush := func() {
		switch {
		case free == 1:
			b.WriteString(anyDigit)
		case free > 1:
			fmt.Fprintf(&b, "%s{%d}", anyDigit, free)
		}
		free = 0
	}
	for c := from; c < to; c++ {
		class := t.digitsAt(c)
		if len(class) == 64 {
			free++
			continue
		}
		flush()
		b.WriteString(renderDigits(class))
	}
	flush()
	return b.String()
}

// repeatGroups matches lo to hi groups of four base64 digits. The group
// is spelled out: RE2 refuses nested repeats of more than 1000 in all, and
// an RSA blob has up to 691 groups.
func repeatGroups(lo, hi int) string {
	group := "(?:" + strings.Repeat(anyDigit, 4) + ")"
	switch {
	case hi == 0:
		return ""
	case lo == hi:
		return fmt.Sprintf("%s{%d}", group, lo)
	}
	return fmt.Sprintf("%s{%d,%d}", group, lo, hi)
}

// digitsAt are the base64 digits that can stand at character c of a
// blob of the type: those that agree with every header bit they carry.
func (t KeyType) digitsAt(c int) []byte {
	var out []byte
	for digit := range 64 {
		fits := true
		for bit := range 6 {
			stream := c*6 + bit // bit 0 is the digit's most significant
			pos := stream / 8
			if pos >= len(t.header) || t.header[pos] < 0 {
				continue
			}
			want := (t.header[pos] >> (7 - stream%8)) & 1
			if (digit>>(5-bit))&1 != want {
				fits = false
				break
			}
		}
		if fits {
			out = append(out, base64Digits[digit])
		}
	}
	return out
}

// renderDigits writes a set of base64 digits as a regular expression.
func renderDigits(digits []byte) string {
	if len(digits) == 1 {
		return regexp.QuoteMeta(string(digits))
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(digits); {
		j := i
		for j+1 < len(digits) && digits[j+1] == digits[j]+1 {
			j++
		}
		if j-i >= 2 {
			b.WriteString(string(digits[i]) + "-" + string(digits[j]))
		} else {
			b.WriteString(string(digits[i : j+1]))
		}
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}
