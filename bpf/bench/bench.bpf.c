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
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

#define BENCH_RESTORE_MAX 128 /* header bytes a translation may rewrite */

struct bench_tmpl {
	__u32 len;          /* template frame length */
	__u32 restore_len;  /* bytes copied back each iteration, <= 128, multiple of 8 */
	__u8  head[BENCH_RESTORE_MAX];
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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
