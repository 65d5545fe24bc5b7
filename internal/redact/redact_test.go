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

package redact

import (
	"strings"
	"testing"
)

func TestURLCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:s3cret@images.example.com/disk.raw":                       "https://***@images.example.com/disk.raw",
		"https://ghp_token@images.example.com/disk.raw":                         "https://***@images.example.com/disk.raw",
		"ftp://user:s3cret@images.example.com/disk.raw":                         "ftp://***@images.example.com/disk.raw",
		"https://user:p@ss@images.example.com/disk.raw":                         "https://***@images.example.com/disk.raw",
		"https://user:s3cret@":                                                  "https://***@",
		`Get "https://user:s3cret@host/x": dial tcp: lookup host: no such host`: `Get "https://***@host/x": dial tcp: lookup host: no such host`,
		"two: http://a:b@one/x and https://c:d@two/y":                           "two: http://***@one/x and https://***@two/y",
		"https://images.example.com/a@b/disk.raw":                               "https://images.example.com/a@b/disk.raw",
		"no URL here, mail@example.com":                                         "no URL here, mail@example.com",
	} {
		if got := URLCredentials(in); got != want {
			t.Errorf("URLCredentials(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://us er:s3c ret@host/x": "https://***@host/x",
		"ftp://user:s3cret@host/x":     "ftp://***@host/x",
		"user:s3cret@host/x":           "***@host/x",
		"https://host/x?u=a@b":         "https://host/x?u=a@b",
		"https://host/x":               "https://host/x",
		"%zz://user:s3cret@host":       "%zz://***@host",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzURLCredentials(f *testing.F) {
	f.Add("https://user:s3cret@host/x")
	f.Add(`Get "http://a:b@c/d": e`)
	f.Fuzz(func(t *testing.T, secret string) {
		if strings.ContainsAny(secret, "/@\"'<> \t\r\n\v\f\u0085\u00a0") || secret == "" {
			return
		}
		const masked = "import from https://***@host/x failed"
		got := URLCredentials("import from https://user:" + secret + "@host/x failed")
		if got != masked {
			t.Fatalf("the secret %q is still in %q", secret, got)
		}
	})
}
