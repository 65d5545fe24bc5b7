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

// Package guest simulates the guests of VirtualMachineInstances booting a
// Kairos disk and joining a workload cluster with kubeadm, against real
// apiservers:
//
//   - when an instance runs, its cloud-init user data is read from the
//     Secret of its NoCloud or ConfigDrive volume and parsed as Kairos does
//     (#cloud-config, yip stages, the Kairos kubeadm provider's `cluster:`
//     block), and the stages run in boot order against a simulated disk;
//     a disk declared Image.CloudInit reads it as cloud-init does instead
//     (Cluster API's kubeadm bootstrap provider's jinja #cloud-config:
//     write_files, runcmd);
//   - `kubeadm join` does token discovery for real: cluster-info is read from
//     the endpoint, its JWS signature is checked with the token, the CA in it
//     must match a pinned hash and the endpoint must serve that CA; the token
//     then reads kubeadm-config, kubelet-config and the Node, and creates the
//     kubelet's CertificateSigningRequest, which the API server authenticates
//     (an expired or revoked token fails here); the kubelet version of the
//     disk must not be newer than the control plane;
//   - the kubelet registers the Node with the name, providerID, labels and
//     taints the configuration gives, Ready, with the instance's address and
//     the VM's capacity; then, as a kubelet with NodeLease does, it renews
//     its Lease every HeartbeatInterval (updating the Lease it last wrote,
//     without reading it) and posts its unchanged Node status only every
//     NodeStatusReportFrequency, so Node watchers see the write rate of a
//     real cluster; when the instance stops the Node goes Unknown as the
//     node lifecycle controller would mark it;
//   - a container disk starts blank on every boot; a DataVolume or claim
//     keeps what earlier boots wrote, so a restarted node rejoins with its
//     kubelet credentials instead of joining again.
//
// Data a real node would refuse is refused, with the reason kept in the
// VM's BootRecord.
package guest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Image is what a root disk boots: the kubelet and kubeadm baked into it.
type Image struct {
	// KubernetesVersion is the kubelet's version, e.g. v1.35.6.
	KubernetesVersion string
	// OSImage is what the Node reports as its OS image.
	OSImage string
	// CloudInit declares a disk that boots with cloud-init instead of
	// Kairos, like the Ubuntu images image-builder makes for CAPK (kubeadm,
	// the kubelet and containerd baked in, the kubelet unit enabled). Its
	// user data is read as cloud-init reads it: a `## template: jinja`
	// header renders the instance-data variables KubeVirt's NoCloud or
	// ConfigDrive metadata gives (the hostname, the instance ID), then a
	// #cloud-config's bootcmd, write_files, users and runcmd are applied,
	// runcmd once per instance ID. `kubeadm join --config <file>` in a
	// command joins as on a Kairos disk, and the kubelet takes its node name
	// and provider ID from the file's nodeRegistration. Kairos `stages` and
	// `cluster:` mean nothing to cloud-init and are ignored.
	CloudInit bool
}

