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

package vmspec

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// reservedKeyDomains are the label and annotation key prefixes, each a
// domain with its subdomains, that a tenant's metadata may not use: their
// owners act on them, and the provider selects and adopts its objects by
// its own.
var reservedKeyDomains = []struct{ domain, owner string }{
	{"infrastructure.cozystack.io", "the provider's: it selects, caches and adopts its objects by them"},
	{"kubevirt.io", "KubeVirt's, which acts on them (hook sidecars, migrations, its own bookkeeping)"},
	{"cluster.x-k8s.io", "Cluster API's; the provider sets cluster-name, deployment-name and role itself, from the Machine"},
}

// networkPluginKeyDomains are the Pod annotation prefixes of network
// plugins. An instance's annotations reach its virt-launcher Pod, where
// these would attach it to networks, or give it addresses, that the
// machine's networks do not name: another namespace's network among them.
var networkPluginKeyDomains = []string{
	"k8s.v1.cni.cncf.io",    // Multus
	"v1.multus-cni.io",      // Multus
	"ovn.kubernetes.io",     // Kube-OVN
	"k8s.ovn.org",           // OVN-Kubernetes
	"cni.projectcalico.org", // Calico
}

// ValidateMetadataAndSpread checks what a tenant adds to its VM, its
// instances and their scheduling: labels and annotations of Kubernetes'
// syntax and of no key the provider, KubeVirt, Cluster API or a network
// plugin acts on, and topology spread constraints a Pod would be created
// with. Which topology keys a tenant may spread by is the hoster's
// (placement.Policy). The webhooks, the template's resolution and the
// renderer apply it alike.
func ValidateMetadataAndSpread(spec *infrav1.KubeVirtMachineSpec, path *field.Path) field.ErrorList {
	instance := path.Child("instanceMetadata")
	errs := validateMetadata(spec.VirtualMachineMetadata, path.Child("virtualMachineMetadata"), instance.Child("annotations"))
	errs = append(errs, validateMetadata(spec.InstanceMetadata, instance, nil)...)
	return append(errs, validateTopologySpreadConstraints(spec.TopologySpreadConstraints, path.Child("topologySpreadConstraints"))...)
}

// validateMetadata checks metadata at path, the VM's, or its instances'
// when instanceAnnotations (where the VM's refusals point to) is nil, key
// by key in order, so a refusal reads the same each time.
func validateMetadata(metadata infrav1.ObjectMetadata, path, instanceAnnotations *field.Path) field.ErrorList {
	instance := instanceAnnotations == nil
	var errs field.ErrorList
	labels := path.Child("labels")
	for _, key := range slices.Sorted(maps.Keys(metadata.Labels)) {
		p := labels.Key(key)
		errs = append(errs, metav1validation.ValidateLabelName(key, p)...)
		for _, msg := range validation.IsValidLabelValue(metadata.Labels[key]) {
			errs = append(errs, field.Invalid(p, metadata.Labels[key], msg))
		}
		if why := reservedKey(key); why != "" {
			errs = append(errs, field.Forbidden(p, why))
		}
	}
	annotations := path.Child("annotations")
	for _, key := range slices.Sorted(maps.Keys(metadata.Annotations)) {
		p := annotations.Key(key)
		for _, msg := range validation.IsQualifiedName(strings.ToLower(key)) {
			errs = append(errs, field.Invalid(p, key, msg))
		}
		switch {
		case key == kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation && instance:
			// KubeVirt's one annotation a tenant sets: a bridged pod
			// network may live-migrate (internal/migration).
		case key == kubevirtv1.AllowPodBridgeNetworkLiveMigrationAnnotation:
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("KubeVirt reads it from the instance: set it in %s instead", instanceAnnotations)))
		case reservedKey(key) != "":
			errs = append(errs, field.Forbidden(p, reservedKey(key)))
		case instance && inDomain(key, networkPluginKeyDomains...):
			errs = append(errs, field.Forbidden(p, "the instance's virt-launcher Pod carries its annotations, and this is a network plugin's, "+
				"which would attach or address the Pod beyond the machine's networks"))
		}
	}
	if err := apivalidation.ValidateAnnotationsSize(metadata.Annotations); err != nil {
		errs = append(errs, field.TooLong(annotations, "", apivalidation.TotalAnnotationSizeLimitB))
	}
	return errs
}

