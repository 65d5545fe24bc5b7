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

package kairosconfig

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/cozystack/cluster-api-workers/bootstrap/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/cloudconfig"
	"github.com/cozystack/cluster-api-workers/bootstrap/internal/metrics"
	"github.com/cozystack/cluster-api-workers/internal/clustersecrets"
	"github.com/cozystack/cluster-api-workers/internal/contract"
	"github.com/cozystack/cluster-api-workers/internal/watchview"
)

// reconcileBootstrapData waits for everything the join needs, mints the
// token, renders the cloud-config (cloudconfig.Render) and writes it to the
// bootstrap data Secret.
func (r *Reconciler) reconcileBootstrapData(ctx context.Context, s *scope) (ctrl.Result, error) {
	config := s.config
	in, blocker, err := r.joinInputs(ctx, s)
	if err != nil {
		markInternalError(config)
		return ctrl.Result{}, err
	}
	if blocker != nil {
		return blocker.report(config), nil
	}

	remote, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		return workloadUnavailable(s, err)
	}
	// The data is rendered once, with the token it will carry, before that
	// token is minted: a token is minted only for data a Secret can hold.
	candidate, stored, err := r.recordedOrNewToken(ctx, s.config)
	if tooLarge := (*watchview.TooLargeError)(nil); errors.As(err, &tooLarge) {
		return (&blocked{reason: bootstrapv1.SecretValueTooLargeReason, message: tooLarge.Error()}).report(config), nil
	}
	if err != nil {
		markInternalError(config)
		return ctrl.Result{}, err
	}
	data, err := cloudconfig.Render(renderInput(s, candidate, in))
	if err != nil {
		markInternalError(config)
		return ctrl.Result{}, fmt.Errorf("rendering the cloud-config: %w", err)
	}
	if size := len(data) + len(bootstrapv1.DataFormatCloudConfig); size > corev1.MaxSecretSize {
		return (&blocked{reason: bootstrapv1.BootstrapDataTooLargeReason, message: fmt.Sprintf(
			"The rendered bootstrap data is %d bytes and a Secret holds at most %d: shrink spec.files", size, corev1.MaxSecretSize)}).report(config), nil
	}
	t, err := r.mintToken(ctx, s, remote, candidate, stored)
	if err != nil {
		markInternalError(config)
		return ctrl.Result{}, err
	}
	if t.String() != candidate.String() {
		// Another reconcile recorded a token first: render with that one
		// (its length, and so the size, is the same).
		if data, err = cloudconfig.Render(renderInput(s, t, in)); err != nil {
			markInternalError(config)
			return ctrl.Result{}, fmt.Errorf("rendering the cloud-config: %w", err)
		}
	}
	if err := r.storeBootstrapData(ctx, s, data); err != nil {
		markInternalError(config)
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Wrote the bootstrap data", "Secret", klog.KRef(config.Namespace, config.Name), "joinMode", joinMode(config))
	r.recordDataReady(s)
	if !ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
		metrics.ObserveDataReady(s.machine.CreationTimestamp, r.now())
	}
	config.Status.DataSecretName = config.Name
	config.Status.Initialization.DataSecretCreated = ptr.To(true)
	markAvailable(config)
	if err := r.watchNodes(ctx, s.cluster); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: refreshInterval(r.TokenTTL)}, nil
}

// joinInputs is what the rendering reads besides the token.
type joinInputs struct {
	caHashes []string
	files    []cloudconfig.File
	// templateLabels are the infrastructure template's status.nodeLabels,
	// rendered beside the config's own nodeLabels, which win.
	templateLabels map[string]string
}