// Options configure the node simulator.
type Options struct {
	// Images maps a root disk source to what it boots. The key is the
	// container disk reference, the HTTP (or registry) URL a DataVolume
	// imports, "DataSource <namespace>/<name>" or "PVC <namespace>/<name>"
	// for clones. A disk not listed does not boot a kubelet the simulator
	// knows, and the node is refused.
	Images map[string]Image
	// HeartbeatInterval is how often a kubelet renews its Lease; 10s when
	// zero, the kubelet's renew interval (a quarter of its 40s
	// nodeLeaseDurationSeconds).
	HeartbeatInterval time.Duration
	// NodeStatusReportFrequency is how often a kubelet posts its Node
	// status when nothing changed (the conditions again, with fresh
	// heartbeat times); 5m when zero, the kubelet's
	// nodeStatusReportFrequency. A changed status (the Node registered, or
	// Ready again after a restart) is posted at once.
	NodeStatusReportFrequency time.Duration
	// NodeMonitorGracePeriod is how long after a kubelet stops its Node is
	// marked Unknown, as the node lifecycle controller does after 40s; 1s
	// when zero.
	NodeMonitorGracePeriod time.Duration
	// JoinTimeout bounds the retries of a join that may still succeed
	// (cluster-info not yet signed, token not yet valid); kubeadm's default
	// discovery timeout, 5m, when zero.
	JoinTimeout time.Duration
	// RetryInterval is the pause between join attempts; 1s when zero.
	RetryInterval time.Duration
	// KubeadmBinary, when set, is the real kubeadm every JoinConfiguration
	// is checked with (`kubeadm config validate`) before it is used.
	KubeadmBinary string
	// ContainerDiskStorage is the ephemeral storage a container-disk node
	// reports; 10Gi when zero.
	ContainerDiskStorage resource.Quantity
	// ControllerNamePrefix makes the controller name unique when more than
	// one simulator runs in a process.
	ControllerNamePrefix string
}

func (o *Options) defaults() {
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = 10 * time.Second
	}
	if o.NodeStatusReportFrequency == 0 {
		o.NodeStatusReportFrequency = 5 * time.Minute
	}
	if o.NodeMonitorGracePeriod == 0 {
		o.NodeMonitorGracePeriod = time.Second
	}
	if o.JoinTimeout == 0 {
		o.JoinTimeout = defaultDiscoveryTimeout
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = time.Second
	}
	if o.ContainerDiskStorage.IsZero() {
		o.ContainerDiskStorage = resource.MustParse("10Gi")
	}
}

// Phase is where a boot is.
type Phase string

const (
	// PhaseJoining means the join is retried (discovery or TLS bootstrap
	// did not succeed yet); Error says why.
	PhaseJoining Phase = "Joining"
	// PhaseJoined means the kubelet runs and its Node is registered.
	PhaseJoined Phase = "Joined"
	// PhaseBooted means the boot finished without starting a kubelet.
	PhaseBooted Phase = "Booted"
	// PhaseRefused means the node gave up; Error says why.
	PhaseRefused Phase = "Refused"
	// PhaseIgnored means the user data is not configuration the image's boot
	// reads (a Kairos image reads only a #cloud-config; a cloud-init image
	// a #cloud-config, optionally a jinja template of one).
	PhaseIgnored Phase = "Ignored"
	// PhaseStopped means the instance stopped; its kubelet no longer runs.
	PhaseStopped Phase = "Stopped"
)

// BootRecord is what one instance's boot did.
type BootRecord struct {
	// VirtualMachine is the VM the instance belongs to.
	VirtualMachine client.ObjectKey
	// Instance is the VirtualMachineInstance's UID.
	Instance types.UID
	Phase    Phase
	// Error is why the node was refused, or why the join is still retried.
	Error string
	// NodeName and Endpoint are set once joined.
	NodeName string
	Endpoint string
	// Image is the root disk source key the boot looked up.
	Image string
	// SentinelWritten is true when the boot wrote Cluster API's bootstrap
	// success sentinel.
	SentinelWritten bool
	// Warnings are things a real node would accept but a reviewer should
	// not (an unpinned CA, a world-readable token file).
	Warnings []string
	// SSHAuthorizedKeys are the keys authorized per user.
	SSHAuthorizedKeys map[string][]string
}

// Simulator boots simulated Kairos guests for VirtualMachineInstances.
type Simulator struct {
	opts   Options
	client client.Client

	mu       sync.Mutex
	clusters map[string]*workloadCluster
	disks    map[string]*filesystem
	boots    map[types.UID]*bootState
	history  map[client.ObjectKey][]*BootRecord
	kubelets map[types.UID]*kubelet
}

type workloadCluster struct {
	endpoint string
	admin    kubernetes.Interface
}

