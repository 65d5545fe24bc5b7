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

// Command workerclass prints the effective settings of a KubernetesNodes
// pool file resolved against WorkerClass files and the platform
// configuration, exactly as pool admission would (a CREATE, or with --old
// an UPDATE of the stored pool, through the code path the webhooks use);
// with --legacy it prints a classified Talos pool in the legacy
// (classless) field layout, the restore interface for rolling back to a
// chart without class support.
//
//	workerclass resolve --pool pool.yaml [--old stored.yaml] --classes classes/ --platform platform.yaml
//	    [--substrate KubeVirt|Proxmox] [--control-plane-version v1.35.6] [--legacy]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK       = 0
	exitRejected = 1
	exitUsage    = 2
)

const usage = `usage: workerclass resolve --pool FILE [--old FILE] --classes FILE|DIR --platform FILE
           [--substrate KubeVirt|Proxmox] [--control-plane-version VERSION] [--legacy]

Prints the effective settings of a KubernetesNodes pool resolved against the
WorkerClass objects in --classes and the WorkerPlatform in --platform, or the
field errors pool admission would answer with. Without --old the pool is a
CREATE: a pool without spec.workerClassName gets the platform default class.
With --old (the stored pool) it is an UPDATE of that pool: a classless pool
stays legacy, an omitted class restores the stored one, and a class switch
must keep the bootstrap family.

--substrate is the substrate of pools that name none in spec.substrate.
--control-plane-version is the Kubernetes version of the control plane of
the pool's cluster; a pool selecting a newer minor is refused. Without it the
minor is not checked against the control plane.

--legacy prints a classified Talos pool in the legacy (classless) field layout
instead: the class name and label removed and every effective Talos setting
written into the pool's own fields. Kairos pools and class settings a
classless pool cannot carry are refused; already classless pools are printed
unchanged.
`

// report writes to stderr; a failed write there has nowhere left to be
// reported, so it is dropped.
func report(stderr io.Writer, msg string) {
	_, _ = io.WriteString(stderr, msg)
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "resolve" {
		report(stderr, usage)
		return exitUsage
	}
	fs := flag.NewFlagSet("workerclass resolve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { report(stderr, usage) }
	var opts options
	fs.StringVar(&opts.pool, "pool", "", "KubernetesNodes pool file")
	fs.StringVar(&opts.old, "old", "", "the stored pool: evaluate an UPDATE of it to --pool")
	fs.StringVar(&opts.classes, "classes", "", "WorkerClass file or directory of files")
	fs.StringVar(&opts.platform, "platform", "", "WorkerPlatform file")
	fs.StringVar(&opts.substrate, "substrate", "KubeVirt", "KubeVirt or Proxmox, for pools that name none")
	fs.StringVar(&opts.controlPlaneVersion, "control-plane-version", "", "the Kubernetes version of the pool's cluster's control plane")
	fs.BoolVar(&opts.legacy, "legacy", false, "print the legacy (classless) layout of a classified Talos pool")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if opts.pool == "" || opts.classes == "" || opts.platform == "" || fs.NArg() > 0 {
		report(stderr, usage)
		return exitUsage
	}
	out, warnings, err := resolveCommand(opts)
	for _, w := range warnings {
		report(stderr, "warning: "+w+"\n")
	}
	if err != nil {
		report(stderr, err.Error()+"\n")
		var rejected *rejectedError
		if errors.As(err, &rejected) {
			return exitRejected
		}
		return exitUsage
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		report(stderr, fmt.Sprintf("writing the output: %v\n", err))
		return exitUsage
	}
	return exitOK
}
