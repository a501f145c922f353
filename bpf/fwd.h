/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* What happens to a translated frame: TX back, redirect to the FIB's next
 * hop, or the kernel. The Ethernet header is already at data, with the new
 * ethertype; the MACs are still the received ones. */
#ifndef MUP_FWD_H
#define MUP_FWD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "mup_shared.h"
#include "counters.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

static __always_inline void swap_macs(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];

	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

/* Forwarding modes tx and kernel: no lookup. */
static __always_inline int forward_local(struct xdp_md *ctx, __u32 bytes)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (mup_cfg.fwd_mode == MUP_FWD_TX) {
		swap_macs(eth);
		return ev(MUP_EV_FWD_TX, bytes, XDP_TX);
	}
	return ev(MUP_EV_FWD_KERNEL, bytes, XDP_PASS);
}

/* Forwarding mode fib. The caller fills family, addresses, tot_len and
 * tos/flowinfo. */
static __always_inline int forward_fib(struct xdp_md *ctx, struct bpf_fib_lookup *fib,
				       __u32 bytes)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	long rc;

	if ((void *)(eth + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);

	fib->ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return ev(MUP_EV_FWD_FIB_MISS, bytes, XDP_PASS);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return ev(MUP_EV_FWD_FIB_FAIL, bytes, XDP_PASS);

	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	if (fib->ifindex == ctx->ingress_ifindex)
		return ev(MUP_EV_FWD_TX, bytes, XDP_TX);
	mup_count(MUP_EV_FWD_REDIRECT, bytes);
	return bpf_redirect(fib->ifindex, 0);
}

#endif
