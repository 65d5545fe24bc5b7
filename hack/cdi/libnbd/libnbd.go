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

// Package libnbd stands in for libguestfs.org/libnbd when CDI is built by
// hack/cdi: the real package is a cgo binding to the C library libnbd and
// is not served by the Go module proxy, so it cannot be had here. CDI uses
// it only in pkg/importer/vddk-datasource_amd64.go, to read VMware disks
// that nbdkit's VDDK plugin serves. This package offers only what that file
// uses; every operation fails with ErrNotBuilt, so a VDDK import fails with
// a message saying why instead of the build failing for every importer.
// The other import sources (HTTP, registry, upload, clone, blank) do not
// touch it.
package libnbd

import (
	"errors"
	"syscall"
)

// ErrNotBuilt is what every operation returns.
var ErrNotBuilt = errors.New("VDDK imports are not built here: CDI was built by " +
	"cluster-api-workers' hack/cdi with a stand-in for libguestfs.org/libnbd, " +
	"a cgo binding to the C library libnbd that the Go module proxy does not serve")

// The NBD protocol values CDI reads (block status flags and the command
// flag asking for one extent per reply).
const (
	CMD_FLAG_REQ_ONE = uint32(0x08)
	STATE_HOLE       = uint32(1 << 0)
	STATE_ZERO       = uint32(1 << 1)
)

// Libnbd is a handle; none is ever made, since Create fails.
type Libnbd struct{}

// LibnbdError is the error type the real Close returns.
type LibnbdError struct {
	Op     string
	Errmsg string
	Errno  syscall.Errno
}

func (e *LibnbdError) Error() string {
	return e.Op + ": " + e.Errmsg
}

// ExtentCallback receives block status extents as (length, flags) pairs.
type ExtentCallback func(metacontext string, offset uint64, entries []uint32, err *int) int

// PreadOptargs are the optional arguments of Pread.
type PreadOptargs struct {
	FlagsSet bool
	Flags    uint32
}

// BlockStatusOptargs are the optional arguments of BlockStatus.
type BlockStatusOptargs struct {
	FlagsSet bool
	Flags    uint32
}

// Create fails: there is no libnbd to make a handle with.
func Create() (*Libnbd, error) {
	return nil, ErrNotBuilt
}

func (h *Libnbd) AddMetaContext(name string) error { return ErrNotBuilt }

func (h *Libnbd) ConnectUri(uri string) error { return ErrNotBuilt }

func (h *Libnbd) GetSize() (uint64, error) { return 0, ErrNotBuilt }

func (h *Libnbd) Pread(buf []byte, offset uint64, optargs *PreadOptargs) error {
	return ErrNotBuilt
}

func (h *Libnbd) BlockStatus(count, offset uint64, extent ExtentCallback, optargs *BlockStatusOptargs) error {
	return ErrNotBuilt
}

func (h *Libnbd) Close() *LibnbdError {
	return &LibnbdError{Op: "close", Errmsg: ErrNotBuilt.Error(), Errno: syscall.ENOSYS}
}
