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

// Package placement is the hoster's rule for where a tenant's VMs may run
// and what they may take: the VirtualMachine a KubeVirtMachine renders to
// is created by the provider's service account, so whatever placement a
// tenant writes (tolerations, affinity, dedicated CPUs, GPUs, host
// devices) is placed with the provider's rights, not the tenant's. A
// Policy is the hoster's allow-list; Validate is the one check the
// admission webhooks and the machine controller (before it creates a VM)
// both apply; ReservedNodesExcluded is what every rendered VM's affinity
// carries. Pure: no I/O.
package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
)

// The manager's flags that set a Policy (AddFlags).
const (
	TolerationKeysFlag        = "tenant-toleration-keys"
	NodeAffinityKeysFlag      = "tenant-node-affinity-keys"
	DeviceNamesFlag           = "tenant-device-names"
	DedicatedCPUPlacementFlag = "tenant-dedicated-cpu-placement"
	ReservedNodeLabelsFlag    = "reserved-node-labels"
)

// ControlPlaneLabel marks Kubernetes' control-plane nodes (kubeadm's).
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// Policy is what a tenant's KubeVirtMachine(Template) may ask of the
// infrastructure cluster's scheduler and devices. The zero Policy allows
// no toleration, node affinity key, device or dedicated CPU, and
// reserves no node.
type Policy struct {
	// TolerationKeys are the taint keys a tenant's tolerations may name.
	TolerationKeys []string
	// NodeAffinityKeys are the node label (or field) keys a tenant's
	// required and preferred node affinity terms may select on.
	NodeAffinityKeys []string
	// DeviceNames are the resource names a tenant's GPUs and host devices
	// may name (their deviceName).
	DeviceNames []string
	// DedicatedCPUPlacement lets a tenant pin its vCPUs to host CPUs.
	DedicatedCPUPlacement bool
	// ReservedNodeLabels are node label keys whose nodes no tenant VM
	// runs on: every rendered VM's required node affinity excludes them.
	ReservedNodeLabels []string
}

// DefaultPolicy is the policy of a manager started without the flags:
// what every Pod tolerates anyway, topology and architecture keys, no
// devices, no dedicated CPUs, and control-plane nodes reserved.
func DefaultPolicy() Policy {
	return Policy{
		TolerationKeys:     []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable},
		NodeAffinityKeys:   []string{corev1.LabelTopologyZone, corev1.LabelTopologyRegion, corev1.LabelArchStable, corev1.LabelOSStable},
		ReservedNodeLabels: []string{ControlPlaneLabel},
	}
}

// AddFlags registers the policy's flags with DefaultPolicy's values as their
// defaults. A list flag given an empty value (--tenant-device-names=) is
// the empty list; empty items are dropped, so "," is the empty list too,
// for clusterctl, whose variables cannot be empty.
func (p *Policy) AddFlags(fs *pflag.FlagSet) {
	*p = DefaultPolicy()
	fs.Var((*keyList)(&p.TolerationKeys), TolerationKeysFlag,
		"Taint keys a tenant's KubeVirtMachine(Template) tolerations may name; any other toleration is refused. The provider creates "+
			"the VMs with its own rights, so a toleration of a reserved or control-plane taint would put a tenant's worker there. "+
			"The default is what every Pod tolerates anyway; empty for none.")
	fs.Var((*keyList)(&p.NodeAffinityKeys), NodeAffinityKeysFlag,
		"Node label keys a tenant's node affinity terms (required and preferred) may select on; any other key, and matchFields, is refused, "+
			"so a tenant cannot seek out nodes by the labels the hoster uses to set them apart. The default is the topology and architecture keys; empty for none.")
	fs.Var((*keyList)(&p.DeviceNames), DeviceNamesFlag,
		"Resource names a tenant's GPUs and host devices may name (deviceName); none by default, since devices are scarce and "+
			"the hoster's to hand out. A GPU pool's names go here too.")
	fs.BoolVar(&p.DedicatedCPUPlacement, DedicatedCPUPlacementFlag, false,
		"Let tenants pin their VMs' vCPUs to host CPUs (cpu.dedicatedCPUPlacement); off by default, since pinned CPUs are taken from every other VM of the node.")
	fs.Var((*keyList)(&p.ReservedNodeLabels), ReservedNodeLabelsFlag,
		"Node label keys of nodes no tenant VM may run on: every VM's required node affinity excludes nodes carrying any of them, "+
			"in each of the tenant's terms. Add the hoster's own (an infrastructure-reserved label); empty for none.")
}

// Check refuses a policy whose keys or names could never match: a typo
// in a flag would otherwise allow or reserve nothing without a word.
func (p Policy) Check() error {
	var errs field.ErrorList
	for flag, keys := range map[string][]string{
		TolerationKeysFlag: p.TolerationKeys, NodeAffinityKeysFlag: p.NodeAffinityKeys,
		DeviceNamesFlag: p.DeviceNames, ReservedNodeLabelsFlag: p.ReservedNodeLabels,
	} {
		for i, key := range keys {
			for _, msg := range validation.IsQualifiedName(key) {
				errs = append(errs, field.Invalid(field.NewPath(flag).Index(i), key, msg))
			}
		}
	}
	slices.SortFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	return errs.ToAggregate()
}

