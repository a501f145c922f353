// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Helpers of the RFC 2544 benchmark on the device under test (not part of
 * the data plane):
 *
 * - slow_l3fwd: the XDP L3 forwarder that first spins for spin_ns
 *   (bpf_ktime_get_ns in a bounded bpf_loop): a DUT of known, adjustable
 *   cost, slower than any generator here, so that a test can show the
 *   benchmark's search seeing loss and converging below the top rate.
 * - burst_meter: drops every frame and records, per CPU, the runs of frames
 *   that reach the DUT's XDP closer together than gap_ns: the bursts the
 *   device under test sees from the generator (log2 histogram).
 */
#include "l3fwd.h"
#include "rfc2544.h"

struct aux_cfg {
	__u64 spin_ns;
	__u64 gap_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct aux_cfg);
} aux_cfg_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct burst_state);
} burst_map SEC(".maps");

static long spin_cb(__u64 i, void *arg)
{
	return bpf_ktime_get_ns() >= *(__u64 *)arg ? 1 : 0;
}

SEC("xdp")
int slow_l3fwd(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct aux_cfg *c = bpf_map_lookup_elem(&aux_cfg_map, &zero);
	__u64 until;

	if (c && c->spin_ns) {
		until = bpf_ktime_get_ns() + c->spin_ns;
		bpf_loop(1 << 16, spin_cb, &until, 0);
	}
	return l3fwd(ctx);
}

static __always_inline void burst_end(struct burst_state *s)
{
	__u64 r = s->run;
	__u32 b = 0;

#pragma unroll
	for (int i = 1; i < BURST_BUCKETS; i++)
		if (r >= (1ULL << i))
			b = i;
	if (r)
		s->hist[b & (BURST_BUCKETS - 1)]++;
	s->run = 0;
}

SEC("xdp")
int burst_meter(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct aux_cfg *c = bpf_map_lookup_elem(&aux_cfg_map, &zero);
	struct burst_state *s = bpf_map_lookup_elem(&burst_map, &zero);
	__u64 now = bpf_ktime_get_ns();

	if (!c || !s)
		return XDP_DROP;
	if (s->last_ns && now - s->last_ns >= c->gap_ns)
		burst_end(s);
	s->run++;
	s->frames++;
	s->last_ns = now;
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
