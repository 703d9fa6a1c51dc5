// SPDX-License-Identifier: GPL-2.0
/* The sieve policy (cistern/policy/sieve.bpf.h) for replay and Kerby-KV. */
#include "vmlinux.h"
#include "cistern/policy/sieve.bpf.h"
