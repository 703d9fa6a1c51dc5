package vm

import "os"

// InGuest reports whether this process runs inside a kernel-matrix guest
// (emulated, ~10-30x slower): the guest's stage two exports CISTERN_VM=1
// (init.go). Timing bounds and server timeouts widen there.
func InGuest() bool { return os.Getenv("CISTERN_VM") == "1" }
