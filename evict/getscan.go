package evict

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel getscan ../bpf/evict/getscan.bpf.c

// GET-SCAN registers here, not in the policies literal, so that it adds a
// file instead of editing a shared one.
func init() { policies["get-scan"] = loadGetscan }
