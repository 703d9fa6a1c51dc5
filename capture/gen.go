package capture

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel -type cap_ev cap ../bpf/capture/capture.bpf.c
