// SPDX-License-Identifier: GPL-2.0
/* The lhd policy (cistern/policy/lhd.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/lhd.bpf.h"
