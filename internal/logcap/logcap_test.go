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

package logcap

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
)

func TestValidate(t *testing.T) {
	for args, ok := range map[string]bool{
		"":                        true,
		"--v=4":                   true,
		"--v=7":                   true,
		"--v=8":                   false,
		"--v=10":                  false,
		"--vmodule=request*=7":    true,
		"--vmodule=request*=8":    false,
		"--v=2 --vmodule=x=3,y=9": false,
	} {
		c := logs.NewOptions()
		fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
		logsv1.AddFlags(c, fs)
		if err := fs.Parse(strings.Fields(args)); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if err := Validate(c); (err == nil) != ok {
			t.Errorf("%q: error %v, want accepted %v", args, err, ok)
		}
	}
}
