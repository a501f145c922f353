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

/* The configuration, read with plain loads (no helper call). Two copies:
 * the program reads mup_cfg_sel once per packet and uses that copy
 * throughout; user space writes the other copy, flips mup_cfg_sel, then waits
 * for an RCU grace period (membarrier) before it may write the retired copy.
 * So no packet ever sees half of one configuration and half of another
 * (src/dataplane/tables.ts). */
struct mup_config mup_cfgs[2] SEC(".data.cfg") = {
	{ .fwd_mode = MUP_FWD_FIB, .sport_base = 49152, .sport_span = 16384 },
	{ .fwd_mode = MUP_FWD_FIB, .sport_base = 49152, .sport_span = 16384 },
};
__u32 mup_cfg_sel SEC(".data.cfg") = 0;

static __always_inline const struct mup_config *cfg_current(void)
{
	return &mup_cfgs[*(volatile __u32 *)&mup_cfg_sel & 1];
}

#endif
