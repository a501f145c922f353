/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The XDP L3 forwarder of l3fwd.bpf.c as an inline function, shared with
 * the deliberately slow device under test of dutaux.bpf.c. */
#ifndef MUP_BENCH_L3FWD_H
#define MUP_BENCH_L3FWD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define AF_INET6 10

/* Incremental checksum update for TTL - 1 (RFC 1624), as ip_decrease_ttl. */
static __always_inline void ipv4_ttl_dec(struct iphdr *ip)
{
	__u32 check = (__u32)ip->check;

	check += (__u32)bpf_htons(0x0100);
	ip->check = (__sum16)(check + (check >= 0xFFFF));
	ip->ttl--;
}

static __always_inline int l3fwd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct bpf_fib_lookup fib = {};
	struct iphdr *ip4 = 0;
	struct ipv6hdr *ip6 = 0;
	long rc;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		ip4 = (void *)(eth + 1);
		if ((void *)(ip4 + 1) > end || ip4->ttl <= 1)
			return XDP_PASS;
		fib.family = AF_INET;
		fib.tos = ip4->tos;
		fib.l4_protocol = ip4->protocol;
		fib.tot_len = bpf_ntohs(ip4->tot_len);
		fib.ipv4_src = ip4->saddr;
		fib.ipv4_dst = ip4->daddr;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end || ip6->hop_limit <= 1)
			return XDP_PASS;
		fib.family = AF_INET6;
		fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0FFFFFFF);
		fib.l4_protocol = ip6->nexthdr;
		fib.tot_len = bpf_ntohs(ip6->payload_len);
		__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
	} else {
		return XDP_PASS;
	}
	fib.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	if (ip4)
		ipv4_ttl_dec(ip4);
	else if (ip6)
		ip6->hop_limit--;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return bpf_redirect(fib.ifindex, 0);
}

#endif
