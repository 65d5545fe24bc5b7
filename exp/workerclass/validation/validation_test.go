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
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/util/validation/field"

	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

func ptr(s string) *string { return &s }

var digest = "sha256:" + strings.Repeat("ab", 32)

func TestParseMinor(t *testing.T) {
	for in, ok := range map[string]bool{
		"v1.35": true, "v1.0": true, "v10.100": true,
		"1.35": false, "v1.35.6": false, "v1": false, "v01.35": false, "v1.035": false, "v1.": false, "": false, "v1.35-rc.1": false,
	} {
		if _, _, got := ParseMinor(in); got != ok {
			t.Errorf("ParseMinor(%q) = %v, want %v", in, got, ok)
		}
	}
}

func TestParseSemver(t *testing.T) {
	for in, ok := range map[string]bool{
		"v1.35.6": true, "v1.13.0-beta.1": true, "v1.35.6+build.7": true, "v1.35.0-rc.0+k3s1": true, "v0.0.0": true,
		"1.35.6": false, "v1.35": false, "v1.35.06": false, "v1.35.6-": false, "v1.35.6-01": false, "v1.35.6+": false,
		"v1.35.6.1": false, "v1.35.x": false, "v1..6": false, "": false, "v1.35.6-a..b": false, "v1.35.6-a_b": false,
	} {
		if _, _, got := ParseSemver(in); got != ok {
			t.Errorf("ParseSemver(%q) = %v, want %v", in, got, ok)
		}
	}
	if !SameMinor("v1.35.6", "v1.35") || SameMinor("v1.35.6", "v1.34") || SameMinor("v1.35.6", "bad") {
		t.Error("SameMinor")
	}
}

func TestValidateDigestReference(t *testing.T) {
	p := field.NewPath("spec", "image", "reference")
	cases := map[string]string{
		"registry.example.com/workers/kairos-worker@" + digest:    "",
		"registry.example.com/workers/kairos-worker:v1@" + digest: "",
		"ubuntu@" + digest: "",
		"registry.example.com/workers/kairos-worker:v1.35.6":         "must be pinned by digest",
		"registry.example.com/workers/kairos-worker":                 "must be pinned by digest",
		"registry.example.com/workers/kairos-worker@sha256:<DIGEST>": "not a valid image reference",
		"registry.example.com/workers/kairos-worker@sha256:abc":      "not a valid image reference",
		"Registry.example.com/UPPER@" + digest:                       "not a valid image reference",
		"":                                                           "Required value",
	}
	for ref, want := range cases {
		errs := ValidateDigestReference(ref, p)
		got := errs.ToAggregate()
		switch {
		case want == "" && got != nil:
			t.Errorf("%q: unexpected %v", ref, got)
		case want != "" && (got == nil || !strings.Contains(got.Error(), want)):
			t.Errorf("%q: got %v, want %q", ref, got, want)
		}
	}
	if c, ok := CanonicalReference("ubuntu@" + digest); !ok || c != "docker.io/library/ubuntu@"+digest {
		t.Errorf("canonical = %q", c)
	}
}

