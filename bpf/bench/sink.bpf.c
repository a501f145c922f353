// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Counting sink for the RFC 2544 benchmark (not part of the data plane).
 *
 * Attached to the veths where the device under test's output arrives.
 * Checks one frame in 2^sample (default every frame) against the expected
 * output (big-endian words at fixed offsets: ethertype, next header, SID
 * prefix, TEID, TTL), then drops it. A frame that passes (or is not
 * sampled) counts in `frames` and `bytes` of the receiving interface's
 * slot; one that fails counts in `bad` (a wrong translation, or the lab's
 * own chatter such as an IPv6 multicast report, which must not pass for a
 * received test frame). A frame on an interface without a configuration
 * counts as unknown: nothing arrives unaccounted for.
 *
 * The latency probe's frames are the exception: a frame that carries the
 * configured word at pass_off (the probe payload's magic) is counted in
 * `passed`, not checked or sampled, and passed to the stack, so that the
 * probe's packet socket on the same interface captures it.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "rfc2544.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct sink_cfg);
} sink_cfg_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SINK_SLOTS);
	__type(key, __u32);
	__type(value, struct sink_counters);
} sink_counters_map SEC(".maps");

static __always_inline __u32 be32_at(const __u8 *p)
{
	return ((__u32)p[0] << 24) | ((__u32)p[1] << 16) | ((__u32)p[2] << 8) | p[3];
}

SEC("xdp")
int sink_count(struct xdp_md *ctx)
{
	__u32 ifindex = ctx->ingress_ifindex;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = (__u32)(end - data);
	struct sink_cfg *cfg = bpf_map_lookup_elem(&sink_cfg_map, &ifindex);
	struct sink_counters *c;
	__u32 slot = 0;

	if (cfg)
		slot = cfg->slot;
	c = bpf_map_lookup_elem(&sink_counters_map, &slot);
	if (!c)
		return XDP_DROP;
	if (!cfg) {
		c->unknown++;
		return XDP_DROP;
	}
	if (cfg->pass_off) {
		const __u8 *p = data + (cfg->pass_off & 0xff);

		if ((void *)(p + 4) <= end && be32_at(p) == cfg->pass_value) {
			c->passed++;
			return XDP_PASS;
		}
	}
	if ((c->seen++ & ((1ULL << (cfg->sample & 31)) - 1)) != 0)
		goto good; /* not sampled */
	c->checked++;
	if (len < cfg->min_len)
		goto bad;
#pragma unroll
	for (int i = 0; i < SINK_CHECKS; i++) {
		const __u8 *p;

		if (i >= cfg->nchecks)
			break;
		p = data + (cfg->checks[i].off & 0xff);
		if ((void *)(p + 4) > end || (be32_at(p) & cfg->checks[i].mask) != cfg->checks[i].value)
			goto bad;
	}
good:
	c->frames++;
	c->bytes += len;
	return XDP_DROP;
bad:
	c->bad++;
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
