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

// Package feature holds the providers' feature gates. Managers add
// MutableGates to their flags (--feature-gates=WorkerClass=true) and read
// Gates to decide what to run.
package feature

import (
	"k8s.io/component-base/featuregate"
)

const (
	// WorkerClass serves the WorkerClass API: the class controller, the
	// class and platform webhooks, and pool admission for
	// KubernetesNodes. Alpha since v0.1, off by default.
	WorkerClass featuregate.Feature = "WorkerClass"
)

var (
	// MutableGates is the gate set that flags write to.
	MutableGates featuregate.MutableFeatureGate = featuregate.NewFeatureGate()
	// Gates is the read-only view of MutableGates.
	Gates featuregate.FeatureGate = MutableGates
)

// defaultGates are every gate with its default and maturity.
var defaultGates = map[featuregate.Feature]featuregate.FeatureSpec{
	WorkerClass: {Default: false, PreRelease: featuregate.Alpha},
}

func init() {
	if err := MutableGates.Add(defaultGates); err != nil {
		// The table above is static, so this fails only on a coding error.
		panic(err)
	}
}
