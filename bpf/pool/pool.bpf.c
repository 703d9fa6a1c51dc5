// SPDX-License-Identifier: GPL-2.0
/*
 * pool.bpf.c - the Kerby pool with generic objects, driven from user space
 * through CISTERN_CALL programs (XDP run with BPF_PROG_TEST_RUN, see
 * cistern/call.bpf.h). Package pool loads it to
 * preload and inspect objects with the very code BPF users run, and its tests
 * hammer it from several threads at once.
 *
 * Data moves through pool_staging: user space writes a slot, then runs
 * pool_write; or runs pool_read, then reads the slot.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define CISTERN_POOL_OBJECTS
#include "cistern/pool.bpf.h"
#include "cistern/call.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Staging buffers, one per concurrent user-space caller; value_size is set
 * by the loader to pool_block_size * CISTERN_POOL_MAX_BLOCKS. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 128 * CISTERN_POOL_MAX_BLOCKS);
} pool_staging SEC(".maps");

static __always_inline __u8 *staging(struct pool_op_args *a)
{
	__u32 slot = a->slot;

	return bpf_map_lookup_elem(&pool_staging, &slot);
}

CISTERN_CALL(pool_write, struct pool_op_args, a)
{
	__u8 *buf = staging(a);

	a->ret = buf ? pool_obj_write(a->id, buf, a->len) : -POOL_EINVAL;
}

CISTERN_CALL(pool_read, struct pool_op_args, a)
{
	__u8 *buf = staging(a);

	a->ret = buf ? pool_obj_read(a->id, buf) : -POOL_EINVAL;
}

CISTERN_CALL(pool_resize_obj, struct pool_op_args, a)
{
	a->ret = pool_obj_resize(a->id, a->len);
}

CISTERN_CALL(pool_free_obj, struct pool_op_args, a)
{
	a->ret = pool_obj_free(a->id);
}