// reservedKey says whose a reserved label or annotation key is, or
// nothing for a key a tenant may use.
func reservedKey(key string) string {
	for _, r := range reservedKeyDomains {
		if inDomain(key, r.domain) {
			return fmt.Sprintf("keys of %s and its subdomains are %s", r.domain, r.owner)
		}
	}
	return ""
}

// inDomain tells whether key's prefix is one of domains or a subdomain of
// one.
func inDomain(key string, domains ...string) bool {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return false
	}
	for _, d := range domains {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}

// validateTopologySpreadConstraints refuses what the API server refuses
// of a Pod's constraints: virt-api v1.7 checks only maxSkew, the
// topologyKey, whenUnsatisfiable and the labelSelector, and copies the
// rest into the virt-launcher Pod, whose creation would then fail after
// the VM was admitted. Pairs of topologyKey and whenUnsatisfiable are
// unique by the CRD schema.
func validateTopologySpreadConstraints(constraints []corev1.TopologySpreadConstraint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, c := range constraints {
		p := path.Index(i)
		if c.MaxSkew <= 0 {
			errs = append(errs, field.Invalid(p.Child("maxSkew"), c.MaxSkew, "must be greater than zero"))
		}
		if c.TopologyKey == "" {
			errs = append(errs, field.Required(p.Child("topologyKey"), "a spread needs the node label it spreads across"))
		} else {
			errs = append(errs, metav1validation.ValidateLabelName(c.TopologyKey, p.Child("topologyKey"))...)
		}
		switch c.WhenUnsatisfiable {
		case corev1.DoNotSchedule, corev1.ScheduleAnyway:
		default:
			errs = append(errs, field.NotSupported(p.Child("whenUnsatisfiable"), c.WhenUnsatisfiable,
				[]corev1.UnsatisfiableConstraintAction{corev1.DoNotSchedule, corev1.ScheduleAnyway}))
		}
		if c.MinDomains != nil {
			switch {
			case *c.MinDomains <= 0:
				errs = append(errs, field.Invalid(p.Child("minDomains"), *c.MinDomains, "must be greater than zero"))
			case c.WhenUnsatisfiable != corev1.DoNotSchedule:
				errs = append(errs, field.Invalid(p.Child("minDomains"), *c.MinDomains, "only with whenUnsatisfiable DoNotSchedule"))
			}
		}
		errs = append(errs, validateInclusionPolicy(c.NodeAffinityPolicy, p.Child("nodeAffinityPolicy"))...)
		errs = append(errs, validateInclusionPolicy(c.NodeTaintsPolicy, p.Child("nodeTaintsPolicy"))...)
		errs = append(errs, metav1validation.ValidateLabelSelector(c.LabelSelector, metav1validation.LabelSelectorValidationOptions{}, p.Child("labelSelector"))...)
		errs = append(errs, validateMatchLabelKeys(c, p.Child("matchLabelKeys"))...)
	}
	return errs
}

func validateInclusionPolicy(policy *corev1.NodeInclusionPolicy, path *field.Path) field.ErrorList {
	if policy == nil || *policy == corev1.NodeInclusionPolicyHonor || *policy == corev1.NodeInclusionPolicyIgnore {
		return nil
	}
	return field.ErrorList{field.NotSupported(path, *policy, []corev1.NodeInclusionPolicy{corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore})}
}

// validateMatchLabelKeys: the keys take their values from the instance's
// own labels, beside a labelSelector, as the API server has them.
func validateMatchLabelKeys(c corev1.TopologySpreadConstraint, path *field.Path) field.ErrorList {
	if len(c.MatchLabelKeys) == 0 {
		return nil
	}
	if c.LabelSelector == nil {
		return field.ErrorList{field.Forbidden(path, "must not be set without a labelSelector")}
	}
	selected := map[string]bool{}
	for key := range c.LabelSelector.MatchLabels {
		selected[key] = true
	}
	for _, r := range c.LabelSelector.MatchExpressions {
		selected[r.Key] = true
	}
	var errs field.ErrorList
	for i, key := range c.MatchLabelKeys {
		errs = append(errs, metav1validation.ValidateLabelName(key, path.Index(i))...)
		if selected[key] {
			errs = append(errs, field.Invalid(path.Index(i), key, "exists in both matchLabelKeys and labelSelector"))
		}
	}
	return errs
}
