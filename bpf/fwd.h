/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* What happens to a translated frame: TX back, redirect to the FIB's next
 * hop, or the kernel. The Ethernet header is already at data, with the new
 * ethertype; the MACs are still the received ones. */
#ifndef MUP_FWD_H
#define MUP_FWD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"
#include "counters.h"
#include "maps.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* The received MACs, in word-sized pieces: struct ethhdr is packed, and
 * copying it member by member costs a byte load and store per byte. */
struct eth_macs {
	__u32 dst_hi;
	__u16 dst_lo;
	__u32 src_hi;
	__u16 src_lo;
};

static __always_inline void eth_save(const void *eth, struct eth_macs *m)
{
	m->dst_hi = *(const __u32 *)eth;
	m->dst_lo = *(const __u16 *)(eth + 4);
	m->src_hi = *(const __u32 *)(eth + 6);
	m->src_lo = *(const __u16 *)(eth + 10);
}

/* Write the Ethernet header of a translated frame. In forwarding mode tx the
 * frame goes back where it came from, so the MACs are swapped here once;
 * mode fib overwrites them from the FIB result; mode kernel keeps them. */
static __always_inline void eth_write(const struct mup_config *cfg, void *eth, const struct eth_macs *m, __u16 proto)
{
	if (cfg->fwd_mode == MUP_FWD_TX) {
		*(__u32 *)eth = m->src_hi;
		*(__u16 *)(eth + 4) = m->src_lo;
		*(__u32 *)(eth + 6) = m->dst_hi;
		*(__u16 *)(eth + 10) = m->dst_lo;
	} else {
		*(__u32 *)eth = m->dst_hi;
		*(__u16 *)(eth + 4) = m->dst_lo;
		*(__u32 *)(eth + 6) = m->src_hi;
		*(__u16 *)(eth + 10) = m->src_lo;
	}
	*(__be16 *)(eth + 12) = bpf_htons(proto);
}

/* Forwarding modes tx and kernel: no lookup; eth_write did the MACs. */
static __always_inline int forward_local(const struct mup_config *cfg, __u32 bytes)
{
	if (cfg->fwd_mode == MUP_FWD_TX)
		return ev(MUP_EV_FWD_TX, bytes, XDP_TX);
	return ev(MUP_EV_FWD_KERNEL, bytes, XDP_PASS);
}

/* Forwarding mode fib, looked up before the frame changes: the caller
 * fills family, addresses, tot_len (of the packet it is about to write)
 * and tos/flowinfo. Returns the lookup's result; on
 * BPF_FIB_LKUP_RET_FRAG_NEEDED the egress MTU (interface or route) is in
 * fib->mtu_result, and the caller answers with mtu.h instead of
 * translating. */
