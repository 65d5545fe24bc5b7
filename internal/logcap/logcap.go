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

// Package logcap bounds the managers' log verbosity. At -v=8 and above,
// client-go logs the body of every API request and response, and the
// managers read and write Secrets: bootstrap data, token records and their
// tokens would reach the log. Both managers refuse such a setting, at
// start and on the diagnostics server's /debug/flags/v.
package logcap

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apiserver/pkg/server/routes"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MaxVerbosity is the highest log verbosity the managers accept.
const MaxVerbosity = 7

// Validate refuses a verbosity, global or per file (--vmodule), above
// MaxVerbosity.
func Validate(c *logsv1.LoggingConfiguration) error {
	if c.Verbosity > MaxVerbosity {
		return fmt.Errorf("--v=%d: at most %d: from 8 client-go logs API request and response bodies, Secrets included", c.Verbosity, MaxVerbosity)
	}
	for _, item := range c.VModule {
		if item.Verbosity > MaxVerbosity {
			return fmt.Errorf("--vmodule=%s=%d: at most %d: from 8 client-go logs API request and response bodies, Secrets included", item.FilePattern, item.Verbosity, MaxVerbosity)
		}
	}
	return nil
}

// VerbosityPath is where Cluster API's diagnostics server lets an
// authorized caller set the log verbosity (flags.GetManagerOptions).
const VerbosityPath = "/debug/flags/v"

// CapVerbosityEndpoint makes the diagnostics server's VerbosityPath, when
// it serves one, refuse a verbosity above MaxVerbosity, as the flags do.
func CapVerbosityEndpoint(opts *metricsserver.Options) {
	if _, ok := opts.ExtraHandlers[VerbosityPath]; ok {
		opts.ExtraHandlers[VerbosityPath] = routes.StringFlagPutHandler(setVerbosity)
	}
}

// setVerbosity sets klog's verbosity as Cluster API's handler does, up to
// MaxVerbosity.
func setVerbosity(value string) (string, error) {
	v, err := strconv.Atoi(strings.TrimSpace(value))
	if err != nil {
		return "", fmt.Errorf("%s: the verbosity must be an integer", VerbosityPath)
	}
	if v > MaxVerbosity {
		return "", fmt.Errorf("%s: at most %d: from 8 client-go logs API request and response bodies, Secrets included", VerbosityPath, MaxVerbosity)
	}
	return logs.GlogSetter(strconv.Itoa(v))
}
