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

// Package sshkeystest makes real SSH and PKIX private keys of every type in
// every encoding the project's detector claims, and a real public key: the
// oracle that the detector's tests and the admission policy's tests check
// against.
package sshkeystest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// EncodedPrivateKeys are real private keys of every type, in every
// encoding the detector claims, by "type/encoding", made once.
var EncodedPrivateKeys = sync.OnceValue(func() map[string]string {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	keys := map[string]crypto.PrivateKey{"rsa": rsaKey, "ecdsa-p256": p256, "ecdsa-p384": p384, "ecdsa-p521": p521, "ed25519": edKey}

	out := map[string]string{}
	for name, key := range keys {
		pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			panic(err)
		}
		ders := map[string][]byte{"pkcs8": pkcs8}
		switch k := key.(type) {
		case *rsa.PrivateKey:
			ders["pkcs1"] = x509.MarshalPKCS1PrivateKey(k)
		case *ecdsa.PrivateKey:
			sec1, err := x509.MarshalECPrivateKey(k)
			if err != nil {
				panic(err)
			}
			ders["sec1"] = sec1
		}
		openssh, err := ssh.MarshalPrivateKey(key, "comment")
		if err != nil {
			panic(err)
		}
		encrypted, err := ssh.MarshalPrivateKeyWithPassphrase(key, "comment", []byte("passphrase"))
		if err != nil {
			panic(err)
		}
		out[name+"/openssh-pem"] = string(pem.EncodeToMemory(openssh))
		out[name+"/openssh-encrypted-pem"] = string(pem.EncodeToMemory(encrypted))
		out[name+"/openssh-bare-base64"] = base64.StdEncoding.EncodeToString(openssh.Bytes)
		for form, der := range ders {
			out[name+"/"+form+"-pem"] = string(pem.EncodeToMemory(&pem.Block{Type: pemType(form), Bytes: der}))
			out[name+"/"+form+"-base64"] = base64.StdEncoding.EncodeToString(der)
			out[name+"/"+form+"-base64url"] = base64.RawURLEncoding.EncodeToString(der)
			out[name+"/"+form+"-base64-wrapped-64"] = wrap(base64.StdEncoding.EncodeToString(der), 64)
			out[name+"/"+form+"-base64-wrapped-76"] = wrap(base64.StdEncoding.EncodeToString(der), 76)
			out[name+"/"+form+"-base64-of-pem"] = base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: pemType(form), Bytes: der}))
		}
	}
	return out
})

func pemType(form string) string {
	switch form {
	case "pkcs1":
		return "RSA PRIVATE KEY"
	case "sec1":
		return "EC PRIVATE KEY"
	}
	return "PRIVATE KEY"
}

func wrap(s string, width int) string {
	var b strings.Builder
	for len(s) > width {
		b.WriteString(s[:width] + "\n")
		s = s[width:]
	}
	b.WriteString(s)
	return b.String()
}

// KeyPair makes a new Ed25519 key pair: an authorized_keys line with a
// comment, and the private key as OpenSSH PEM.
func KeyPair() (public, private string) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " admin@example", string(pem.EncodeToMemory(block))
}

// PublicKey is a real authorized_keys line with a comment, made once.
var PublicKey = sync.OnceValue(func() string {
	public, _ := KeyPair()
	return public
})
