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
	"flag"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

var verbose = flag.Bool("controller-logs", false, "print the controller's logs")

// envtestLogger discards controller logs unless -controller-logs is set.
func envtestLogger() logr.Logger {
	if !flag.Parsed() {
		flag.Parse()
	}
	if *verbose {
		return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(os.Stderr), textlogger.Verbosity(4)))
	}
	klog.SetLogger(logr.Discard())
	return logr.Discard()
}
