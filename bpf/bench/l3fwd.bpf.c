// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * XDP L3 forwarder: the RFC 2544 benchmark's L3FWD baseline (not part of
 * the data plane). IPv4 and IPv6: bpf_fib_lookup, TTL / hop limit
 * decrement, MACs from the FIB, bpf_redirect; no translation. What the
 * kernel must resolve (no neighbour, local, TTL 1) goes to the kernel.
 * Modelled on the kernel's samples/bpf/xdp_fwd_kern.c.
 *
 * l3fwd_pass is the XDP_PASS program the kernel baselines need on the
 * device under test's veths: a veth delivers an XDP_TX or redirected frame
 * only to a peer with an XDP program. l3fwd_drop on the DUT measures the
 * generator alone.
 */
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

SEC("xdp")
int l3fwd_xdp(struct xdp_md *ctx)
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

SEC("xdp")
int l3fwd_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* The generator's own cost: a device under test that drops everything. */
SEC("xdp")
int l3fwd_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
