// Command kernel-matrix boots Debian's kernels under qemu and runs Cistern's
// load test, doctor and system tests inside each (make kernel-matrix).
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "exec" {
		os.Exit(execMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help") {
		fmt.Println("usage: kernel-matrix [matrix flags] | exec --kernel K [--copy F] 'script'")
		os.Exit(0)
	}
	os.Exit(matrixMain(os.Args[1:]))
}
