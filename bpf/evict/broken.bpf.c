// SPDX-License-Identifier: GPL-2.0
/* The broken policy (cistern/policy/broken.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/broken.bpf.h"
