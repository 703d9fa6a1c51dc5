package pagecache

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel track ../bpf/pagecache/track.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcMru ../bpf/pagecache/pc_mru.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcFifo ../bpf/pagecache/pc_fifo.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcLru ../bpf/pagecache/pc_lru.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcLfu ../bpf/pagecache/pc_lfu.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcS3fifo ../bpf/pagecache/pc_s3fifo.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcGetscan ../bpf/pagecache/pc_getscan.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcScanonly ../bpf/pagecache/pc_scanonly.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcNone ../bpf/pagecache/pc_none.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel pcLhd ../bpf/pagecache/pc_lhd.bpf.c
