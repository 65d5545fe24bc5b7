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

// Package admission holds the KairosConfig and KairosConfigTemplate
// validating webhooks and the spec validation they share.
package admission

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/cloudconfig"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
	wcvalidation "github.com/cozystack/cluster-api-workers/exp/workerclass/validation"
	"github.com/cozystack/cluster-api-workers/internal/nodelabels"
)

const (
	maxInlineFilesBytes = 256 << 10
)

var (
	argNameRegexp   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	ownerRegexp     = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}(:[a-z_][a-z0-9_-]{0,31})?$`)
	filePathRegexp  = regexp.MustCompile(`^/[A-Za-z0-9._@+=,:~/-]+$`)
	permissionsExpr = regexp.MustCompile(`^0?[0-7]{3}$`)

	// reservedKubeletArgs are set by the provider itself.
	reservedKubeletArgs = sets.New("provider-id", "hostname-override", "node-labels", "register-with-taints", "kubeconfig", "bootstrap-kubeconfig")

	// reservedPaths are written or read by the rendered join.
	reservedPaths = sets.New(cloudconfig.KubeletKubeconfigPath, "/etc/kubernetes/bootstrap-kubelet.conf", cloudconfig.SudoersPath)
	// reservedDirs hold the join configuration and the success sentinel.
	reservedDirs = []string{"/run/kubeadm/", "/run/cluster-api/"}
)

// ValidateSpec checks a KairosConfig spec. Errors carry field paths under
// fldPath.
func ValidateSpec(spec *bootstrapv1.KairosConfigSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch spec.JoinMode {
	case "", bootstrapv1.JoinModeStages, bootstrapv1.JoinModeClusterProvider:
	default:
		errs = append(errs, field.NotSupported(fldPath.Child("joinMode"), spec.JoinMode,
			[]bootstrapv1.JoinMode{bootstrapv1.JoinModeStages, bootstrapv1.JoinModeClusterProvider}))
	}
	errs = append(errs, validateSSHKeys(spec.SSHKeys, fldPath.Child("sshKeys"))...)
	errs = append(errs, nodelabels.Validate(spec.NodeLabels, fldPath.Child("nodeLabels"))...)
	errs = append(errs, validateTaints(spec.NodeTaints, fldPath.Child("nodeTaints"))...)
	errs = append(errs, validateKubeletArgs(spec.KubeletExtraArgs, fldPath.Child("kubeletExtraArgs"))...)
	errs = append(errs, validateFiles(spec.Files, fldPath.Child("files"))...)
	errs = append(errs, validateTimeouts(spec.JoinTimeouts, fldPath.Child("joinTimeouts"))...)
	return errs
}

// validateSSHKeys applies the pool's sshKeys policy for Kairos, the one
// the pool webhook applies (validation.ValidateSSHKeys): zero or one public
// key in authorized_keys form, without options, and a private key in any
// form refused first, with the project's one detector. This field is the
// only place a guest's SSH key is set (the infrastructure templates'
// workerClass.sshKeys takes none); no message carries the key.
func validateSSHKeys(keys []string, fldPath *field.Path) field.ErrorList {
	return wcvalidation.ValidateSSHKeys(workerclassv1.BootstrapKairos, keys, fldPath)
}

func validateTaints(taints []bootstrapv1.NodeTaint, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	effects := []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	for i, t := range taints {
		p := fldPath.Index(i)
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
		if t.Key == cloudconfig.UninitializedTaintKey {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, "is added by the provider and removed by Cluster API; do not set it"))
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, msg))
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, effects))
		}
		id := t.Key + ":" + string(t.Effect)
		if seen.Has(id) {
			errs = append(errs, field.Duplicate(p, id))
		}
		seen.Insert(id)
	}
	return errs
}

func validateKubeletArgs(args []bootstrapv1.Arg, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, a := range args {
		p := fldPath.Index(i)
		switch {
		case !argNameRegexp.MatchString(a.Name):
			errs = append(errs, field.Invalid(p.Child("name"), a.Name, "must be a kubelet flag name without leading dashes, e.g. max-pods"))
		case reservedKubeletArgs.Has(a.Name):
			errs = append(errs, field.Forbidden(p.Child("name"), fmt.Sprintf("%s is set by the provider (hostname, providerID, nodeLabels and nodeTaints have their own fields)", a.Name)))
		case seen.Has(a.Name):
			errs = append(errs, field.Duplicate(p.Child("name"), a.Name))
		}
		seen.Insert(a.Name)
		if hasControl(a.Value) {
			errs = append(errs, field.Invalid(p.Child("value"), a.Value, "must not contain control characters"))
		}
		if strings.Contains(a.Value, "{{") || strings.Contains(a.Value, "}}") {
			errs = append(errs, field.Invalid(p.Child("value"), a.Value, "must not contain template delimiters {{ or }}, which Kairos would expand"))
		}
	}
	return errs
}

func validateFiles(files []bootstrapv1.File, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	inline := 0
	for i, f := range files {
		p := fldPath.Index(i)
		errs = append(errs, validateFilePath(f.Path, p.Child("path"))...)
		if seen.Has(f.Path) {
			errs = append(errs, field.Duplicate(p.Child("path"), f.Path))
		}
		seen.Insert(f.Path)
		if f.Owner != "" && !ownerRegexp.MatchString(f.Owner) {
			errs = append(errs, field.Invalid(p.Child("owner"), f.Owner, "must be user or user:group"))
		}
		fromSecret := f.ContentFrom != (bootstrapv1.FileSource{})
		if fromSecret {
			if f.Content != "" {
				errs = append(errs, field.Forbidden(p.Child("contentFrom"), "content and contentFrom are mutually exclusive"))
			}
			if f.ContentFrom.Secret.Name == "" {
				errs = append(errs, field.Required(p.Child("contentFrom", "secret", "name"), ""))
			}
			if f.ContentFrom.Secret.Key == "" {
				errs = append(errs, field.Required(p.Child("contentFrom", "secret", "key"), ""))
			}
		}
		inline += len(f.Content)
		if f.Permissions != "" {
			if !permissionsExpr.MatchString(f.Permissions) {
				errs = append(errs, field.Invalid(p.Child("permissions"), f.Permissions, "must be an octal file mode such as 0644"))
			} else if mode, _ := strconv.ParseUint(f.Permissions, 8, 32); fromSecret && mode&0o007 != 0 {
				errs = append(errs, field.Invalid(p.Child("permissions"), f.Permissions, "content from a Secret must not be readable, writable or executable by others"))
			}
		}
	}
	if inline > maxInlineFilesBytes {
		errs = append(errs, field.TooLong(fldPath, inline, maxInlineFilesBytes))
	}
	return errs
}

func validateFilePath(p string, fldPath *field.Path) field.ErrorList {
	switch {
	case !filePathRegexp.MatchString(p):
		return field.ErrorList{field.Invalid(fldPath, p, "must be an absolute path of letters, digits and ._@+=,:~/- characters")}
	case path.Clean(p) != p:
		return field.ErrorList{field.Invalid(fldPath, p, "must be a clean path (no //, . or .. elements, no trailing /)")}
	case reservedPaths.Has(p):
		return field.ErrorList{field.Forbidden(fldPath, fmt.Sprintf("%s is written by the join itself", p))}
	}
	for _, dir := range reservedDirs {
		if strings.HasPrefix(p+"/", dir) {
			return field.ErrorList{field.Forbidden(fldPath, fmt.Sprintf("%s is reserved for the join configuration and the bootstrap sentinel", dir))}
		}
	}
	return nil
}

func validateTimeouts(t bootstrapv1.JoinTimeouts, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, v := range map[string]*int32{
		"discoverySeconds":          t.DiscoverySeconds,
		"tlsBootstrapSeconds":       t.TLSBootstrapSeconds,
		"kubeletHealthCheckSeconds": t.KubeletHealthCheckSeconds,
		"kubernetesAPICallSeconds":  t.KubernetesAPICallSeconds,
	} {
		if v != nil && (*v < 1 || *v > 3600) {
			errs = append(errs, field.Invalid(fldPath.Child(name), *v, "must be between 1 and 3600 seconds"))
		}
	}
	return errs
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}
