// SPDX-License-Identifier: GPL-2.0
/*
 * unbounded.bpf.c - a deliberately broken program: it indexes a map value
 * with a number it never bounds. The verifier must refuse it, and the
 * all-programs-load test must report that refusal (see internal/bpfcheck).
 * It lives in testdata so the load-all walk never treats it as a product.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[64]);
} buf SEC(".maps");

struct args {
	__u32 index;
};

SEC("syscall")
int unbounded(struct args *a)
{
	__u32 k = 0;
	__u8 *v = bpf_map_lookup_elem(&buf, &k);

	if (!v)
		return 0;
	v[a->index] = 1; /* no mask, no check: out of bounds for index >= 64 */
	return 0;
}
