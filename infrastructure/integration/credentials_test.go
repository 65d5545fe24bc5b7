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

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/cozystack/cluster-api-workers/infrastructure/api/v1alpha1"
	"github.com/cozystack/cluster-api-workers/test/sim/fault"
)

// TestNoMessageCarriesURLCredentials: a scenario full of credentialed
// URLs, and every word it produces read for them. A tenant's templates
// and machines whose import URL carries credentials and fails some rule
// (the scheme, the host, the syntax, the query, the credentials
// themselves) are refused with the URL shown masked; a machine whose
// import fails with CDI's words quoting a credentialed mirror URL reports
// the failure with the URL masked. Every admission error, every condition
// of every KubeVirtMachine and template of the namespace and every Event
// in it is searched for the user name and the password.
func TestNoMessageCarriesURLCredentials(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	tc := newCluster(t)
	const user, password = "mirror-user", "mirror-s3cret"
	userinfo := user + ":" + password + "@"
	withImport := func(url string) infrav1.KubeVirtMachineSpec {
		spec := containerDiskSpec()
		spec.Image = &infrav1.ImageSource{HTTPImport: &infrav1.HTTPImportSource{URL: url}}
		spec.RootDisk = &infrav1.RootDisk{Size: ptr.To(resource.MustParse("10Gi"))}
		return spec
	}
	var produced []string
	for i, url := range []string{
		"https://" + userinfo + "images.example.com/disk.raw",
		"ftp://" + userinfo + "images.example.com/disk.raw",
		"https://" + userinfo + "/disk.raw",
		"https://" + user + ":" + password + " @images.example.com/disk.raw",
		"https://" + userinfo + "images.example.com/disk.raw?signature=1",
	} {
		err := c.Create(ctx, classlessTemplate(tc.namespace, fmt.Sprintf("credentials-%d", i), withImport(url)))
		g.Expect(err).To(MatchError(ContainSubstring("spec.template.spec.image.httpImport.url")), url)
		produced = append(produced, err.Error())
		machine := &infrav1.KubeVirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: fmt.Sprintf("credentials-%d", i)}, Spec: withImport(url)}
		err = c.Create(ctx, machine)
		g.Expect(err).To(MatchError(ContainSubstring("spec.image.httpImport.url")), url)
		produced = append(produced, err.Error())
	}
	g.Expect(strings.Join(produced, "\n")).To(ContainSubstring("ftp://***@images.example.com/disk.raw"), "the refusal shows the URL, masked")

	// CDI's importer quotes the URL it fetched: a redirect to a mirror
	// with credentials.
	cdiMessage := `Unable to connect to http data source: Get "https://` + userinfo + `mirror.example.com/disk.raw": dial tcp: lookup mirror.example.com: no such host`
	stack.CDI.FailImportsWith(fault.Named(key(tc.namespace, "mirror-root")), 1, cdiMessage)
	kvm := tc.machine(t, "mirror", withImport("https://images.example.com/disk.raw"))
	// CDI's words are reported, the URL masked.
	expectReadySaying(t, kvm, metav1.ConditionFalse, infrav1.ImportFailedReason, `Get "https://***@mirror.example.com/disk.raw"`)

	machines := &infrav1.KubeVirtMachineList{}
	g.Expect(c.List(ctx, machines, client.InNamespace(tc.namespace))).To(Succeed())
	for _, m := range machines.Items {
		for _, cond := range m.Status.Conditions {
			produced = append(produced, fmt.Sprintf("KubeVirtMachine %s %s: %s", m.Name, cond.Type, cond.Message))
		}
	}
	templates := &infrav1.KubeVirtMachineTemplateList{}
	g.Expect(c.List(ctx, templates, client.InNamespace(tc.namespace))).To(Succeed())
	for _, tmpl := range templates.Items {
		for _, cond := range tmpl.Status.Conditions {
			produced = append(produced, fmt.Sprintf("KubeVirtMachineTemplate %s %s: %s", tmpl.Name, cond.Type, cond.Message))
		}
	}
	events := &corev1.EventList{}
	g.Expect(c.List(ctx, events, client.InNamespace(tc.namespace))).To(Succeed())
	for _, e := range events.Items {
		produced = append(produced, fmt.Sprintf("Event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message))
	}
	all := strings.Join(produced, "\n")
	t.Logf("%d messages read", len(produced))
	g.Expect(all).NotTo(ContainSubstring(password))
	g.Expect(all).NotTo(ContainSubstring(user))
}
