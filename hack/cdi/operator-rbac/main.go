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

// Command operator-rbac writes the roles and bindings CDI's operator gives
// cdi-controller and cdi-apiserver, made by the operator's own resource
// factories (pkg/operator/resources/cluster and .../namespaced) at the
// pinned version, as one YAML stream: the real-CDI tier grants exactly
// those, not cluster-admin. Only RBAC objects are written; the operator's
// Deployments and Services are not how the tier runs CDI.
//
// Usage: operator-rbac NAMESPACE.
package main

import (
	"fmt"
	"os"

	rbacv1 "k8s.io/api/rbac/v1"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/cluster"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/namespaced"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// groups are the operator's resource groups of the two components the
// tier runs: cluster-wide, then in CDI's namespace.
var groups = []struct{ cluster, namespaced string }{
	{cluster: "controller-rbac", namespaced: "controller"},
	{cluster: "apiserver-rbac", namespaced: "apiserver"},
}

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" {
		fmt.Fprintln(os.Stderr, "usage: operator-rbac NAMESPACE")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "operator-rbac:", err)
		os.Exit(1)
	}
}

func write(namespace string) error {
	var objs []client.Object
	for _, group := range groups {
		rs, err := cluster.CreateStaticResourceGroup(group.cluster, &cluster.FactoryArgs{Namespace: namespace})
		if err != nil {
			return fmt.Errorf("the operator's cluster resources %s: %w", group.cluster, err)
		}
		objs = append(objs, rs...)
		rs, err = namespaced.CreateResourceGroup(group.namespaced, &namespaced.FactoryArgs{Namespace: namespace})
		if err != nil {
			return fmt.Errorf("the operator's namespaced resources %s: %w", group.namespaced, err)
		}
		objs = append(objs, rs...)
	}
	for _, o := range objs {
		switch o.(type) {
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *rbacv1.Role, *rbacv1.RoleBinding:
		default:
			continue
		}
		out, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("%T %s: %w", o, o.GetName(), err)
		}
		if _, err := fmt.Printf("---\n%s", out); err != nil {
			return err
		}
	}
	return nil
}