// joinInputs gathers what the join needs, or says what it waits for. No
// token is minted while anything is missing, nor for data too large for a
// Secret (render).
func (r *Reconciler) joinInputs(ctx context.Context, s *scope) (joinInputs, *blocked, error) {
	machine, cluster := s.machine, s.cluster
	switch {
	case !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false):
		return joinInputs{}, &blocked{reason: bootstrapv1.WaitingForClusterInfrastructureReason, message: "Waiting for the Cluster's infrastructure to be provisioned"}, nil
	case !controlPlaneInitialized(cluster):
		return joinInputs{}, &blocked{reason: bootstrapv1.WaitingForControlPlaneInitializedReason, message: "Waiting for the Cluster's control plane to be initialized"}, nil
	case !cluster.Spec.ControlPlaneEndpoint.IsValid():
		return joinInputs{}, &blocked{reason: bootstrapv1.WaitingForControlPlaneEndpointReason, message: "Waiting for Cluster spec.controlPlaneEndpoint to be set"}, nil
	case machine.Spec.InfrastructureRef.Name == "":
		return joinInputs{}, &blocked{reason: bootstrapv1.WaitingForInfrastructureNameReason, message: "Waiting for Machine spec.infrastructureRef.name, which names the VM, its hostname and providerID"}, nil
	case joinMode(s.config) == bootstrapv1.JoinModeClusterProvider && machine.Spec.Version == "":
		// A Machine's version is not set later: no watch or retry ends this.
		return joinInputs{}, &blocked{reason: bootstrapv1.KubernetesVersionRequiredReason, message: "Machine spec.version is required with joinMode ClusterProvider: Kairos's kubeadm provider reads the Kubernetes version to choose kubeadm's configuration API"}, nil
	}

	hashes, err := r.clusterCAHashes(ctx, cluster)
	if tooLarge := (*watchview.TooLargeError)(nil); errors.As(err, &tooLarge) {
		return joinInputs{}, &blocked{reason: bootstrapv1.SecretValueTooLargeReason, message: tooLarge.Error()}, nil
	}
	if errors.Is(err, errClusterCAMissing) {
		return joinInputs{}, &blocked{reason: bootstrapv1.WaitingForClusterCAReason,
			message: fmt.Sprintf("Waiting for the cluster CA Secret %s with a certificate", secret.Name(cluster.Name, secret.ClusterCA))}, nil
	}
	if err != nil {
		return joinInputs{}, nil, err
	}

	template, err := infrastructureTemplate(ctx, r.Client, r.InfrastructureKinds, machine)
	var unsupported *unsupportedKindError
	if errors.As(err, &unsupported) {
		// Final: the Machine's reference is immutable; a cloned-from
		// annotation changed later is not watched. Replace the Machine.
		ctrl.LoggerFrom(ctx).Info("Not rendering bootstrap data: the infrastructure kind is not followed", "reason", unsupported.Error())
		return joinInputs{}, &blocked{reason: bootstrapv1.InfrastructureKindNotSupportedReason, message: unsupported.Error()}, nil
	}
	if errors.Is(err, errInfrastructureNotFound) {
		return joinInputs{}, &blocked{reason: bootstrapv1.WaitingForInfrastructureReason,
			message:      fmt.Sprintf("Waiting for %s %s to exist to check the image's WorkerClass and Kubernetes version", machine.Spec.InfrastructureRef.Kind, machine.Spec.InfrastructureRef.Name),
			requeueAfter: waitForInfrastructureInterval}, nil
	}
	if err != nil {
		return joinInputs{}, nil, err
	}
	var templateLabels map[string]string
	if template != nil {
		if blocker, err := r.checkTemplate(ctx, s, template); blocker != nil || err != nil {
			return joinInputs{}, blocker, err
		}
		var refused string
		if templateLabels, refused, err = templateNodeLabels(template); err != nil || refused != "" {
			if refused != "" {
				return joinInputs{}, &blocked{reason: bootstrapv1.TemplateNodeLabelsForbiddenReason, message: refused}, nil
			}
			return joinInputs{}, nil, err
		}
	}

	files, err := r.resolveFiles(ctx, s.config, cluster.Name)
	var forbidden *forbiddenFileSourceError
	var missing *fileSourceError
	var tooLarge *filesTooLargeError
	switch {
	case errors.As(err, &tooLarge):
		return joinInputs{}, &blocked{reason: bootstrapv1.BootstrapDataTooLargeReason, message: tooLarge.Error()}, nil
	case errors.As(err, &forbidden):
		return joinInputs{}, &blocked{reason: bootstrapv1.FileSourceForbiddenReason, message: forbidden.Error()}, nil
	case errors.As(err, &missing):
		return joinInputs{}, waitingForFileSource(missing), nil
	case err != nil:
		return joinInputs{}, nil, err
	}
	return joinInputs{caHashes: hashes, files: files, templateLabels: templateLabels}, nil, nil
}

