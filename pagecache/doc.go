// Package pagecache is the page-cache agent behind `cistern cache agent`:
// the eviction policies of package evict applied to the Linux page cache of
// one directory inside one memory cgroup, on a mainline kernel.
//
// The kernel's page-cache eviction hooks of cachebpf are not in mainline,
// so the agent evicts before the kernel must. A tracker (bpf/pagecache/
// track.bpf.c, tp_btf on mm_filemap_add_to_page_cache,
// mm_filemap_delete_from_page_cache and mm_filemap_get_pages) reports the
// folios of the watched files charged to the cgroup through a ring buffer.
// The agent applies the events in order, in batches, to the policy object
// through the program pc_apply (kernel.Call; bpf/pagecache/apply.bpf.h,
// compiled into each policy), which keeps the framework single-writer. When the
// cgroup's usage nears its limit, pc_apply also returns victims, and the
// agent drops their page ranges with posix_fadvise(POSIX_FADV_DONTNEED),
// then checks each with cachestat(2) and counts those still cached by
// reason.
package pagecache
