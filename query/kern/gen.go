package kern

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -no-global-types -target bpfel syscalls ../../bpf/query/syscalls.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -no-global-types -target bpfel uprobe ../../bpf/query/uprobe.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -no-global-types -target bpfel schedSwitch ../../bpf/query/sched_switch.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -no-global-types -target bpfel processExec ../../bpf/query/process_exec.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -no-global-types -target bpfel processExit ../../bpf/query/process_exit.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -no-global-types -target bpfel pageCache ../../bpf/query/page_cache.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -no-global-types -target bpfel blockIo ../../bpf/query/block_io.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -no-global-types -target bpfel tcpState ../../bpf/query/tcp_state.bpf.c