func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "factory CA"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<31, 0), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestValidateURLAndCA(t *testing.T) {
	p := field.NewPath("url")
	for raw, want := range map[string]string{
		"https://factory.talos.dev":             "",
		"http://10.0.0.1:8080/factory":          "",
		"ftp://factory.talos.dev":               "must use https or http",
		"https://":                              "must name a host",
		"https://user:s3cret@factory.talos.dev": "must not carry credentials",
		"https://factory.talos.dev/?token=abc":  "must not have a query",
		"://":                                   "not a valid URL",
		// Credentials in a URL that fails another rule first: the value
		// is shown masked, never with them.
		"ftp://user:s3cret@factory.talos.dev":         `"ftp://***@factory.talos.dev": the URL must use https or http`,
		"https://user:s3cret@":                        `"https://***@": the URL must name a host`,
		"https://user:s3 cret@factory.talos.dev":      `"https://***@factory.talos.dev": not a valid URL`,
		"https://user:s3cret@factory.talos.dev/?x=1":  `"https://***@factory.talos.dev/?x=1": the URL must not carry credentials`,
		"https://s3cret-token@factory.talos.dev/disk": `"https://***@factory.talos.dev/disk": the URL must not carry credentials`,
	} {
		got := ValidateURL(raw, p).ToAggregate()
		if (want == "") != (got == nil) || (got != nil && !strings.Contains(got.Error(), want)) {
			t.Errorf("%q: got %v, want %q", raw, got, want)
		}
		if got != nil && strings.Contains(got.Error(), "s3cret") {
			t.Errorf("the error echoes a credential: %v", got)
		}
	}
	ca := testCA(t)
	if errs := ValidateCABundle(ca+ca, p); len(errs) > 0 {
		t.Errorf("valid bundle: %v", errs)
	}
	for name, bundle := range map[string]string{
		"not PEM":     "hello",
		"trailing":    ca + "junk",
		"private key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"bad cert":    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
	} {
		errs := ValidateCABundle(bundle, p)
		if len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(errs.ToAggregate().Error(), "AAAA") {
			t.Errorf("%s: error echoes the bundle", name)
		}
	}
}

func TestValidateClassSpec(t *testing.T) {
	ref := "registry.example.com/workers/kairos-worker@" + digest
	cases := []struct {
		name string
		spec workerclassv1.WorkerClassSpec
		want []string
	}{
		{"built-in talos", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}, nil},
		{"built-in kairos", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos}, nil},
		{"seed example: Talos baseline", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			Talos: &workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.6")}}}, nil},
		{"seed example: fixed custom Kairos image", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6", Reference: ref}}, nil},
		{"bootstrap is required", workerclassv1.WorkerClassSpec{}, []string{"spec.bootstrap: Required value"}},
		{"unknown bootstrap", workerclassv1.WorkerClassSpec{Bootstrap: "flatcar"}, []string{"spec.bootstrap: Unsupported value"}},
		{"fixed image needs a reference too", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6"}}, []string{"spec.image.reference: Required value: a fixed image needs both"}},
		{"fixed image needs a Kubernetes version too", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{Reference: ref}}, []string{"spec.image.kubernetesVersion: Required value: a fixed image needs both"}},
		{"fixed image reference must be pinned by digest", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6", Reference: "registry.example.com/w:v1.35.6"}},
			[]string{"spec.image.reference", "pinned by digest"}},
		{"fixed image Kubernetes version must be exact semver", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35", Reference: ref}}, []string{"spec.image.kubernetesVersion: Invalid value"}},
		{"fixed image on a Talos class", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			Image: &workerclassv1.FixedImage{KubernetesVersion: "v1.35.6", Reference: ref}}, []string{"spec.image: Forbidden"}},
		{"nonempty Talos settings on a Kairos class", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Talos: &workerclassv1.TalosBaseline{TalosScalars: workerclassv1.TalosScalars{Version: ptr("v1.13.6")}}},
			[]string{"spec.talos: Forbidden: Talos settings are not Kairos configuration"}},
		{"empty Talos settings on a Kairos class", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Talos: &workerclassv1.TalosBaseline{KernelModules: []workerclassv1.KernelModule{}}}, nil},
		{"Talos disk source on a Kairos class", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			KubeVirt: &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{Factory: &workerclassv1.FactoryImageSource{}}}},
			[]string{"spec.kubevirt.osImage: Forbidden"}},
		{"Proxmox on a Kairos class", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapKairos,
			Proxmox: &workerclassv1.ProxmoxTemplateSource{TemplateTags: []string{"kairos"}}}, []string{"spec.proxmox: Forbidden: Kairos supports KubeVirt only"}},
		{"builtin and factory never both", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			KubeVirt: &workerclassv1.KubeVirtClassSource{OSImage: &workerclassv1.OSImageSource{
				Builtin: &workerclassv1.BuiltinImageSource{}, Factory: &workerclassv1.FactoryImageSource{}}}},
			[]string{"spec.kubevirt.osImage: Forbidden: builtin and factory cannot both be set"}},
		{"malformed Talos settings", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos,
			Talos: &workerclassv1.TalosBaseline{
				TalosScalars: workerclassv1.TalosScalars{Version: ptr("1.13"), SchematicID: ptr("abc"), ImageFactoryURL: ptr("factory"),
					InstallerRepository: ptr("ghcr.io/siderolabs/installer:v1.13.6")},
				RegistryMirrors: map[string]workerclassv1.RegistryMirror{"docker.io": {}, "bad host!": {Endpoints: []string{"https://m"}}},
				KernelModules:   []workerclassv1.KernelModule{{Name: "nvme_tcp"}, {Name: "nvme_tcp"}, {Name: "bad name", Parameters: []string{"=1"}}},
			}},
			[]string{"spec.talos.version", "spec.talos.schematicID", "spec.talos.imageFactoryURL", "spec.talos.installerRepository",
				"spec.talos.registryMirrors[docker.io].endpoints: Required", "spec.talos.registryMirrors[bad host!]",
				"spec.talos.kernelModules[1].name: Duplicate", "spec.talos.kernelModules[2].name", "spec.talos.kernelModules[2].parameters[0]"}},
		{"unknown cloud-init datasource", workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos, CloudInitDatasource: "Ignition"},
			[]string{"spec.cloudInitDatasource: Unsupported value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateClassSpec(&tc.spec, field.NewPath("spec"))
			if len(tc.want) == 0 {
				if len(errs) > 0 {
					t.Fatalf("unexpected: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("accepted, want %v", tc.want)
			}
			got := errs.ToAggregate().Error()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not contain %q", got, w)
				}
			}
		})
	}
}

