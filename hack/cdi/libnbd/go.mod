// Our stand-in for libguestfs.org/libnbd, which hack/cdi/go.mod points at
// with a replace line: the real module is a cgo binding to the C library
// libnbd and is not served by the Go module proxy. CDI uses it only for
// VMware VDDK imports; see libnbd.go.
module libguestfs.org/libnbd

go 1.26.0