type bootState struct {
	instance client.ObjectKey
	record   *BootRecord
	deadline time.Time
	done     bool
	// booted is set once the boot ran but its kubelet could not start;
	// only the kubelet is retried.
	booted *bootedGuest
}

// bootedGuest is a guest whose boot ran, with what its kubelet needs.
type bootedGuest struct {
	guest   *guest
	image   Image
	storage resource.Quantity
	diskKey string
}

// New returns a node simulator; register workload clusters with
// AddCluster and run it with SetupWithManager.
func New(opts Options) *Simulator {
	opts.defaults()
	return &Simulator{
		opts:     opts,
		clusters: map[string]*workloadCluster{},
		disks:    map[string]*filesystem{},
		boots:    map[types.UID]*bootState{},
		history:  map[client.ObjectKey][]*BootRecord{},
		kubelets: map[types.UID]*kubelet{},
	}
}

// AddCluster makes a workload API server reachable at endpoint (host:port,
// as a join configuration names it). admin is used only where the harness
// stands in for components that do not run: signing the kubelet's
// certificate, and the kubelet acting on its Node with that certificate.
func (s *Simulator) AddCluster(endpoint string, admin *rest.Config) error {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusters[endpoint] = &workloadCluster{endpoint: endpoint, admin: cs}
	return nil
}

// RemoveCluster makes an endpoint unreachable, as when its control plane is
// deleted; the kubelets of its nodes stop with it.
func (s *Simulator) RemoveCluster(endpoint string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clusters, endpoint)
	for uid, k := range s.kubelets {
		if k.cluster.endpoint == endpoint {
			delete(s.kubelets, uid)
		}
	}
}

func (s *Simulator) cluster(endpoint string) *workloadCluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clusters[endpoint]
}

// SetImage declares what a root disk source boots.
func (s *Simulator) SetImage(source string, image Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Images == nil {
		s.opts.Images = map[string]Image{}
	}
	s.opts.Images[source] = image
}

// Boot returns the latest boot of a VirtualMachine's instances.
func (s *Simulator) Boot(vm client.ObjectKey) (BootRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.history[vm]
	if len(h) == 0 {
		return BootRecord{}, false
	}
	return copyRecord(h[len(h)-1]), true
}

// Boots returns every boot so far, oldest first per VM, VMs in name order.
func (s *Simulator) Boots() []BootRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]client.ObjectKey, 0, len(s.history))
	for k := range s.history {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var out []BootRecord
	for _, k := range keys {
		for _, r := range s.history[k] {
			out = append(out, copyRecord(r))
		}
	}
	return out
}

func copyRecord(r *BootRecord) BootRecord {
	out := *r
	out.Warnings = append([]string(nil), r.Warnings...)
	out.SSHAuthorizedKeys = map[string][]string{}
	for k, v := range r.SSHAuthorizedKeys {
		out.SSHAuthorizedKeys[k] = append([]string(nil), v...)
	}
	return out
}

// SetupWithManager registers the instance controller and the kubelets'
// heartbeat loop.
func (s *Simulator) SetupWithManager(_ context.Context, mgr ctrl.Manager) error {
	s.client = mgr.GetClient()
	if err := builder.ControllerManagedBy(mgr).
		Named(s.opts.ControllerNamePrefix + "sim-node").
		For(&kubevirtv1.VirtualMachineInstance{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)}).
		Complete(reconcile.Func(s.reconcile)); err != nil {
		return fmt.Errorf("setting up the node simulator: %w", err)
	}
	return mgr.Add(manager.RunnableFunc(s.heartbeats))
}