// Validate refuses what spec, a machine's or a template's machine spec at
// path in namespace, asks for beyond the policy: each error names the
// field and what the hoster allows.
func (p Policy) Validate(spec *infrav1.KubeVirtMachineSpec, namespace string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range spec.Tolerations {
		keyPath := path.Child("tolerations").Index(i).Child("key")
		switch {
		case t.Key == "" && t.Operator == corev1.TolerationOpExists:
			errs = append(errs, field.Forbidden(keyPath, "an empty key with operator Exists tolerates every taint; "+allowed(TolerationKeysFlag, p.TolerationKeys)))
		case !slices.Contains(p.TolerationKeys, t.Key):
			errs = append(errs, field.Forbidden(keyPath, fmt.Sprintf("toleration key %q is not one a tenant may use; %s", t.Key, allowed(TolerationKeysFlag, p.TolerationKeys))))
		}
	}
	if spec.Affinity != nil {
		affinity := path.Child("affinity")
		errs = append(errs, p.validateNodeAffinity(spec.Affinity.NodeAffinity, affinity.Child("nodeAffinity"))...)
		if a := spec.Affinity.PodAffinity; a != nil {
			errs = append(errs, validatePodAffinityTerms(a.RequiredDuringSchedulingIgnoredDuringExecution, a.PreferredDuringSchedulingIgnoredDuringExecution,
				namespace, affinity.Child("podAffinity"))...)
		}
		if a := spec.Affinity.PodAntiAffinity; a != nil {
			errs = append(errs, validatePodAffinityTerms(a.RequiredDuringSchedulingIgnoredDuringExecution, a.PreferredDuringSchedulingIgnoredDuringExecution,
				namespace, affinity.Child("podAntiAffinity"))...)
		}
	}
	errs = append(errs, p.validateTopologySpread(spec.TopologySpreadConstraints, path.Child("topologySpreadConstraints"))...)
	if spec.CPU != nil && spec.CPU.DedicatedCPUPlacement && !p.DedicatedCPUPlacement {
		errs = append(errs, field.Forbidden(path.Child("cpu", "dedicatedCPUPlacement"),
			fmt.Sprintf("the hoster does not let tenants pin vCPUs to host CPUs (--%s=false)", DedicatedCPUPlacementFlag)))
	}
	for i, g := range spec.GPUs {
		errs = append(errs, p.validateDevice(g.DeviceName, path.Child("gpus").Index(i).Child("deviceName"))...)
	}
	for i, d := range spec.HostDevices {
		errs = append(errs, p.validateDevice(d.DeviceName, path.Child("hostDevices").Index(i).Child("deviceName"))...)
	}
	return errs
}

// validateTopologySpread refuses a spread by a node label outside the
// policy: the scheduler places an instance with a DoNotSchedule spread
// only on nodes that carry its topologyKey, and scores the others lower
// with ScheduleAnyway, so a spread selects nodes by its key as affinity
// does. kubernetes.io/hostname is always allowed: the kubelet sets it on
// every node, so it selects none and only spreads the machines apart.
// Its labelSelector and matchLabelKeys need no rule: the scheduler counts
// only Pods of the instance's own namespace, so a tenant neither steers by
// nor learns about another's. nodeAffinityPolicy and nodeTaintsPolicy only
// say which nodes count in the skew, never where the instance may run.
func (p Policy) validateTopologySpread(constraints []corev1.TopologySpreadConstraint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, c := range constraints {
		if c.TopologyKey == corev1.LabelHostname || slices.Contains(p.NodeAffinityKeys, c.TopologyKey) {
			continue
		}
		errs = append(errs, field.Forbidden(path.Index(i).Child("topologyKey"),
			fmt.Sprintf("node label %q is not one a tenant may spread by (a spread places instances only on nodes with its key); %s, and %s",
				c.TopologyKey, allowed(NodeAffinityKeysFlag, p.NodeAffinityKeys), corev1.LabelHostname)))
	}
	return errs
}

func (p Policy) validateDevice(name string, path *field.Path) field.ErrorList {
	if slices.Contains(p.DeviceNames, name) {
		return nil
	}
	return field.ErrorList{field.Forbidden(path, fmt.Sprintf("device %q is not one a tenant may use; %s", name, allowed(DeviceNamesFlag, p.DeviceNames)))}
}

// validateNodeAffinity refuses node selector requirements on keys outside
// the policy, in required and preferred terms alike: a preference steers
// the scheduler as well, only less surely.
func (p Policy) validateNodeAffinity(a *corev1.NodeAffinity, path *field.Path) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	if required := a.RequiredDuringSchedulingIgnoredDuringExecution; required != nil {
		terms := path.Child("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
		for i, term := range required.NodeSelectorTerms {
			errs = append(errs, p.validateNodeSelectorTerm(term, terms.Index(i))...)
		}
	}
	preferred := path.Child("preferredDuringSchedulingIgnoredDuringExecution")
	for i, term := range a.PreferredDuringSchedulingIgnoredDuringExecution {
		errs = append(errs, p.validateNodeSelectorTerm(term.Preference, preferred.Index(i).Child("preference"))...)
	}
	return errs
}

