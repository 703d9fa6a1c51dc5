// Package pagecache is the page-cache agent behind `cistern cache agent`:
// the eviction policies of package evict applied to the Linux page cache of
// one directory inside one memory cgroup, on a mainline kernel.
//
// The kernel's page-cache eviction hooks of cachebpf are not in mainline,
// so the agent evicts before the kernel must. The policy runs in the
// kernel's path: each policy object (bpf/pagecache/pc_<policy>.bpf.c) holds
// the tracepoint programs (track.bpf.h: tp_btf on
// mm_filemap_add_to_page_cache and mm_filemap_delete_from_page_cache, raw_tp
// on mm_filemap_get_pages) that apply the folios of the watched files
// charged to the cgroup to the policy as they come, under a lock no CPU
// waits for (apply.bpf.h). User space only drops pages: woken by the policy
// when the pages it tracks near the cgroup's limit (or by a slow usage
// poll), the agent asks pc_apply (kernel.Call) for victims and drops their
// page ranges with posix_fadvise(POSIX_FADV_DONTNEED); what the calls freed
// is counted in the kernel, and only ranges not freed whole are checked
// with cachestat(2), those still cached counted by reason. Killed, the agent
// leaves the kernel's own reclaim: its programs go with its file
// descriptors. track.bpf.c, the same programs with a ring buffer and no
// policy, records traces (Recorder).
package pagecache
