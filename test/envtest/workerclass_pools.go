package envtest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/cluster-api-workers/exp/workerclass"
	workerclassv1 "github.com/cozystack/cluster-api-workers/exp/workerclass/api/v1alpha1"
)

// PoolCRDPath is the stand-in CRD for Cozystack's KubernetesNodes pool API.
var PoolCRDPath = filepath.Join("test", "crds", "pool")

// WorkerClassPrivateKeyPolicyPath is the admission policy that keeps private
// keys out of pools in the apiserver itself.
var WorkerClassPrivateKeyPolicyPath = filepath.Join("config", "workerclass", "policy", "private-keys.yaml")

// WorkerClassLabelPolicyPath is the admission policy that keeps a class
// label off classless pools in the apiserver itself.
var WorkerClassLabelPolicyPath = filepath.Join("config", "workerclass", "policy", "class-label.yaml")

// WorkerClassWebhookPath holds the WorkerClass, WorkerPlatform and pool
// webhook configurations.
var WorkerClassWebhookPath = filepath.Join("config", "workerclass", "webhook")

// WorkerClassOptions returns Options that install the pool CRD, serve the
// WorkerClass API's webhooks and, with controllers, run the class
// controller. Callers may add to the returned Options.
func WorkerClassOptions(controllers bool) Options {
	scheme := DefaultScheme()
	if err := workerclassv1.AddToScheme(scheme); err != nil {
		// AddToScheme fails only for conflicting registrations, which a
		// fresh scheme cannot have.
		panic(fmt.Sprintf("adding the WorkerClass API to the scheme: %v", err))
	}
	opts := Options{
		Scheme:        scheme,
		CRDPaths:      []string{PoolCRDPath},
		WebhookPaths:  []string{WorkerClassWebhookPath},
		ManifestPaths: []string{WorkerClassPrivateKeyPolicyPath, WorkerClassLabelPolicyPath},
		// As the released manager runs without the pool flags.
		SetupWebhooks: func(mgr ctrl.Manager) error {
			return workerclass.SetupWebhooksWithManager(mgr, workerclass.DefaultWebhookOptions())
		},
	}
	if controllers {
		opts.SetupControllers = func(ctx context.Context, mgr ctrl.Manager) error {
			return workerclass.SetupWithManager(ctx, mgr, workerclass.Options{})
		}
	}
	return opts
}

// NewPool returns a KubernetesNodes object with the given spec.
func NewPool(namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(workerclassv1.PoolGroupVersionKind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// CreateLegacyPools stores classless pools the way a cluster has them from
// before class support: it removes the pool webhook configurations, waits
// until the apiserver stops calling them, creates the pools, then puts the
// configurations back and waits until CREATEs are defaulted again.
func (e *Environment) CreateLegacyPools(ctx context.Context, pools ...*unstructured.Unstructured) error {
	var mutating admissionregistrationv1.MutatingWebhookConfigurationList
	var validating admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := e.Client.List(ctx, &mutating); err != nil {
		return err
	}
	if err := e.Client.List(ctx, &validating); err != nil {
		return err
	}
	var saved []client.Object
	for i := range mutating.Items {
		if hasPoolRule(mutating.Items[i].Webhooks[0].Rules) {
			saved = append(saved, &mutating.Items[i])
		}
	}
	for i := range validating.Items {
		if hasPoolRule(validating.Items[i].Webhooks[0].Rules) {
			saved = append(saved, &validating.Items[i])
		}
	}
	if len(saved) == 0 {
		return fmt.Errorf("no pool webhook configuration is installed")
	}
	for _, obj := range saved {
		if err := e.Client.Delete(ctx, obj); err != nil {
			return err
		}
	}
	namespace := pools[0].GetNamespace()
	if err := waitForPoolDefaulting(ctx, e.Client, namespace, false); err != nil {
		return err
	}
	var createErr error
	for _, p := range pools {
		if err := e.Client.Create(ctx, p); err != nil {
			// The webhooks come back all the same: a refused pool must not
			// leave the apiserver without them.
			createErr = fmt.Errorf("creating legacy pool %s: %w", p.GetName(), err)
			break
		}
	}
	for _, obj := range saved {
		obj.SetResourceVersion("")
		obj.SetUID("")
		if err := e.Client.Create(ctx, obj); err != nil {
			return errors.Join(createErr, err)
		}
	}
	return errors.Join(createErr, waitForPoolDefaulting(ctx, e.Client, namespace, true))
}

func hasPoolRule(rules []admissionregistrationv1.RuleWithOperations) bool {
	for _, r := range rules {
		for _, res := range r.Resources {
			if res == workerclassv1.PoolResource.Resource {
				return true
			}
		}
	}
	return false
}

// waitForPoolDefaulting creates throw-away classless pools until the
// apiserver's view of the webhooks matches want: defaulted (webhooks on)
// or stored classless (webhooks off).
func waitForPoolDefaulting(ctx context.Context, c client.Client, namespace string, want bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		probe := NewPool(namespace, fmt.Sprintf("webhook-probe-%d-%d", time.Now().UnixNano(), i), map[string]any{"cluster": "probe", "version": "v1.35"})
		err := c.Create(ctx, probe)
		if err == nil {
			class, _, _ := PoolClass(probe)
			_ = c.Delete(ctx, probe)
			if (class != "") == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the apiserver did not pick up the pool webhook change within 30s (last error: %v)", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PoolClass returns the class a pool names (spec.workerClassName) and
// whether it names one.
func PoolClass(pool *unstructured.Unstructured) (class string, found bool, err error) {
	return unstructured.NestedString(pool.Object, "spec", "workerClassName")
}

// GetPool reads a pool as the apiserver stores it.
func GetPool(ctx context.Context, c client.Reader, pool *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	got := NewPool(pool.GetNamespace(), pool.GetName(), nil)
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
		return nil, err
	}
	return got, nil
}

// ReplacePoolSpec updates a pool with a whole new spec, as a full replace
// does.
func ReplacePoolSpec(ctx context.Context, c client.Client, pool *unstructured.Unstructured, spec map[string]any) error {
	latest, err := GetPool(ctx, c, pool)
	if err != nil {
		return err
	}
	latest.Object["spec"] = spec
	return c.Update(ctx, latest)
}
