// SPDX-License-Identifier: GPL-2.0
/* The s3fifo policy (cistern/policy/s3fifo.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/s3fifo.bpf.h"