func controlPlaneInitialized(cluster *clusterv1.Cluster) bool {
	return ptr.Deref(cluster.Status.Initialization.ControlPlaneInitialized, false) ||
		conditions.IsTrue(cluster, clusterv1.ClusterControlPlaneInitializedCondition)
}

func joinMode(config *bootstrapv1.KairosConfig) bootstrapv1.JoinMode {
	if config.Spec.JoinMode == "" {
		return bootstrapv1.JoinModeStages
	}
	return config.Spec.JoinMode
}

func renderInput(s *scope, t token, join joinInputs) cloudconfig.Input {
	spec := s.config.Spec
	vm := s.machine.Spec.InfrastructureRef.Name
	in := cloudconfig.Input{
		Mode:              joinMode(s.config),
		Hostname:          vm,
		ProviderID:        contract.ProviderID(vm),
		APIServerEndpoint: s.cluster.Spec.ControlPlaneEndpoint.String(),
		CACertHashes:      join.caHashes,
		Token:             t.String(),
		ClusterToken:      string(s.cluster.UID),
		KubernetesVersion: s.machine.Spec.Version,
		NodeLabels:        nodeLabels(join.templateLabels, spec.NodeLabels),
		Files:             join.files,
		Timeouts: cloudconfig.Timeouts{
			Discovery:          seconds(spec.JoinTimeouts.DiscoverySeconds),
			TLSBootstrap:       seconds(spec.JoinTimeouts.TLSBootstrapSeconds),
			KubeletHealthCheck: seconds(spec.JoinTimeouts.KubeletHealthCheckSeconds),
			KubernetesAPICall:  seconds(spec.JoinTimeouts.KubernetesAPICallSeconds),
		},
	}
	if len(spec.SSHKeys) > 0 {
		in.SSHAuthorizedKey = strings.TrimSpace(spec.SSHKeys[0])
	}
	for _, t := range spec.NodeTaints {
		in.NodeTaints = append(in.NodeTaints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	for _, a := range spec.KubeletExtraArgs {
		in.KubeletExtraArgs = append(in.KubeletExtraArgs, cloudconfig.Arg{Name: a.Name, Value: a.Value})
	}
	return in
}

// nodeLabels are the template's labels with the config's own over them:
// a label the user set wins over the one the template derives.
func nodeLabels(template, own map[string]string) map[string]string {
	if len(template) == 0 {
		return own
	}
	labels := maps.Clone(template)
	maps.Copy(labels, own)
	return labels
}

func seconds(s *int32) time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(*s) * time.Second
}

var errClusterCAMissing = errors.New("the cluster CA Secret is missing or has no certificate")

// clusterCAHashes pins the cluster CA from the <cluster>-ca Secret. Only
// the certificate is needed: a worker never signs anything with the key.
func (r *Reconciler) clusterCAHashes(ctx context.Context, cluster *clusterv1.Cluster) ([]string, error) {
	s, err := secret.GetFromNamespacedName(ctx, r.SecretCachingClient, util.ObjectKey(cluster), secret.ClusterCA)
	if apierrors.IsNotFound(err) {
		return nil, errClusterCAMissing
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA Secret: %w", err)
	}
	if watchview.DroppedTooLarge(s, secret.TLSCrtDataName) {
		return nil, &watchview.TooLargeError{Secret: s.Name, Key: secret.TLSCrtDataName, MaxSize: maxCACertificateBytes}
	}
	crt := s.Data[secret.TLSCrtDataName]
	if len(crt) == 0 {
		return nil, errClusterCAMissing
	}
	ca := &secret.Certificate{Purpose: secret.ClusterCA, KeyPair: &certs.KeyPair{Cert: crt}}
	hashes, err := ca.Hashes()
	if err != nil {
		return nil, fmt.Errorf("pinning the cluster CA: %w", err)
	}
	if len(hashes) == 0 {
		return nil, errClusterCAMissing
	}
	return hashes, nil
}

// fileSourceError names a missing contentFrom Secret or key.
type fileSourceError struct{ msg string }

func (e *fileSourceError) Error() string { return e.msg }

// waitingForFileSource blocks a config on a missing file source, asked
// again with backoff: no watch sees a Secret without the cluster-name
// label appear.
func waitingForFileSource(missing *fileSourceError) *blocked {
	return &blocked{reason: bootstrapv1.FileSourceNotAvailableReason, message: missing.Error(),
		requeueAfter: waitForFileSourceInterval, requeueAfterLimit: waitForFileSourceIntervalLimit}
}

// forbiddenFileSourceError names a contentFrom Secret of Cluster API's own.
type forbiddenFileSourceError struct{ msg string }

func (e *forbiddenFileSourceError) Error() string { return e.msg }

// filesTooLargeError says that the files' contents alone cannot fit in the
// bootstrap data Secret.
type filesTooLargeError struct{ msg string }

func (e *filesTooLargeError) Error() string { return e.msg }

// resolveFiles reads the files' contents. The manager's client reads
// Secrets from the API server, so each Secret is read once however many
// files name it. The contents are added up as they are read, with the
// format key the post-render check counts: contents that cannot fit in a
// Secret are refused before the rest is read and before anything is
// rendered, since rendering can only add to them.
func (r *Reconciler) resolveFiles(ctx context.Context, config *bootstrapv1.KairosConfig, clusterName string) ([]cloudconfig.File, error) {
	files := make([]cloudconfig.File, 0, len(config.Spec.Files))
	secrets := map[string]*corev1.Secret{}
	size := len(bootstrapv1.DataFormatCloudConfig)
	for i, f := range config.Spec.Files {
		out := cloudconfig.File{Path: f.Path, Owner: f.Owner}
		fromSecret := f.ContentFrom.Secret.Name != ""
		perm, err := filePermissions(f.Permissions, fromSecret)
		if err != nil {
			return nil, fmt.Errorf("spec.files[%d].permissions: %w", i, err)
		}
		out.Permissions = perm
		if fromSecret {
			src, err := r.fileSecret(ctx, config, clusterName, secrets, i)
			if err != nil {
				return nil, err
			}
			content, ok := src.Data[f.ContentFrom.Secret.Key]
			if !ok {
				return nil, &fileSourceError{msg: fmt.Sprintf("spec.files[%d].contentFrom.secret: Secret %s has no key %s", i, f.ContentFrom.Secret.Name, f.ContentFrom.Secret.Key)}
			}
			out.Content = content
		} else {
			out.Content = []byte(f.Content)
		}
		if size += len(out.Content); size > corev1.MaxSecretSize {
			return nil, &filesTooLargeError{msg: fmt.Sprintf(
				"The bootstrap data would be at least %d bytes, the size of the contents of spec.files[0] to spec.files[%d], and a Secret holds at most %d: shrink spec.files",
				size, i, corev1.MaxSecretSize)}
		}
		files = append(files, out)
	}
	return files, nil
}

// fileSecret is the Secret spec.files[i] reads its content from, read and
// checked the first time a file of this rendering names it, and taken
// from read afterwards.
func (r *Reconciler) fileSecret(ctx context.Context, config *bootstrapv1.KairosConfig, clusterName string, read map[string]*corev1.Secret, i int) (*corev1.Secret, error) {
	key := client.ObjectKey{Namespace: config.Namespace, Name: config.Spec.Files[i].ContentFrom.Secret.Name}
	if src, ok := read[key.Name]; ok {
		return src, nil
	}
	src := &corev1.Secret{}
	if err := r.Client.Get(ctx, key, src); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &fileSourceError{msg: fmt.Sprintf("spec.files[%d].contentFrom.secret: Secret %s not found", i, key.Name)}
		}
		return nil, fmt.Errorf("reading spec.files[%d].contentFrom.secret %s: %w", i, key.Name, err)
	}
	what, err := clustersecrets.Of(src, r.clusterExists(ctx, config.Namespace, clusterName))
	if err != nil {
		return nil, fmt.Errorf("checking spec.files[%d].contentFrom.secret %s: %w", i, key.Name, err)
	}
	if what != "" {
		return nil, &forbiddenFileSourceError{msg: fmt.Sprintf("spec.files[%d].contentFrom.secret: Secret %s is %s and is never copied into a worker", i, key.Name, what)}
	}
	read[key.Name] = src
	return src, nil
}