static __always_inline long fib_lookup_early(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	fib->ifindex = ctx->ingress_ifindex;
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

/* The next-hop cache: its maps and the layouts of their values are in
 * maps.h and mup_shared.h. */

/* Does the lease run? The clock is read once per jiffy per CPU, or when user
 * space wrote a new lease: bpf_jiffies64 and the two array lookups are
 * inlined by the verifier, where a clock read is a helper call on every
 * packet (2-3 ns here, bench:micro). So the cache may be used up to one
 * jiffy (1-10 ms) past the lease's end; the lease is seconds long. */
static __always_inline int nh_lease_ok(void)
{
	__u32 k = 0;
	const struct mup_nh_lease *lease = bpf_map_lookup_elem(&mup_nh_lease, &k);
	struct mup_nh_lease_seen *seen = bpf_map_lookup_elem(&mup_nh_lease_seen, &k);
	__u64 j = bpf_jiffies64();
	__u64 expires;

	if (!lease || !seen)
		return 0;
	expires = lease->expires_ns;
	if (seen->jiffies != j || seen->expires_ns != expires) {
		seen->jiffies = j;
		seen->expires_ns = expires;
		seen->ok = bpf_ktime_get_coarse_ns() < expires;
	}
	return seen->ok;
}

/* The cached next hop of `rule` if it was resolved for exactly this
 * destination range (family, prefix d0..d3 in network order, plen), the
 * packet of tot_len bytes fits its MTU and the lease runs; else 0, and the
 * caller looks the destination up in the FIB. Array lookups are inlined by
 * the verifier, and so is the lease check but for its clock read once per
 * jiffy. */
static __always_inline const struct mup_nexthop *nh_cached(__u32 rule, __u8 family, const __u32 *d,
							   __u8 plen, __u32 tot_len)
{
	__u32 *slot = bpf_map_lookup_elem(&mup_nh_rules, &rule);
	const struct mup_nexthop *nh;

	if (!slot || !*slot)
		return 0;
	nh = bpf_map_lookup_elem(&mup_nexthops, slot);
	if (!nh || nh->family != family || nh->plen != plen || tot_len > nh->mtu)
		return 0;
	{
		const __u32 *w = (const __u32 *)nh->dst;

		if (w[0] != d[0] || w[1] != d[1] || w[2] != d[2] || w[3] != d[3])
			return 0;
	}
	if (!nh_lease_ok())
		return 0;
	return nh;
}

/* End.M.GTP4.E: the gNB address comes from the SID, so the rule's range is
 * all of IPv4, which one next hop never serves soundly (local addresses, a
 * connected subnet). Its slot names instead one route's prefix in which
 * every address has that next hop (no more specific or local route inside):
 * used when the packet's destination daddr (host order) lies in it. */
static __always_inline const struct mup_nexthop *nh_slot4(__u32 rule, __u32 daddr, __u32 tot_len)
{
	__u32 *slot = bpf_map_lookup_elem(&mup_nh_rules, &rule);
	const struct mup_nexthop *nh;
	__u32 plen, mask;

	if (!slot || !*slot)
		return 0;
	nh = bpf_map_lookup_elem(&mup_nexthops, slot);
	if (!nh || nh->family != AF_INET || tot_len > nh->mtu)
		return 0;
	plen = nh->plen;
	if (plen > 32)
		return 0;
	mask = plen ? ~0U << (32 - plen) : 0;
	if ((daddr & mask) != bpf_ntohl(*(const __u32 *)nh->dst))
		return 0;
	if (!nh_lease_ok())
		return 0;
	return nh;
}

static __always_inline const struct mup_nexthop *nh_cached4(__u32 rule, __u32 daddr, __u32 tot_len)
{
	const struct mup_nexthop *nh = nh_slot4(rule, daddr, tot_len);
	__u32 *hint;

	if (nh)
		return nh;
	hint = bpf_map_lookup_elem(&mup_nh_hints, &rule);
	if (hint && *hint != daddr)
		*hint = daddr;
	return 0;
}

/* The translated frame leaves by its cached next hop. */
static __always_inline int forward_nh(struct xdp_md *ctx, const struct mup_nexthop *nh, __u32 bytes)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 ifindex = nh->ifindex;

	if ((void *)(eth + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	__builtin_memcpy(eth->h_dest, nh->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, nh->smac, ETH_ALEN);
	mup_count(MUP_EV_FWD_CACHED, bytes);
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}

/* The translated frame leaves by the result of its lookup. */
static __always_inline int forward_fib_result(struct xdp_md *ctx, struct bpf_fib_lookup *fib,
					      long rc, __u32 bytes)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return ev(MUP_EV_FWD_FIB_MISS, bytes, XDP_PASS);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return ev(MUP_EV_FWD_FIB_FRAG, bytes, XDP_PASS); /* callers answer it before translating */
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return ev(MUP_EV_FWD_FIB_FAIL, bytes, XDP_PASS);

	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	if (fib->ifindex == ctx->ingress_ifindex)
		return ev(MUP_EV_FWD_TX, bytes, XDP_TX);
	/* Counted when handed over: a redirect that fails later in the
	 * kernel (a veth peer without an XDP program) shows only in the
	 * xdp:xdp_redirect_err tracepoint. */
	mup_count(MUP_EV_FWD_REDIRECT, bytes);
	return bpf_redirect(fib->ifindex, 0);
}

/* Forwarding mode fib, looked up after the translation (the caller fills
 * the lookup as for fib_lookup_early). */
static __always_inline int forward_fib(struct xdp_md *ctx, struct bpf_fib_lookup *fib,
				       __u32 bytes)
{
	return forward_fib_result(ctx, fib, fib_lookup_early(ctx, fib), bytes);
}

#endif
