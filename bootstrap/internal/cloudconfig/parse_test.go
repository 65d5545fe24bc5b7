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

package cloudconfig

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
	kubeadmv1beta4 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
	sigsyaml "sigs.k8s.io/yaml"
)

// parsed is a rendered document read back generically, so that tests see
// every key that is present, expected or not.
type parsed struct {
	raw    map[string]any
	stages map[string][]map[string]any
}

func parse(out []byte) (*parsed, error) {
	if !strings.HasPrefix(string(out), Header+"\n") {
		return nil, fmt.Errorf("does not start with %q", Header)
	}
	p := &parsed{}
	if err := yaml.Unmarshal(out, &p.raw); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	stages, ok := p.raw["stages"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("stages is %T, not a map", p.raw["stages"])
	}
	p.stages = map[string][]map[string]any{}
	for name, list := range stages {
		items, ok := list.([]any)
		if !ok {
			return nil, fmt.Errorf("stages.%s is %T, not a list", name, list)
		}
		for _, item := range items {
			m, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("stages.%s has an item of type %T", name, item)
			}
			p.stages[name] = append(p.stages[name], m)
		}
	}
	return p, nil
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// stageNames lists each stage's step names in order.
func (p *parsed) stageNames() map[string][]string {
	out := map[string][]string{}
	for stage, steps := range p.stages {
		for _, s := range steps {
			name, _ := s["name"].(string)
			out[stage] = append(out[stage], name)
		}
	}
	return out
}

func (p *parsed) step(stage, name string) map[string]any {
	for _, s := range p.stages[stage] {
		if s["name"] == name {
			return s
		}
	}
	return nil
}

// decodedFile is a file entry with its content as yip writes it.
type decodedFile struct {
	Path        string
	Permissions int
	Owner       string
	Content     []byte
	Keys        []string
}

func (p *parsed) files(stage, name string) ([]decodedFile, error) {
	step := p.step(stage, name)
	if step == nil {
		return nil, nil
	}
	list, _ := step["files"].([]any)
	out := make([]decodedFile, 0, len(list))
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("file entry is %T", item)
		}
		f := decodedFile{Keys: keys(m)}
		f.Path, _ = m["path"].(string)
		f.Permissions, _ = m["permissions"].(int)
		f.Owner, _ = m["ownerstring"].(string)
		content, _ := m["content"].(string)
		if m["encoding"] == "b64" {
			b, err := base64.StdEncoding.DecodeString(content)
			if err != nil {
				return nil, fmt.Errorf("file %s: %w", f.Path, err)
			}
			content = string(b)
		}
		// yip expands templates; an escaped delimiter prints itself.
		f.Content = []byte(strings.ReplaceAll(content, `{{ "{{" }}`, "{{"))
		out = append(out, f)
	}
	return out, nil
}

// providerOptions is the cluster block's config as Kairos's kubeadm
// provider reads it (YAML into kubeadm's configuration types), with
// nothing else in it.
type providerOptions struct {
	ClusterConfiguration struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	} `json:"clusterConfiguration"`
	JoinConfiguration map[string]any `json:"joinConfiguration"`
}

func (p *parsed) providerOptions() (providerOptions, error) {
	cluster, ok := p.raw["cluster"].(map[string]any)
	if !ok {
		return providerOptions{}, fmt.Errorf("no cluster block")
	}
	return decodeProviderOptions(cluster)
}

func decodeProviderOptions(cluster map[string]any) (providerOptions, error) {
	config, _ := cluster["config"].(string)
	var wrapper providerOptions
	if err := sigsyaml.UnmarshalStrict([]byte(config), &wrapper); err != nil {
		return wrapper, fmt.Errorf("cluster.config: %w", err)
	}
	return wrapper, nil
}

// joinConfiguration returns the rendered JoinConfiguration as a
// standalone kubeadm document (apiVersion and kind included), whichever
// mode rendered it.
func (p *parsed) joinConfiguration() ([]byte, error) {
	if cluster, ok := p.raw["cluster"].(map[string]any); ok {
		wrapper, err := decodeProviderOptions(cluster)
		if err != nil {
			return nil, err
		}
		doc := wrapper.JoinConfiguration
		doc["apiVersion"] = kubeadmv1beta4.GroupVersion.String()
		doc["kind"] = "JoinConfiguration"
		return sigsyaml.Marshal(doc)
	}
	files, err := p.files("network", StageWriteJoinConfig)
	if err != nil {
		return nil, err
	}
	if len(files) != 1 {
		return nil, fmt.Errorf("expected one JoinConfiguration file, found %d", len(files))
	}
	return files[0].Content, nil
}

// decodeJoin reads a JoinConfiguration strictly: unknown keys fail.
func decodeJoin(doc []byte) (*kubeadmv1beta4.JoinConfiguration, error) {
	join := &kubeadmv1beta4.JoinConfiguration{}
	if err := sigsyaml.UnmarshalStrict(doc, join); err != nil {
		return nil, err
	}
	return join, nil
}
