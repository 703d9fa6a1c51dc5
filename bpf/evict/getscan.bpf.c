// SPDX-License-Identifier: GPL-2.0
/* The get-scan policy (cistern/policy/getscan.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/getscan.bpf.h"
