// SPDX-License-Identifier: GPL-2.0
/* The fifo policy (cistern/policy/fifo.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/fifo.bpf.h"
