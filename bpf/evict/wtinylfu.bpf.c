// SPDX-License-Identifier: GPL-2.0
/* The wtinylfu policy (cistern/policy/wtinylfu.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/wtinylfu.bpf.h"
