// SPDX-License-Identifier: GPL-2.0
/* The oldest-biggest policy (evictbig.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "evictbig.bpf.h"
