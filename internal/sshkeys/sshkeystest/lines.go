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
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/ascii85"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"mime/quotedprintable"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// inComments are private keys of each type in a public key's comment, in
// the encodings a paste produces: each is refused, the detector finds
// those in base64.
func inComments() []Entry {
	key := bareKey(PublicKey())
	var out []Entry
	add := func(name, comment string, detected bool) {
		out = append(out, Entry{Name: "comment/" + name, Value: key + " " + comment, PrivateKey: detected, Verdict: Refused})
	}
	for _, typ := range []string{"ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "ed25519", "rsa"} {
		der, err := base64.StdEncoding.DecodeString(EncodedPrivateKeys()[typ+"/pkcs8-base64"])
		if err != nil {
			panic(err)
		}
		armoured := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
		add(typ+"/pkcs8-hex", hex.EncodeToString(der), false)
		add(typ+"/pkcs8-base32", base32.StdEncoding.EncodeToString(der), false)
		add(typ+"/pkcs8-ascii85", ascii85String(der), false)
		add(typ+"/pkcs8-quoted-printable-joined", strings.Join(strings.Fields(quotedPrintable(der)), " "), false)
		add(typ+"/pkcs8-openssl-text-hex-dump-joined", hexDump(der), false)
		add(typ+"/pkcs8-base64", base64.StdEncoding.EncodeToString(der), true)
		add(typ+"/pkcs8-pem", armoured, true)
		add(typ+"/pkcs8-pem-lines-joined", strings.Join(strings.Fields(armoured), " "), true)
	}
	// The smallest private key there is: an Ed25519 seed, 32 bytes.
	der, _ := base64.StdEncoding.DecodeString(EncodedPrivateKeys()["ed25519/pkcs8-base64"])
	seed := der[len(der)-ed25519.SeedSize:]
	add("ed25519/seed-hex", hex.EncodeToString(seed), false)
	add("ed25519/seed-base32", base32.StdEncoding.EncodeToString(seed), false)
	add("ed25519/seed-base64", base64.RawStdEncoding.EncodeToString(seed), false)
	add("ed25519/seed-ascii85", ascii85String(seed), false)
	return out
}

// publicKeys are real public keys of every accepted type, and comments at
// the rule's bounds: all admitted.
func publicKeys() []Entry {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsa4096, _ := rsa.GenerateKey(rand.Reader, 4096)
	ed := bareKey(PublicKey())
	words := strings.Repeat("abcdefg ", 28) + "abcdefghijklmnopqrstuvwxyz789012"
	out := []Entry{
		{Name: "public/ssh-ed25519", Value: PublicKey()},
		{Name: "public/ssh-ed25519-without-comment", Value: ed},
		{Name: "public/ssh-rsa-2048", Value: line(rsa2048.Public(), "admin@example")},
		{Name: "public/ssh-rsa-4096", Value: line(rsa4096.Public(), "admin@example")},
		{Name: "public/ecdsa-sha2-nistp256", Value: line(p256.Public(), "admin@example")},
		{Name: "public/ecdsa-sha2-nistp384", Value: line(p384.Public(), "admin@example")},
		{Name: "public/ecdsa-sha2-nistp521", Value: line(p521.Public(), "admin@example")},
		{Name: "public/sk-ssh-ed25519", Value: SecurityKeyEd25519("ssh:") + " admin@example"},
		{Name: "public/sk-ssh-ed25519-named-application", Value: SecurityKeyEd25519("ssh:work") + " admin@example"},
		{Name: "public/sk-ecdsa-sha2-nistp256", Value: SecurityKeyECDSA("ssh:") + " admin@example"},
		{Name: "public/comment-sentence", Value: ed + " Alice's laptop (work), rotated 2026-01"},
		{Name: "public/comment-256-bytes-of-short-words", Value: ed + " " + words},
		{Name: "public/comment-names-private-key-armour", Value: ed + " -----BEGIN OPENSSH PRIVATE KEY-----", PrivateKey: true},
	}
	for i := range out {
		out[i].Verdict = Admitted
	}
	return out
}

