// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Micro-benchmark harness for BPF_PROG_TEST_RUN (not part of the data plane).
 *
 * With repeat > 1 the kernel runs every iteration on the previous one's
 * output frame (docs/platform.md). bench_restore puts the original
 * frame back at the start of each iteration, then tail-calls the program
 * under test, so every iteration measures the real translation, not a miss.
 * Its own cost is measured as a row of its own (harness -> bench_tx_only).
 *
 * Restoring relies on the program under test not moving the frame's end:
 * the data end stays where the template's end was, so data = end - len.
 *
 * Optionally (vary_off != 0) each iteration then writes a different 32-bit
 * big-endian value at byte vary_off of the frame: the TEID, so that the
 * iterations spread over a whole table of (N3, TEID) policies instead of
 * repeating one key. Iteration c picks i = the top vary_bits bits of
 * c * 2654435761 (Knuth's multiplicative hash: consecutive c land far
 * apart), split into group g = i >> vary_gbits and index j below it; the
 * value is vary_base[g] | j << vary_shift[g] (a group per TEID prefix
 * length).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "../mup_shared.h"

#define BENCH_RESTORE_MAX 128 /* header bytes a translation may rewrite */

struct bench_tmpl {
	__u32 len;          /* template frame length */
	__u32 restore_len;  /* bytes copied back each iteration, <= 128, multiple of 8 */
	__u8  head[BENCH_RESTORE_MAX];
	__u32 vary_off;     /* 0: the frame as it is */
	__u32 vary_bits;    /* 1..31 */
	__u32 vary_gbits;   /* bits of j, < vary_bits; 2^(vary_bits - vary_gbits) <= 8 groups */
	__u32 vary_ctr;     /* iterations so far */
	__u32 vary_base[8];
	__u8  vary_shift[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_tmpl);
} bench_tmpl_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_target SEC(".maps");

SEC("xdp")
int bench_restore(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct bench_tmpl *t = bpf_map_lookup_elem(&bench_tmpl_map, &zero);
	void *data, *end;
	long len;
	__u64 *dst;
	const __u64 *src;

	if (!t)
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	/* Always one adjust_head call, so every row pays the same. The frame
	 * length is taken as a 64-bit difference: with -mcpu=v3 clang would
	 * otherwise fold it into 32-bit arithmetic on the packet pointers,
	 * which the verifier refuses. */
	len = end - data;
	asm volatile("" : "+r"(len));
	if (bpf_xdp_adjust_head(ctx, (int)len - (int)t->len))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	dst = data;
	src = (const __u64 *)t->head;
#pragma unroll
	for (int i = 0; i < BENCH_RESTORE_MAX / 8; i++) {
		if (i * 8 >= t->restore_len)
			break;
		if ((void *)(dst + i + 1) > end)
			break;
		dst[i] = src[i];
	}
	if (t->vary_off) {
		__u32 c = t->vary_ctr++;
		__u32 i = (c * 2654435761U) >> ((32 - t->vary_bits) & 31);
		__u32 gb = t->vary_gbits & 31;
		__u32 g = (i >> gb) & 7;
		__u32 v = t->vary_base[g] | (i & ((1U << gb) - 1)) << (t->vary_shift[g] & 31);
		__u8 *p = data + (t->vary_off & 0x7f);

		if ((void *)(p + 4) > end)
			return XDP_ABORTED;
		p[0] = v >> 24;
		p[1] = v >> 16;
		p[2] = v >> 8;
		p[3] = v;
	}
	bpf_tail_call(ctx, &bench_target, 0);
	return XDP_ABORTED;
}

/* Baseline 1: the cheapest program that sends a frame. */
SEC("xdp")
int bench_tx_only(struct xdp_md *ctx)
{
	return XDP_TX;
}

/* Baseline 2: what the simplest real forwarder does. */
SEC("xdp")
int bench_macswap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 tmp[ETH_ALEN];

	if ((void *)(eth + 1) > end)
		return XDP_ABORTED;
	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
	return XDP_TX;
}

/* The cold-lookup floor (bench:micro --cold-floor): ONE hash lookup in a
 * table of the data plane's policy shape (key struct mup_policy_key, value
 * struct mup_policy, BPF_MAP_TYPE_HASH, preallocated), keyed by the frame's
 * IPv4 destination and GTP-U TEID at /64, then XDP_TX if found (XDP_DROP
 * if not, so a run whose keys miss the table shows in its verdict and in
 * bench_hits). With the harness spreading the TEID over the whole table
 * every lookup goes to memory (bucket, element, and their page-table walks);
 * repeating one TEID it stays in the caches. The translator's TEID-spread
 * row pays this once per prefix length it tries. max_entries is set by user
 * space before load (1 by default: the rows that do not use it pay nothing). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct mup_policy_key);
	__type(value, struct mup_policy);
} bench_htab SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} bench_hits SEC(".maps");

#define BENCH_DADDR_OFF (14 + 16)         /* IPv4 destination (IHL 5) */
#define BENCH_TEID_OFF (14 + 20 + 8 + 4)  /* GTP-U TEID */

SEC("xdp")
int bench_lookup(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct mup_policy_key key = { .plen = 64 };
	__u32 zero = 0;
	__u64 *hits;

	if (data + BENCH_TEID_OFF + 4 > end)
		return XDP_ABORTED;
	__builtin_memcpy(&key.daddr, data + BENCH_DADDR_OFF, 4);
	__builtin_memcpy(&key.teid, data + BENCH_TEID_OFF, 4);
	if (!bpf_map_lookup_elem(&bench_htab, &key))
		return XDP_DROP;
	hits = bpf_map_lookup_elem(&bench_hits, &zero);
	if (hits)
		*hits += 1;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
