// SPDX-License-Identifier: GPL-2.0
/* The lfu policy (cistern/policy/lfu.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/lfu.bpf.h"