// refusedLines break one part of the rule each, and hold no private key.
func refusedLines() []Entry {
	public := PublicKey()
	ed := bareKey(public)
	second := bareKey(func() string { p, _ := KeyPair(); return p }())
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaLine := line(rsaKey.Public(), "")
	p384Line := line(p384.Public(), "")
	blob := func(l string) string { return strings.Fields(l)[1] }
	small, _ := ssh.NewPublicKey(&rsa.PublicKey{N: new(big.Int).SetBit(big.NewInt(1), 511, 1), E: 65537})
	out := []Entry{
		{Name: "refused/empty", Value: ""},
		{Name: "refused/no-blob", Value: "ssh-ed25519"},
		{Name: "refused/ssh-dss", Value: dsaLine()},
		{Name: "refused/certificate", Value: certificateLine()},
		{Name: "refused/unknown-type", Value: "ssh-foo " + blob(ed) + " admin@example"},
		{Name: "refused/ssh-rsa-naming-an-ed25519-blob", Value: "ssh-rsa " + blob(ed) + " admin@example"},
		{Name: "refused/ssh-ed25519-naming-an-rsa-blob", Value: "ssh-ed25519 " + blob(rsaLine) + " admin@example"},
		{Name: "refused/nistp256-naming-a-nistp384-blob", Value: "ecdsa-sha2-nistp256 " + blob(p384Line)},
		{Name: "refused/sk-ssh-ed25519-naming-an-ed25519-blob", Value: "sk-ssh-ed25519@openssh.com " + blob(ed)},
		{Name: "refused/ssh-rsa-512-bits", Value: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(small)))},
		{Name: "refused/rsa-blob-truncated", Value: "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 user@host"},
		{Name: "refused/blob-unpadded", Value: strings.TrimRight(blob(p384Line), "=")},
		{Name: "refused/sk-application-not-ssh", Value: SecurityKeyEd25519("web:")},
		{Name: "refused/options-command", Value: `command="/bin/true" ` + public},
		{Name: "refused/options-no-pty", Value: "no-pty " + public},
		{Name: "refused/two-keys-one-line", Value: ed + " " + second},
		{Name: "refused/two-keys-two-lines", Value: ed + "\n" + second},
		{Name: "refused/trailing-newline", Value: public + "\n"},
		{Name: "refused/leading-space", Value: " " + public},
		{Name: "refused/trailing-space", Value: public + " "},
		{Name: "refused/tab-before-comment", Value: ed + "\tadmin@example"},
		{Name: "refused/two-spaces-before-comment", Value: ed + "  admin@example"},
		{Name: "refused/comment-257-bytes", Value: ed + " " + strings.Repeat("abcdefg ", 32) + "a"},
		{Name: "refused/comment-word-of-33", Value: ed + " " + strings.Repeat("a", 33)},
		{Name: "refused/comment-not-ascii", Value: ed + " José@laptop"},
		{Name: "refused/comment-control-character", Value: ed + " admin\x1b[0m"},
		{Name: "refused/base64-of-text", Value: base64.StdEncoding.EncodeToString([]byte("an ordinary base64 value that decodes to text"))},
		{Name: "refused/long-base64-word", Value: strings.Repeat("QUJD", 100)},
		{Name: "refused/certificate-pem-base64", Value: base64.StdEncoding.EncodeToString([]byte(certificatePEM()))},
	}
	for i := range out {
		out[i].Verdict = Refused
	}
	return out
}

// bareKey is the type and blob of an authorized_keys line.
func bareKey(l string) string {
	f := strings.Fields(l)
	return f[0] + " " + f[1]
}

// line is the authorized_keys line of a public key with comment.
func line(key any, comment string) string {
	pub, err := ssh.NewPublicKey(key)
	if err != nil {
		panic(err)
	}
	l := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	if comment != "" {
		l += " " + comment
	}
	return l
}

// SecurityKeyEd25519 is a new sk-ssh-ed25519@openssh.com key with the
// given application, without a comment. Go makes no security keys, so its
// blob is written out: the type, the key and the application.
func SecurityKeyEd25519(application string) string {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	return blobLine(sshString("sk-ssh-ed25519@openssh.com"), sshString(string(pub)), sshString(application))
}

// SecurityKeyECDSA is a new sk-ecdsa-sha2-nistp256@openssh.com key with the
// given application, without a comment.
func SecurityKeyECDSA(application string) string {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	point, err := k.PublicKey.Bytes()
	if err != nil {
		panic(err)
	}
	return blobLine(sshString("sk-ecdsa-sha2-nistp256@openssh.com"), sshString("nistp256"), sshString(string(point)), sshString(application))
}

// dsaLine is an ssh-dss key: p of 1024 bits, q of 160 as the parser
// requires, the rest random.
func dsaLine() string {
	p := make([]byte, 128)
	q := make([]byte, 20)
	y := make([]byte, 128)
	for _, b := range [][]byte{p, q, y} {
		_, _ = rand.Read(b)
	}
	p[0] |= 0x80
	q[0] |= 0x80
	y[0] &= 0x3f
	g := []byte{2}
	return blobLine(sshString("ssh-dss"), mpint(p), mpint(q), mpint(g), mpint(y)) + " admin@example"
}

// certificateLine is an Ed25519 user certificate's authorized_keys line.
func certificateLine() string {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	key, _ := ssh.NewPublicKey(pub)
	_, caKey, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := ssh.NewSignerFromKey(caKey)
	if err != nil {
		panic(err)
	}
	cert := &ssh.Certificate{Key: key, CertType: ssh.UserCert, ValidBefore: uint64(time.Now().Add(time.Hour).Unix())}
	if err := cert.SignCert(rand.Reader, signer); err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert))) + " admin@example"
}

func blobLine(parts ...[]byte) string {
	blob := bytes.Join(parts, nil)
	key, err := ssh.ParsePublicKey(blob)
	if err != nil {
		// ssh-dss and an application other than ssh: still parse.
		panic(err)
	}
	return key.Type() + " " + base64.StdEncoding.EncodeToString(blob)
}

func sshString(s string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...)
}

// mpint is b as a positive SSH mpint.
func mpint(b []byte) []byte {
	if b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	return sshString(string(b))
}

func ascii85String(b []byte) string {
	out := make([]byte, ascii85.MaxEncodedLen(len(b)))
	return string(out[:ascii85.Encode(out, b)])
}

func quotedPrintable(b []byte) string {
	var buf bytes.Buffer
	w := quotedprintable.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.String()
}

// hexDump is b as openssl -text prints key numbers, 15 bytes a line, with
// the lines joined by spaces.
func hexDump(b []byte) string {
	var lines []string
	for len(b) > 0 {
		n := min(15, len(b))
		pairs := make([]string, 0, n)
		for _, c := range b[:n] {
			pairs = append(pairs, hex.EncodeToString([]byte{c}))
		}
		lines = append(lines, strings.Join(pairs, ":")+":")
		b = b[n:]
	}
	return strings.Join(lines, " ")
}