func TestValidateClassUpdate(t *testing.T) {
	old := workerclassv1.WorkerClassSpec{Bootstrap: workerclassv1.BootstrapTalos}
	if errs := ValidateClassUpdate(&old, old.DeepCopy(), field.NewPath("spec")); len(errs) > 0 {
		t.Errorf("an unchanged spec is rejected: %v", errs)
	}
	changed := old.DeepCopy()
	changed.Talos = &workerclassv1.TalosBaseline{KernelModules: []workerclassv1.KernelModule{}}
	if errs := ValidateClassUpdate(&old, changed, field.NewPath("spec")); len(errs) == 0 {
		t.Error("the spec is immutable, even for a [] added")
	}
}

func TestValidatePlatform(t *testing.T) {
	valid := workerclassv1.WorkerPlatform{Spec: workerclassv1.WorkerPlatformSpec{
		DefaultClass:       "talos",
		KubernetesVersions: []workerclassv1.KubernetesVersion{{Minor: "v1.35", Patch: "v1.35.6"}},
		TalosFactory:       workerclassv1.TalosFactoryDefaults{URL: "https://factory.talos.dev", Version: "v1.13.6", SchematicID: strings.Repeat("a", 64)},
		GoldenImages: []workerclassv1.GoldenImage{{Version: "v1.13.6", SchematicID: strings.Repeat("a", 64),
			Source: workerclassv1.GoldenImageSource{Kind: workerclassv1.GoldenDataSource, Namespace: "cozy-golden", Name: "talos"}}},
		KairosImages: []workerclassv1.KairosImage{{Minor: "v1.35", Reference: "ghcr.io/cozystack/kairos@" + digest}},
	}}
	valid.Name = "default"
	if errs := ValidatePlatform(&valid); len(errs) > 0 {
		t.Fatalf("valid platform rejected: %v", errs.ToAggregate())
	}
	bad := valid.DeepCopy()
	bad.Name = "other"
	bad.Spec.DefaultClass = ""
	bad.Spec.KubernetesVersions = append(bad.Spec.KubernetesVersions,
		workerclassv1.KubernetesVersion{Minor: "v1.35", Patch: "v1.35.7"}, workerclassv1.KubernetesVersion{Minor: "v1.34", Patch: "v1.35.1"},
		workerclassv1.KubernetesVersion{Minor: "1.33", Patch: "latest"})
	bad.Spec.TalosFactory = workerclassv1.TalosFactoryDefaults{URL: "factory", Architecture: "riscv64", ImagePlatform: "No Cloud"}
	bad.Spec.GoldenImages = append(bad.Spec.GoldenImages, bad.Spec.GoldenImages[0], workerclassv1.GoldenImage{Version: "x", SchematicID: "y",
		Source: workerclassv1.GoldenImageSource{Kind: "Volume", Namespace: "Bad_NS", Name: ""}})
	bad.Spec.KairosImages = append(bad.Spec.KairosImages, workerclassv1.KairosImage{Minor: "v1.35", Reference: "ghcr.io/cozystack/kairos:v1.35"})
	got := ValidatePlatform(bad).ToAggregate().Error()
	for _, want := range []string{
		"metadata.name", "spec.defaultClass: Required", "spec.kubernetesVersions[1].minor: Duplicate",
		"spec.kubernetesVersions[2].patch", "the patch must belong to minor v1.34", "spec.kubernetesVersions[3].minor", "spec.kubernetesVersions[3].patch",
		"spec.talosFactory.url", "spec.talosFactory.architecture", "spec.talosFactory.imagePlatform",
		"spec.goldenImages[1]: Duplicate", "spec.goldenImages[2].version", "spec.goldenImages[2].schematicID",
		"spec.goldenImages[2].source.kind", "spec.goldenImages[2].source.namespace", "spec.goldenImages[2].source.name",
		"spec.kairosImages[1].minor: Duplicate", "spec.kairosImages[1].reference",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
}

func TestValidatePoolSettings(t *testing.T) {
	ok := workerclassv1.PoolSettings{Version: "v1.35", Talos: &workerclassv1.TalosScalars{Version: ptr("")},
		KernelModules: []workerclassv1.KernelModule{{Name: "nvme_tcp"}}, GPUs: []workerclassv1.GPU{{Name: "nvidia.com/AD102GL_L40S"}},
		Proxmox: &workerclassv1.ProxmoxOverrides{TemplateTags: []string{"talos-1.13"}}}
	if errs := ValidatePoolSettings(&ok, field.NewPath("spec")); len(errs) > 0 {
		t.Fatalf("valid pool rejected: %v", errs.ToAggregate())
	}
	bad := workerclassv1.PoolSettings{Version: "v1.35.6", OSImage: &workerclassv1.OSImageSource{Builtin: &workerclassv1.BuiltinImageSource{}, Factory: &workerclassv1.FactoryImageSource{Endpoint: "x"}},
		Proxmox: &workerclassv1.ProxmoxOverrides{TemplateTags: []string{"a,b"}}, GPUs: []workerclassv1.GPU{{Name: "not a gpu"}}}
	got := ValidatePoolSettings(&bad, field.NewPath("spec")).ToAggregate().Error()
	for _, want := range []string{"spec.version", "the platform or the class's fixed image supplies the patch", "spec.osImage: Forbidden",
		"spec.osImage.factory.endpoint", "spec.proxmox.templateTags[0]", "spec.gpus[0].name"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
}

type sshKeys struct {
	public, public2, withOptions, opensshPrivate, rsaPrivate, encryptedPrivate string
}

func testSSHKeys(t *testing.T) sshKeys {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	public := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " admin@example"
	openssh, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	encrypted, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte("passphrase"))
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub2, _, _ := ed25519.GenerateKey(rand.Reader)
	sshPub2, _ := ssh.NewPublicKey(pub2)
	return sshKeys{
		public:           public,
		public2:          strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub2))),
		withOptions:      `command="/bin/true" ` + public,
		opensshPrivate:   string(pem.EncodeToMemory(openssh)),
		rsaPrivate:       string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})),
		encryptedPrivate: string(pem.EncodeToMemory(encrypted)),
	}
}

