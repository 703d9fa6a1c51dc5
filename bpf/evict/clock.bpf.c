// SPDX-License-Identifier: GPL-2.0
/* The clock policy (cistern/policy/clock.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/clock.bpf.h"
