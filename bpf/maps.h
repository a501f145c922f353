/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Every map of the data plane (mup.bpf.c), in one place: the tables, the
 * counters and the global configuration, then the per-feature state. Only
 * declarations (and the layouts of values only the program knows); the code
 * that uses them is in the feature headers named at each group. Declared in
 * the order of their place in .maps. Sizes here are defaults: user space
 * sets max_entries from the config before loading. */
#ifndef MUP_MAPS_H
#define MUP_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "mup_shared.h"
#include "addr.h"

/* The rule tables (lookup.h). */
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

/* H.M.Session.Encaps (session.h): the sessions, by UE prefix. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct mup_session_key);
	__type(value, struct mup_session);
} mup_sessions SEC(".maps");

/* Events and per-rule counts (counters.h): every CPU's copy of every slot in
 * one plain array, CPU c's copy of slot s at element c * mup_counter_slots + s.
 * User space sets mup_counter_slots (events + max policies + max local SIDs +
 * max sessions) and sizes the array to it times the possible CPUs before the
 * load. Not a PERCPU_ARRAY: the kernel makes each of its elements on its own,
 * and 2.1 million slots took over a second to create. Mmapable: user space
 * reads a range of slots from a mapping of it, not element by element. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MUP_EVENT_SLOTS + 3 * 65536);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct mup_counter);
} mup_counters SEC(".maps");

/* Frozen at the load: the verifier knows it. The default fits the array's
 * default size for one CPU (loaded as is, another CPU counts nothing). */
const volatile __u32 mup_counter_slots SEC(".rodata.counters") = MUP_EVENT_SLOTS + 3 * 65536;

/* The rate limit of the ICMP errors (mtu.h): errors sent by this CPU in the
 * current one-second window. */
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

/* The lookups' per-CPU copies of the last rule found (lookup.h). */

/* The policy this CPU found last, copied: GTP-U comes to a few N3 addresses,
 * so most packets carry the destination the packet before did, and a hit
 * costs a few loads where the hash lookup is calls to the hash, the bucket
 * walk and memcmp (about 9 ns on the RFC 2544 wire path here). A lookup's
 * answer depends only on the first n_max bits of the 64-bit key DA || TEID,
 * n_max the longest configured length (every shorter one is a mask of
 * those bits): the copy is keyed by those bits, so that with no TEID
 * prefixes configured every G-PDU to one address hits whatever its TEID,
 * and with them every G-PDU of one (N3, TEID) prefix of that length. The
 * copy is good while the configuration's policy_gen is the one it was taken
 * under: user space changes policy_gen with every policy put or delete, in
 * the configuration flip that ends with an RCU grace period
 * (src/dataplane/tables.ts), so no packet after it uses an older copy. Not
 * pinned: a new program starts with no copy. */
struct mup_policy_memo {
	__u64 key;         /* DA << 32 | TEID, masked to plen, host order */
	__u32 gen;         /* cfg->policy_gen then */
	__u16 plen;        /* cfg->policy_plens[0] then */
	__u16 valid;
	struct mup_policy pol;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mup_policy_memo);
} mup_policy_memo SEC(".maps");

/* The same for local SIDs. A lookup's answer depends only on the
 * destination's first n_max bits, n_max the longest configured SID length
 * (every shorter one is a mask of those bits): the copy is keyed by those
 * bits, so that every packet to one SID hits, whatever Args.Mob.Session it
 * carries. */
struct mup_localsid_memo {
	struct u128 key;   /* the destination masked to plen */
	__u32 gen;         /* cfg->localsid_gen then */
	__u32 plen;        /* cfg->localsid_plens[0] then */
	__u32 valid;
	__u32 pad;
	struct mup_localsid ls;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mup_localsid_memo);
} mup_lsid_memo SEC(".maps");

/* The next-hop cache (fwd.h; its values in mup_shared.h). Sizes are defaults: user space sets
 * mup_nh_rules to one entry per rule and mup_nexthops to twice that plus
 * slot 0 (a slot is retired only after a grace period, so a change of every
 * next hop at once needs room for old and new). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 65536);
	__type(key, __u32);
	__type(value, __u32);
} mup_nh_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4 * 65536 + 1);
	__type(key, __u32);
	__type(value, struct mup_nexthop);
} mup_nexthops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mup_nh_lease);
} mup_nh_lease SEC(".maps");

/* What this CPU last found of the lease: in the jiffy `jiffies`, against
 * the value expires_ns, the lease ran (ok). Not pinned: a new program starts
 * with an empty one, which only means one clock read more. */
struct mup_nh_lease_seen {
	__u64 jiffies;
	__u64 expires_ns;
	__u64 ok;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mup_nh_lease_seen);
} mup_nh_lease_seen SEC(".maps");

/* End.M.GTP4.E: the last destination of each rule that did not find its
 * next hop in the cache, so user space can pick the route prefix the rule's
 * slot should name (its traffic tells where its gNBs are). Written on the
 * FIB path only, and only when it changes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 65536);
	__type(key, __u32);
	__type(value, __u32);
} mup_nh_hints SEC(".maps");

/* The latency probe (probe.h). */

/* Sized by user space before load (src/probe/dataplane.ts); a power of 2
 * pages. 1 MiB holds about 11,000 records. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} mup_probe_ring SEC(".maps");

/* Per CPU. The entry of the frame in flight is kept here, not on the
 * stack: an XDP program runs to its end on one CPU, and a value in a map
 * leaves the verifier's view of the stack the same whether probing is on or
 * off, so it verifies the translation once, not once per probe state. */
struct mup_probe_cpu {
	__u64 t0;           /* entry time of the frame in flight; 0: none */
	__u64 seen;         /* frames that matched the selector (for 1 in N) */
	__u64 last_exit_ns; /* exit time of the last recorded frame */
	__u64 ring_full;    /* records the ring had no room for */
	__u64 recorded;
	__u16 proto_in;     /* ethertype of the frame in flight, network order */
	__u16 len_in;       /* its IP length (IPv4 total length, IPv6 payload + 40), host order */
	__u16 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mup_probe_cpu);
} mup_probe_state SEC(".maps");

#endif
