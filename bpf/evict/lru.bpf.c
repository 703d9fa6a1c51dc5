// SPDX-License-Identifier: GPL-2.0
/* The lru policy (cistern/policy/lru.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/lru.bpf.h"
