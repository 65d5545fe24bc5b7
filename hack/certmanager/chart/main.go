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

// Command chart renders cert-manager's Helm chart (deploy/charts/cert-manager
// in the cert-manager module) with Helm's own engine, as `helm install
// cert-manager --namespace cert-manager` renders it for the default values,
// except for the image registry (-registry; the chart's imageRegistry value).
// The release tool writes the release into the chart's version and
// appVersion (v0.0.0 in the module); -version does here. It writes the
// controller's and cainjector's objects: the webhook's and the
// startupapicheck Job's (a Helm hook running cmctl) are left out, as
// hack/kind/certmanager.sh does not run them.
//
// It is a module of its own so that Helm's requirements stay out of the
// module that builds cert-manager's commands (hack/certmanager).
package main

import (
	"flag"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

func main() {
	dir := flag.String("chart", "", "the chart's directory (deploy/charts/cert-manager in the cert-manager module)")
	version := flag.String("version", "", "cert-manager's release (v1.21.2), the chart's version and appVersion")
	registry := flag.String("registry", "", "the image registry (the chart's imageRegistry value)")
	namespace := flag.String("namespace", "cert-manager", "the release's namespace")
	out := flag.String("out", "", "the file to write")
	flag.Parse()
	if err := run(*dir, *version, *registry, *namespace, *out); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-chart:", err)
		os.Exit(1)
	}
}

func run(dir, version, registry, namespace, out string) error {
	if dir == "" || version == "" || registry == "" || out == "" {
		return fmt.Errorf("-chart, -version, -registry and -out are required")
	}
	chrt, err := loader.Load(dir)
	if err != nil {
		return fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	chrt.Metadata.Version = version
	chrt.Metadata.AppVersion = version
	values, err := util.ToRenderValues(chrt, map[string]any{"imageRegistry": registry},
		common.ReleaseOptions{Name: "cert-manager", Namespace: namespace, Revision: 1, IsInstall: true}, nil)
	if err != nil {
		return fmt.Errorf("the chart's values: %w", err)
	}
	rendered, err := engine.Render(chrt, values)
	if err != nil {
		return fmt.Errorf("rendering the chart: %w", err)
	}
	names := make([]string, 0, len(rendered))
	for name, text := range rendered {
		base := path.Base(name)
		if !strings.HasSuffix(base, ".yaml") || strings.HasPrefix(base, "webhook-") || strings.HasPrefix(base, "startupapicheck-") || strings.TrimSpace(text) == "" {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(rendered[name]))
	}
	return os.WriteFile(out, []byte(b.String()), 0o600)
}
