package main

import "fmt"

func matrixMain(args []string) int {
	fmt.Println("kernel-matrix: not yet")
	return 1
}
