/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The tables and the global configuration. Sizes here are defaults: user
 * space sets max_entries from the config before loading. */
#ifndef MUP_MAPS_H
#define MUP_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "mup_shared.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct mup_policy_key);
	__type(value, struct mup_policy);
} mup_policies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct mup_localsid_key);
	__type(value, struct mup_localsid);
} mup_localsids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MUP_EVENT_SLOTS + 2 * 65536);
	__type(key, __u32);
	__type(value, struct mup_counter);
} mup_counters SEC(".maps");

/* ICMP errors sent by this CPU in the current one-second window (mtu.h). */
struct mup_icmp_window {
	__u64 start_ns;
	__u64 sent;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mup_icmp_window);
} mup_icmp_rate SEC(".maps");

/* Read with plain loads (no helper call); written by user space. */
struct mup_config mup_cfg SEC(".data.cfg") = {
	.fwd_mode = MUP_FWD_FIB,
	.sport_base = 49152,
	.sport_span = 16384,
};

#endif
