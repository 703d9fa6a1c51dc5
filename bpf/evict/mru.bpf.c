// SPDX-License-Identifier: GPL-2.0
/* The mru policy (cistern/policy/mru.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/mru.bpf.h"
