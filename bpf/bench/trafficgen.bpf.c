// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Traffic generator for the RFC 2544 benchmark (not part of the data plane).
 *
 * Run with BPF_PROG_TEST_RUN in live-frame mode (BPF_F_TEST_XDP_LIVE_FRAMES,
 * repeat = frames to send): every run returns XDP_TX, which the kernel turns
 * into a real frame leaving ctx.ingress_ifindex (a veth into the device
 * under test).
 *
 * The kernel initialises only fresh pages from data_in; pages recycled from
 * earlier batches hold whatever the devices downstream wrote into them
 * (docs/platform.md). So every run rewrites the frame's head from the
 * template, then sets the inner source port of this frame: one flow after
 * the other, nflows of them, so that hashes (flow label, UDP source port,
 * ECMP) see many flows. Inner UDP checksums are 0 (IPv4), so no fix-up.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "rfc2544.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tgen_tmpl);
} tgen_tmpl_map SEC(".maps");

/* Per-CPU frame sequence: picks the flow and counts what was sent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tgen_seq SEC(".maps");

SEC("xdp")
int tgen_xmit(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct tgen_tmpl *t = bpf_map_lookup_elem(&tgen_tmpl_map, &zero);
	__u64 *seq = bpf_map_lookup_elem(&tgen_seq, &zero);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 *dst = data;
	const __u64 *src;
	__u32 off, port;

	if (!t || !seq)
		return XDP_ABORTED;
	src = (const __u64 *)t->head;
#pragma unroll
	for (int i = 0; i < TGEN_HEAD_MAX / 8; i++) {
		if (i * 8 >= t->head_len)
			break;
		if ((void *)(dst + i + 1) > end)
			break;
		dst[i] = src[i];
	}
	off = t->sport_off & (TGEN_HEAD_MAX - 1);
	if (off && t->nflows) {
		__u8 *p = data + off;

		if ((void *)(p + 2) > end)
			return XDP_ABORTED;
		port = t->sport_base + (__u32)(*seq % t->nflows);
		p[0] = port >> 8;
		p[1] = port & 0xff;
	}
	*seq += 1;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