func (p Policy) validateNodeSelectorTerm(term corev1.NodeSelectorTerm, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range term.MatchExpressions {
		if !slices.Contains(p.NodeAffinityKeys, r.Key) {
			errs = append(errs, field.Forbidden(path.Child("matchExpressions").Index(i).Child("key"),
				fmt.Sprintf("node label %q is not one a tenant may select nodes by; %s", r.Key, allowed(NodeAffinityKeysFlag, p.NodeAffinityKeys))))
		}
	}
	for i, r := range term.MatchFields {
		if !slices.Contains(p.NodeAffinityKeys, r.Key) {
			errs = append(errs, field.Forbidden(path.Child("matchFields").Index(i).Child("key"),
				fmt.Sprintf("node field %q is not one a tenant may select nodes by; %s", r.Key, allowed(NodeAffinityKeysFlag, p.NodeAffinityKeys))))
		}
	}
	return errs
}

// validatePodAffinityTerms refuses (anti-)affinity to Pods of any
// namespace but namespace: a tenant could otherwise follow or avoid the
// hoster's or another tenant's Pods, and learn where they run from where
// its own VMs land.
func validatePodAffinityTerms(required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm, namespace string, path *field.Path) field.ErrorList {
	errs := make(field.ErrorList, 0, len(required)+len(preferred))
	requiredPath := path.Child("requiredDuringSchedulingIgnoredDuringExecution")
	for i, term := range required {
		errs = append(errs, validatePodAffinityTerm(term, namespace, requiredPath.Index(i))...)
	}
	preferredPath := path.Child("preferredDuringSchedulingIgnoredDuringExecution")
	for i, term := range preferred {
		errs = append(errs, validatePodAffinityTerm(term.PodAffinityTerm, namespace, preferredPath.Index(i).Child("podAffinityTerm"))...)
	}
	return errs
}

func validatePodAffinityTerm(term corev1.PodAffinityTerm, namespace string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, ns := range term.Namespaces {
		if ns != namespace {
			errs = append(errs, field.Forbidden(path.Child("namespaces").Index(i),
				fmt.Sprintf("namespace %q is not the machine's; a tenant's VMs may follow or avoid only Pods of their own namespace %s", ns, namespace)))
		}
	}
	if term.NamespaceSelector != nil {
		errs = append(errs, field.Forbidden(path.Child("namespaceSelector"),
			"selects Pods of other namespaces; a tenant's VMs may follow or avoid only Pods of their own namespace "+namespace))
	}
	return errs
}

// allowed says what the hoster allows under flag.
func allowed(flag string, keys []string) string {
	if len(keys) == 0 {
		return fmt.Sprintf("the hoster allows none (--%s)", flag)
	}
	return fmt.Sprintf("the hoster allows %s (--%s)", strings.Join(slices.Sorted(slices.Values(keys)), ", "), flag)
}

// ReservedNodesExcluded is affinity with the requirement that the node
// carries none of reservedLabels joined to every required node selector
// term: terms are ORed and a term's expressions ANDed, so a term without
// it would let the VM onto a reserved node. The input is not changed.
func ReservedNodesExcluded(affinity *corev1.Affinity, reservedLabels []string) *corev1.Affinity {
	out := affinity.DeepCopy()
	if len(reservedLabels) == 0 {
		return out
	}
	exclusions := make([]corev1.NodeSelectorRequirement, 0, len(reservedLabels))
	for _, label := range reservedLabels {
		exclusions = append(exclusions, corev1.NodeSelectorRequirement{Key: label, Operator: corev1.NodeSelectorOpDoesNotExist})
	}
	return RequiredOnEveryTerm(out, exclusions...)
}

// RequiredOnEveryTerm joins requirements to every required node selector
// term of affinity, which it changes, or makes them the one term when
// there is none.
func RequiredOnEveryTerm(affinity *corev1.Affinity, requirements ...corev1.NodeSelectorRequirement) *corev1.Affinity {
	if affinity == nil {
		affinity = &corev1.Affinity{}
	}
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	required := affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if required == nil || len(required.NodeSelectorTerms) == 0 {
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: slices.Clone(requirements)}},
		}
		return affinity
	}
	for i := range required.NodeSelectorTerms {
		required.NodeSelectorTerms[i].MatchExpressions = append(required.NodeSelectorTerms[i].MatchExpressions, requirements...)
	}
	return affinity
}

// keyList is a comma-separated pflag.Value whose empty value, and empty
// items, are no key.
type keyList []string

func (l *keyList) String() string { return strings.Join(*l, ",") }
func (l *keyList) Type() string   { return "strings" }
func (l *keyList) Set(s string) error {
	keys := []string{}
	for _, key := range strings.Split(s, ",") {
		if key = strings.TrimSpace(key); key != "" {
			keys = append(keys, key)
		}
	}
	*l = keys
	return nil
}