// clusterExists says whether a Cluster of that name exists in the
// namespace (from the cache): the config's own always does. Any cluster's
// Secrets are Cluster API's, not only those of the config's cluster.
func (r *Reconciler) clusterExists(ctx context.Context, namespace, own string) func(string) (bool, error) {
	return func(name string) (bool, error) {
		if name == own {
			return true, nil
		}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &clusterv1.Cluster{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
}

// filePermissions parses an octal mode; content from a Secret defaults to
// 0600, inline content to 0644.
func filePermissions(s string, fromSecret bool) (uint32, error) {
	if s == "" {
		if fromSecret {
			return 0o600, nil
		}
		return 0o644, nil
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o777 {
		return 0, fmt.Errorf("%q is not an octal file mode", s)
	}
	return uint32(v), nil
}

// checkTemplate checks the infrastructure machine template against the
// Machine before anything is rendered: its WorkerClass must boot Kairos,
// and its image's Kubernetes version must match the Machine's. A
// template's resolution is frozen once written, so a refusal is final: it
// is not requeued (a new template means new Machines with new configs).
func (r *Reconciler) checkTemplate(ctx context.Context, s *scope, template *unstructured.Unstructured) (*blocked, error) {
	log := ctrl.LoggerFrom(ctx)
	machine := s.machine
	class, err := templateClassFrom(template)
	if err != nil {
		return nil, err
	}
	if class.awaitingResolution() {
		// The template's resolution reconciles the config again.
		if err := r.watchTemplates(ctx, template); err != nil {
			return nil, err
		}
		return &blocked{reason: bootstrapv1.WaitingForInfrastructureTemplateReason, message: class.waitingMessage()}, nil
	}
	if mismatch := class.familyMismatch(); mismatch != "" {
		log.Info("Not rendering bootstrap data: the infrastructure template's WorkerClass does not boot Kairos",
			"template", class.Source, "workerClass", class.WorkerClass, "bootstrap", class.Bootstrap)
		return &blocked{reason: bootstrapv1.BootstrapFamilyMismatchReason, message: mismatch}, nil
	}

	if machine.Spec.Version == "" {
		return nil, nil
	}
	image, err := imageVersionFrom(template)
	if err != nil || image == nil {
		return nil, err
	}
	mismatch, err := checkVersion(machine.Spec.Version, *image)
	if err != nil {
		return &blocked{reason: bootstrapv1.KubernetesVersionMismatchReason, message: err.Error()}, nil //nolint:nilerr // An unparsable version is a refusal the condition names, not a reconcile error.
	}
	if mismatch != "" {
		log.Info("Not rendering bootstrap data: Kubernetes version mismatch", "machineVersion", machine.Spec.Version, "imageVersion", image.Version, "match", image.Match)
		return &blocked{reason: bootstrapv1.KubernetesVersionMismatchReason, message: mismatch}, nil
	}
	return nil, nil
}
