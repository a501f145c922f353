/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The inner 5-tuple hash behind the IPv6 flow label (H.M.GTP4.D) and the
 * outer UDP source port (End.M.GTP4.E): murmur3_32 over 32-bit words, see
 * docs/datapath.md. Reads the inner IP header and the first 4 bytes of L4
 * only, so its cost does not depend on the packet's length. */
#ifndef MUP_HASH_H
#define MUP_HASH_H

#include <linux/types.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"

static __always_inline __u32 rotl32(__u32 x, __u32 r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 mm3_word(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = rotl32(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = rotl32(h, 13);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 mm3_final(__u32 h, __u32 nwords)
{
	h ^= nwords * 4;
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline int l4_has_ports(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

/* Inner IPv4 at ip, inner_len bytes long (already checked >= 20 and in the
 * frame). */
static __always_inline __u32 hash_inner4(const struct iphdr *ip, __u32 inner_len,
					 const void *end, __u32 seed)
{
	__u32 h = seed, ports = 0;
	__u32 ihl = ip->ihl * 4;

	h = mm3_word(h, bpf_ntohl(ip->saddr));
	h = mm3_word(h, bpf_ntohl(ip->daddr));
	h = mm3_word(h, ip->protocol);
	if (l4_has_ports(ip->protocol) && !(ip->frag_off & bpf_htons(0x3fff)) &&
	    ihl >= 20 && ihl + 4 <= inner_len) {
		const __u32 *l4 = (const void *)ip + ihl;

		if ((const void *)(l4 + 1) <= end)
			ports = bpf_ntohl(*l4);
	}
	h = mm3_word(h, ports);
	return mm3_final(h, 4);
}

/* Inner IPv6 at ip6 (checked >= 40 bytes and in the frame). */
static __always_inline __u32 hash_inner6(const struct ipv6hdr *ip6, __u32 inner_len,
					 const void *end, __u32 seed)
{
	const __u32 *a = (const __u32 *)&ip6->saddr; /* saddr then daddr */
	__u32 h = seed, ports = 0;

#pragma unroll
	for (int i = 0; i < 8; i++)
		h = mm3_word(h, bpf_ntohl(a[i]));
	h = mm3_word(h, ip6->nexthdr);
	if (l4_has_ports(ip6->nexthdr) && inner_len >= 44) {
		const __u32 *l4 = (const void *)(ip6 + 1);

		if ((const void *)(l4 + 1) <= end)
			ports = bpf_ntohl(*l4);
	}
	h = mm3_word(h, ports);
	return mm3_final(h, 10);
}

/* The inner packet of either translation: inner_len bytes at inner. Checks
 * it is IPv4 or IPv6 (the version nibble; `want` 4 or 6 when the outer
 * header already named it, 0 when not) with a whole fixed header, and
 * hashes it. Returns 0 with *h and *nh (IPPROTO_IPIP or IPPROTO_IPV6) set,
 * or a drop event. */
static __always_inline int hash_inner(__u8 *inner, __u32 inner_len, void *end, __u32 want,
				      __u32 seed, __u32 *h, __u8 *nh)
{
	__u32 ver;

	if ((void *)(inner + 1) > end || inner_len < 1)
		return MUP_EV_DROP_INNER_TRUNCATED;
	ver = inner[0] >> 4;
	if ((ver != 4 && ver != 6) || (want && ver != want))
		return MUP_EV_DROP_INNER_NOT_IP;
	if (ver == 4) {
		struct iphdr *in4 = (void *)inner;

		if ((void *)(in4 + 1) > end || inner_len < sizeof(*in4))
			return MUP_EV_DROP_INNER_TRUNCATED;
		*h = hash_inner4(in4, inner_len, end, seed);
		*nh = IPPROTO_IPIP;
	} else {
		struct ipv6hdr *in6 = (void *)inner;

		if ((void *)(in6 + 1) > end || inner_len < sizeof(*in6))
			return MUP_EV_DROP_INNER_TRUNCATED;
		*h = hash_inner6(in6, inner_len, end, seed);
		*nh = IPPROTO_IPV6;
	}
	return 0;
}

#endif