func (s *Simulator) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.client.Get(ctx, req.NamespacedName, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			s.instanceGone(req.NamespacedName, "")
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	// An instance replaced under the same name (KubeVirt restarts a VM
	// with a new instance at once) ended the earlier one's guest.
	s.earlierInstancesGone(req.NamespacedName, vmi.UID)
	if !vmi.DeletionTimestamp.IsZero() || vmi.Status.Phase == kubevirtv1.Failed || vmi.Status.Phase == kubevirtv1.Succeeded {
		s.instanceGone(req.NamespacedName, vmi.UID)
		return reconcile.Result{}, nil
	}
	if vmi.Status.Phase != kubevirtv1.Running || !instanceReady(vmi) {
		return reconcile.Result{}, nil
	}

	s.mu.Lock()
	st, ok := s.boots[vmi.UID]
	if !ok {
		vmKey := client.ObjectKey{Namespace: vmi.Namespace, Name: owningVM(vmi)}
		st = &bootState{
			instance: req.NamespacedName,
			record:   &BootRecord{VirtualMachine: vmKey, Instance: vmi.UID, Phase: PhaseJoining, SSHAuthorizedKeys: map[string][]string{}},
			deadline: time.Now().Add(s.opts.JoinTimeout),
		}
		s.boots[vmi.UID] = st
		s.history[vmKey] = append(s.history[vmKey], st.record)
	}
	done := st.done
	s.mu.Unlock()
	if done {
		return reconcile.Result{}, nil
	}

	log := ctrl.LoggerFrom(ctx)
	phase, reason, err := s.bootInstance(ctx, vmi, st)
	s.mu.Lock()
	// The deadline is kubeadm's discovery timeout: a kubelet that has
	// joined retries with its credentials for as long as it runs.
	joined := st.booted != nil
	s.mu.Unlock()
	if err != nil && !IsRefusal(err) && !errors.Is(err, errNotCloudConfig) && (joined || time.Now().Before(st.deadline)) {
		s.mu.Lock()
		st.record.Phase, st.record.Error = PhaseJoining, err.Error()
		s.mu.Unlock()
		log.V(2).Info("Simulated node join is retried", "reason", err.Error())
		return reconcile.Result{RequeueAfter: s.opts.RetryInterval}, nil
	}
	s.mu.Lock()
	st.done = true
	st.record.Phase = phase
	if err != nil {
		st.record.Error = err.Error()
	} else {
		st.record.Error = reason
	}
	s.mu.Unlock()
	switch phase {
	case PhaseRefused:
		log.Info("Simulated node refused its bootstrap data", "reason", st.record.Error)
	case PhaseJoined:
		log.Info("Simulated node joined the workload cluster", "node", st.record.NodeName, "endpoint", st.record.Endpoint)
	}
	return reconcile.Result{}, nil
}

// bootInstance boots the instance once: it returns the resulting phase, or
// an error that is retried while the join may still succeed.
func (s *Simulator) bootInstance(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, st *bootState) (Phase, string, error) {
	s.mu.Lock()
	b := st.booted
	s.mu.Unlock()
	if b == nil {
		data, datasource, err := s.userData(ctx, vmi)
		if err != nil {
			return PhaseRefused, "", err
		}
		source, diskKey, storage, err := s.rootDisk(ctx, vmi)
		if err != nil {
			return PhaseRefused, "", err
		}
		s.mu.Lock()
		st.record.Image = source
		image, known := s.opts.Images[source]
		base := s.disks[diskKey]
		s.mu.Unlock()
		if !known {
			return PhaseRefused, "", refuse("the simulator does not know what the root disk %q boots; declare it in Options.Images", source)
		}
		if base == nil {
			base = newFilesystem()
		}
		g, phase, reason, err := s.bootDisk(ctx, image, data, metadataFor(vmi, datasource), base.clone())
		if g == nil {
			return phase, reason, err
		}
		b = &bootedGuest{guest: g, image: image, storage: storage, diskKey: diskKey}
	}
	g := b.guest
	kubeletRuns := g.fs.kubelet != nil && g.fs.exists(KubeletKubeconfigPath) &&
		(g.kubeletStarted || g.fs.exists(kubeletUnitLink))
	if kubeletRuns {
		if err := s.startKubelet(ctx, vmi, g.fs.kubelet, b.image, b.storage); err != nil {
			// The join is done and the kubelet holds its own credentials:
			// a real one restarts and tries again with them, it does not
			// join again (its bootstrap token may be revoked by now).
			s.mu.Lock()
			st.booted = b
			s.mu.Unlock()
			return PhaseJoining, "", err
		}
	}
	s.mu.Lock()
	s.disks[b.diskKey] = g.fs
	st.record.SentinelWritten = g.fs.exists(SentinelPath)
	st.record.Warnings = g.warnings
	st.record.SSHAuthorizedKeys = g.sshKeys
	if kubeletRuns {
		st.record.NodeName, st.record.Endpoint = g.fs.kubelet.nodeName, g.fs.kubelet.cluster.endpoint
	}
	s.mu.Unlock()
	if !kubeletRuns {
		return PhaseBooted, "the boot started no kubelet", nil
	}
	return PhaseJoined, "", nil
}

