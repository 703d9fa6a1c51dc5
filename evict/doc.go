// Package evict is the user-space side of the eviction-policy framework in
// bpf/include/cistern/evict.bpf.h: policy functions (init, added, accessed,
// removed, evict) over eviction lists kept in BPF maps, a registry of valid
// entries and a fallback that contain a wrong policy, after cachebpf.
//
// # Policies
//
// The registry (registry.go) has one row per policy: its name, its objects
// (replay and Kerby-KV: bpf/evict/<name>.bpf.c; the page-cache agent:
// bpf/pagecache/pc_<name>.bpf.c; both stubs include the policy's header
// bpf/include/cistern/policy/<name>.bpf.h), whether it uses accesses,
// counts first reads, takes scanner ids, has periodic work, and who may ask
// for it. Lookup is the one check of a name; Names lists what help offers.
// FIFO, LRU, MRU, CLOCK, SIEVE, S3-FIFO, approximate LFU (8 sampled
// candidates), LHD (32 sampled; its density table is rebuilt by the
// policy's program evict_periodic, which Replay runs between batches:
// Cache.Periodic) and GET-SCAN, plus "broken", a deliberately wrong one
// for tests, and the page cache's "scan-only" and "none". Open loads one
// with a cache of Config.Capacity entries and runs its init function;
// Cache.Replay feeds requests to the very same policy code in the kernel
// through the program evict_replay, called with kernel.Call (an XDP
// program run with BPF_PROG_TEST_RUN, never attached: see
// bpf/include/cistern/call.bpf.h): up to BatchSize requests per run are
// written to the evict_batches array and looped over in the kernel with
// bpf_loop, so there is one system call per batch, not per request.
// Package evict/replay runs whole traces.
//
// # Layout
//
// The Go types here mirror cistern/evict.h: Request is struct evict_req
// (ReqSize bytes), the batch is struct evict_batch, Stats reads the
// evict_stats counters (enum evict_stat, in StatNames order). Config.Apply
// sizes the maps of any collection that includes the header; a policy of
// your own package is registered (Register) and then loaded like the rest.
package evict
