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

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cluster-api-workers/test/envtest"
	"github.com/cozystack/cluster-api-workers/test/harness/components"
)

// providerUserPrefix starts the user names our providers run as.
const providerUserPrefix = "system:serviceaccount:harness-"

// providerRoles are the ClusterRoles each of our providers ships,
// controller-gen's from their +kubebuilder:rbac markers (the WorkerClass
// controller's with the infrastructure provider when the gate is on).
func providerRoles(name components.Name, workerClasses bool) []string {
	switch name {
	case components.KairosBootstrap:
		return []string{"config/bootstrap/rbac/role.yaml"}
	case components.Infrastructure:
		roles := []string{"config/infrastructure/rbac/role.yaml"}
		if workerClasses {
			roles = append(roles, "config/workerclass/rbac/role.yaml")
		}
		return roles
	}
	return nil
}

// providerConfig returns cfg authenticated as a service account bound to
// exactly the ClusterRoles the provider ships, so that every scenario the
// provider runs in proves its roles cover what it calls: a missing verb is
// a Forbidden error in its reconciles. Other components keep cfg.
func (h *Harness) providerConfig(ctx context.Context, cfg *rest.Config, name components.Name, instance int64) (*rest.Config, error) {
	files := providerRoles(name, h.opts.WorkerClasses)
	if len(files) == 0 {
		return cfg, nil
	}
	return h.boundUser(ctx, cfg, name, instance, files)
}

// infrastructureClusterRole is the ClusterRole the infrastructure provider
// ships for its identity in a remote infrastructure cluster.
const infrastructureClusterRole = "config/infrastructure/infrastructure-cluster/role.yaml"

// infrastructureClusterConfig returns a config of this harness's apiserver
// as the infrastructure provider of another harness's instance would reach
// it as its remote infrastructure cluster: a user bound to exactly the role
// shipped for that.
func (h *Harness) infrastructureClusterConfig(ctx context.Context, instance int64) (*rest.Config, error) {
	return h.boundUser(ctx, h.Config(), components.Infrastructure, instance, []string{infrastructureClusterRole})
}

// boundUser creates the ClusterRoles of files in this harness's apiserver,
// binds them to the provider's user of the instance and returns cfg
// authenticated as that user.
func (h *Harness) boundUser(ctx context.Context, cfg *rest.Config, name components.Name, instance int64, files []string) (*rest.Config, error) {
	user := fmt.Sprintf("%s%d:%s", providerUserPrefix, instance, name)
	for _, file := range files {
		role, err := readClusterRole(filepath.Join(envtest.RepoRoot(), file))
		if err != nil {
			return nil, err
		}
		role.Name = fmt.Sprintf("harness-%d-%s-%s", instance, name, filepath.Base(filepath.Dir(filepath.Dir(file))))
		if err := h.Management.Client.Create(ctx, role); err != nil {
			return nil, fmt.Errorf("creating the %s role from %s: %w", name, file, err)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}
		if err := h.Management.Client.Create(ctx, binding); err != nil {
			return nil, fmt.Errorf("binding the %s role: %w", name, err)
		}
	}
	restricted, err := h.Management.AddUser(user, "system:serviceaccounts", "system:authenticated")
	if err != nil {
		return nil, err
	}
	restricted.QPS, restricted.Burst = cfg.QPS, cfg.Burst
	return restricted, nil
}

func readClusterRole(path string) (*rbacv1.ClusterRole, error) {
	data, err := os.ReadFile(path) //nolint:gosec // A file of the repository or one the harness wrote.
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return role, nil
}