// The sshKeys rules: Kairos takes zero or one valid public key; Talos only
// an empty list; anything that looks like a private key is rejected with a
// message that does not echo it.
func TestValidateSSHKeys(t *testing.T) {
	k := testSSHKeys(t)
	path := field.NewPath("spec", "sshKeys")
	cases := []struct {
		name   string
		family workerclassv1.BootstrapFamily
		keys   []string
		want   string
	}{
		{"Kairos: no keys", workerclassv1.BootstrapKairos, nil, ""},
		{"Kairos: empty list", workerclassv1.BootstrapKairos, []string{}, ""},
		{"Kairos: one public key", workerclassv1.BootstrapKairos, []string{k.public}, ""},
		{"Kairos: more than one key is rejected", workerclassv1.BootstrapKairos, []string{k.public, k.public2}, "spec.sshKeys: Too many: 2: must have at most 1 item"},
		{"Kairos: garbage is rejected", workerclassv1.BootstrapKairos, []string{"<SSH_PUBLIC_KEY>"}, "spec.sshKeys[0]: Invalid value"},
		{"Kairos: two keys in one string are rejected", workerclassv1.BootstrapKairos, []string{k.public + "\n" + k.public2}, "single public key on one line"},
		{"Kairos: authorized_keys options are rejected", workerclassv1.BootstrapKairos, []string{k.withOptions}, "without authorized_keys options"},
		{"Talos: empty list is allowed", workerclassv1.BootstrapTalos, []string{}, ""},
		{"Talos: no keys", workerclassv1.BootstrapTalos, nil, ""},
		{"Talos: a nonempty list is rejected", workerclassv1.BootstrapTalos, []string{k.public}, "spec.sshKeys: Forbidden: Talos has no SSH server"},
		{"private key (OpenSSH) is rejected", workerclassv1.BootstrapKairos, []string{k.opensshPrivate}, "spec.sshKeys[0]: Forbidden: this looks like a private key"},
		{"private key (PKCS#1) is rejected", workerclassv1.BootstrapKairos, []string{k.rsaPrivate}, "looks like a private key"},
		{"encrypted private key is rejected", workerclassv1.BootstrapKairos, []string{k.encryptedPrivate}, "looks like a private key"},
		{"private key on Talos is named as a private key", workerclassv1.BootstrapTalos, []string{k.opensshPrivate}, "looks like a private key"},
		{"private key with mangled line breaks is rejected", workerclassv1.BootstrapKairos, []string{strings.ReplaceAll(k.rsaPrivate, "\n", " ")}, "looks like a private key"},
		{"OpenSSH private key body without armour is rejected", workerclassv1.BootstrapKairos, []string{opensshBody(k.opensshPrivate)}, "looks like a private key"},
		{"a private key in hex in the comment is rejected", workerclassv1.BootstrapKairos, []string{k.public + " " + hex.EncodeToString([]byte(k.rsaPrivate))[100:164]}, "spec.sshKeys[0]: Invalid value: each word of the comment must be at most 32 characters"},
		{"a public key whose comment names a private key is accepted", workerclassv1.BootstrapKairos, []string{k.public + " PRIVATE KEY"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateSSHKeys(tc.family, tc.keys, path)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("accepted, want %q", tc.want)
			}
			msg := errs.ToAggregate().Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("%q does not contain %q", msg, tc.want)
			}
			for _, key := range tc.keys {
				for _, line := range strings.Fields(key) {
					if len(line) > 20 && strings.Contains(msg, line) {
						t.Fatalf("the message echoes key material %q: %s", line, msg)
					}
				}
			}
		})
	}
}

// opensshBody strips the PEM armour of an OpenSSH private key, leaving the
// base64 body on one line.
func opensshBody(armoured string) string {
	var body []string
	for _, line := range strings.Split(armoured, "\n") {
		if line != "" && !strings.HasPrefix(line, "-----") {
			body = append(body, line)
		}
	}
	return strings.Join(body, "")
}