// userData reads the cloud-init user data KubeVirt attaches to the
// instance, and which datasource presents it to the guest.
func (s *Simulator) userData(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) ([]byte, datasource, error) {
	for _, v := range vmi.Spec.Volumes {
		var ref *corev1.LocalObjectReference
		var inline, inlineB64 string
		var ds datasource
		switch {
		case v.CloudInitNoCloud != nil:
			ds = datasourceNoCloud
			ref, inline, inlineB64 = v.CloudInitNoCloud.UserDataSecretRef, v.CloudInitNoCloud.UserData, v.CloudInitNoCloud.UserDataBase64
		case v.CloudInitConfigDrive != nil:
			ds = datasourceConfigDrive
			ref, inline, inlineB64 = v.CloudInitConfigDrive.UserDataSecretRef, v.CloudInitConfigDrive.UserData, v.CloudInitConfigDrive.UserDataBase64
		default:
			continue
		}
		switch {
		case ref != nil:
			secret := &corev1.Secret{}
			if err := s.client.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: ref.Name}, secret); err != nil {
				return nil, ds, fmt.Errorf("reading the cloud-init Secret %s: %w", ref.Name, err)
			}
			// KubeVirt reads the key userdata, or userData.
			for _, key := range []string{"userdata", "userData"} {
				if value, ok := secret.Data[key]; ok {
					return value, ds, nil
				}
			}
			return nil, ds, refuse("the cloud-init Secret %s has neither a userdata nor a userData key", ref.Name)
		case inline != "":
			return []byte(inline), ds, nil
		case inlineB64 != "":
			return nil, ds, refuse("base64 inline user data is not modelled by the simulator")
		}
	}
	return nil, "", refuse("the instance has no cloud-init volume with user data")
}

// rootDisk returns the root disk's source key, the key of the disk's
// contents (the instance for a container disk, the claim otherwise) and
// its size.
func (s *Simulator) rootDisk(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (source, diskKey string, storage resource.Quantity, err error) {
	root := rootVolumeName(vmi)
	for _, v := range vmi.Spec.Volumes {
		if v.Name != root {
			continue
		}
		switch {
		case v.ContainerDisk != nil:
			return v.ContainerDisk.Image, "instance/" + string(vmi.UID), s.opts.ContainerDiskStorage, nil
		case v.DataVolume != nil:
			dv := &cdiv1.DataVolume{}
			if err := s.client.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: v.DataVolume.Name}, dv); err != nil {
				return "", "", storage, fmt.Errorf("reading the root DataVolume %s: %w", v.DataVolume.Name, err)
			}
			return dataVolumeSource(dv), "claim/" + vmi.Namespace + "/" + dv.Name + "/" + string(dv.UID), dataVolumeSize(dv), nil
		case v.PersistentVolumeClaim != nil:
			pvc := &corev1.PersistentVolumeClaim{}
			key := client.ObjectKey{Namespace: vmi.Namespace, Name: v.PersistentVolumeClaim.ClaimName}
			if err := s.client.Get(ctx, key, pvc); err != nil {
				return "", "", storage, fmt.Errorf("reading the root claim %s: %w", key.Name, err)
			}
			return "PVC " + key.String(), "claim/" + key.String() + "/" + string(pvc.UID), pvc.Spec.Resources.Requests[corev1.ResourceStorage], nil
		}
		return "", "", storage, refuse("the root volume %s is of a kind the simulator does not boot", root)
	}
	return "", "", storage, refuse("the instance has no root volume")
}

