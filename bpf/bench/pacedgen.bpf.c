// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Paced traffic generator for the RFC 2544 benchmark (not part of the data
 * plane). Like trafficgen.bpf.c (live-frame BPF_PROG_TEST_RUN, XDP_TX out of
 * ctx.ingress_ifindex into the veth of the device under test), but each
 * frame waits for its turn: frame k leaves no earlier than start + k *
 * interval, by spinning on bpf_ktime_get_ns() (bpf_loop, bounded). The
 * kernel flushes XDP_TX frames at the end of each batch (batch_size of the
 * run), so the device under test sees bursts of one batch, spaced to give
 * the offered rate: small bursts at a steady rate, instead of a whole call
 * at the generator's full speed (docs/bench.md, "RFC 2544").
 *
 * A frame that finds the pace more than slack behind (the generator was
 * preempted, or a run's set-up took time) restarts the pace from now
 * rather than sending a catch-up burst; it counts in `late`, and the trial
 * sees it as a lower achieved rate. Within slack it catches up: the
 * batches due go out one after the other (user space bounds slack to a
 * few batches, well under the DUT's 256-frame ring).
 *
 * Varies the inner UDP source port (flows) and, optionally, a big-endian
 * u32 (the GTP-U TEID: many sessions), one after the other per frame.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "rfc2544.h"

#define SPIN_MAX (1 << 16) /* iterations per frame: about a millisecond and a half */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pgen_cfg);
} pgen_cfg_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pgen_state);
} pgen_state_map SEC(".maps");

struct spin_ctx {
	__u64 until_ps;
};

static long spin_cb(__u64 i, void *arg)
{
	struct spin_ctx *c = arg;

	return bpf_ktime_get_ns() * 1000 >= c->until_ps ? 1 : 0;
}

SEC("xdp")
int pgen_xmit(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct pgen_cfg *c = bpf_map_lookup_elem(&pgen_cfg_map, &zero);
	struct pgen_state *st = bpf_map_lookup_elem(&pgen_state_map, &zero);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 *dst = data;
	const __u64 *src;
	__u32 off, v;

	if (!c || !st)
		return XDP_ABORTED;
	src = (const __u64 *)c->t.head;
#pragma unroll
	for (int i = 0; i < TGEN_HEAD_MAX / 8; i++) {
		if (i * 8 >= c->t.head_len)
			break;
		if ((void *)(dst + i + 1) > end)
			break;
		dst[i] = src[i];
	}
	off = c->t.sport_off & (TGEN_HEAD_MAX - 1);
	if (off && c->t.nflows) {
		__u8 *p = data + off;

		if ((void *)(p + 2) > end)
			return XDP_ABORTED;
		v = c->t.sport_base + (__u32)(st->seq % c->t.nflows);
		p[0] = v >> 8;
		p[1] = v & 0xff;
	}
	off = c->teid_off & (TGEN_HEAD_MAX - 1);
	if (off && c->nteids) {
		__u8 *p = data + off;

		if ((void *)(p + 4) > end)
			return XDP_ABORTED;
		v = c->teid_base + (__u32)(st->seq % c->nteids);
		p[0] = v >> 24;
		p[1] = (v >> 16) & 0xff;
		p[2] = (v >> 8) & 0xff;
		p[3] = v & 0xff;
	}
	if (c->interval_ps) {
		__u32 pb = c->pace_batch;

		/* With pace_batch, only the first frame of each kernel batch
		 * waits: the batch is flushed to the DUT at its end anyway, so
		 * spacing its frames changes nothing the DUT sees, and the clock
		 * reads (about 28 ns each on this VM) are paid once per batch. */
		if (!pb || st->seq % pb == 0) {
			__u64 now_ps = bpf_ktime_get_ns() * 1000;
			struct spin_ctx s;

			if (st->next_ps == 0 || now_ps > st->next_ps + c->slack_ps) {
				if (st->next_ps)
					st->late++;
				st->next_ps = now_ps;
			}
			if (st->next_ps > now_ps) {
				s.until_ps = st->next_ps;
				bpf_loop(SPIN_MAX, spin_cb, &s, 0);
				st->spun_ns += (bpf_ktime_get_ns() * 1000 - now_ps) / 1000;
			}
		}
		st->next_ps += c->interval_ps;
	}
	st->seq++;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