// rootVolumeName is the volume of the disk booted first: the lowest boot
// order, else the first disk.
func rootVolumeName(vmi *kubevirtv1.VirtualMachineInstance) string {
	best, bestOrder := "", uint(0)
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.BootOrder != nil && (best == "" || bestOrder == 0 || *d.BootOrder < bestOrder) {
			best, bestOrder = d.Name, *d.BootOrder
		}
	}
	if best == "" && len(vmi.Spec.Domain.Devices.Disks) > 0 {
		best = vmi.Spec.Domain.Devices.Disks[0].Name
	}
	return best
}

func dataVolumeSource(dv *cdiv1.DataVolume) string {
	switch {
	case dv.Spec.SourceRef != nil:
		return "DataSource " + ptr.Deref(dv.Spec.SourceRef.Namespace, dv.Namespace) + "/" + dv.Spec.SourceRef.Name
	case dv.Spec.Source == nil:
		return ""
	case dv.Spec.Source.HTTP != nil:
		return dv.Spec.Source.HTTP.URL
	case dv.Spec.Source.Registry != nil && dv.Spec.Source.Registry.URL != nil:
		return *dv.Spec.Source.Registry.URL
	case dv.Spec.Source.PVC != nil:
		ns := dv.Spec.Source.PVC.Namespace
		if ns == "" {
			ns = dv.Namespace
		}
		return "PVC " + ns + "/" + dv.Spec.Source.PVC.Name
	}
	return ""
}

func dataVolumeSize(dv *cdiv1.DataVolume) resource.Quantity {
	if dv.Spec.Storage != nil {
		return dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
	}
	if dv.Spec.PVC != nil {
		return dv.Spec.PVC.Resources.Requests[corev1.ResourceStorage]
	}
	return resource.Quantity{}
}

func owningVM(vmi *kubevirtv1.VirtualMachineInstance) string {
	for _, o := range vmi.OwnerReferences {
		if o.Kind == "VirtualMachine" {
			return o.Name
		}
	}
	return vmi.Name
}

func instanceReady(vmi *kubevirtv1.VirtualMachineInstance) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// earlierInstancesGone stops the kubelets of the instances of key other
// than current.
func (s *Simulator) earlierInstancesGone(key client.ObjectKey, current types.UID) {
	s.mu.Lock()
	var earlier []types.UID
	for id, st := range s.boots {
		if st.instance == key && id != current {
			earlier = append(earlier, id)
		}
	}
	for id, k := range s.kubelets {
		if k.instance == key && id != current && k.running {
			earlier = append(earlier, id)
		}
	}
	s.mu.Unlock()
	for _, id := range earlier {
		s.instanceGone(key, id)
	}
}

// instanceGone stops the kubelet of an instance that stopped or
// disappeared; uid is empty when the instance no longer exists.
func (s *Simulator) instanceGone(key client.ObjectKey, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, k := range s.kubelets {
		if k.instance == key && (uid == "" || id == uid) && k.running {
			k.running, k.stopped = false, time.Now()
		}
	}
	for id, st := range s.boots {
		if st.instance != key || (uid != "" && id != uid) {
			continue
		}
		switch st.record.Phase {
		case PhaseJoining:
			st.record.Phase, st.record.Error = PhaseStopped, "the instance stopped before the node joined: "+st.record.Error
		case PhaseJoined:
			st.record.Phase = PhaseStopped
		}
		st.done = true
		if uid == "" {
			delete(s.boots, id)
		}
	}
}
