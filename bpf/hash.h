/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The inner 5-tuple hash behind the IPv6 flow label (H.M.GTP4.D) and the
 * outer UDP source port (End.M.GTP4.E): multilinear multiply-shift over 32-bit
 * words, see docs/datapath.md. Reads the inner IP header and the first 4 bytes of L4
 * only, so its cost does not depend on the packet's length. */
#ifndef MUP_HASH_H
#define MUP_HASH_H

#include <linux/types.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"

/* Multilinear multiply-shift (Dietzfelbinger; Lemire & Kaser, "Strongly
 * universal string hashing is fast"): each 32-bit word, xored with the
 * seed, times its own odd 64-bit constant, summed mod 2^64; the top 32 bits,
 * mixed once more (xorshift, multiply, xorshift: murmur3's finaliser without
 * its last round) so that the flow label's low bits see every input bit. The
 * products do not depend on one another, so they run in parallel, where
 * murmur3 chains 11 multiplies one after the other (docs/datapath.md). */
#define MH_K0 0x9e3779b97f4a7c15ULL
#define MH_K1 0xc2b2ae3d27d4eb4fULL
#define MH_K2 0x165667b19e3779f9ULL
#define MH_K3 0xd6e8feb86659fd93ULL
#define MH_K4 0xff51afd7ed558ccdULL
#define MH_K5 0xc4ceb9fe1a85ec53ULL
#define MH_K6 0x27d4eb2f165667c5ULL
#define MH_K7 0x85ebca77c2b2ae63ULL
#define MH_K8 0x94d049bb133111ebULL
#define MH_K9 0xbf58476d1ce4e5b9ULL

static __always_inline __u64 mh_word(__u32 w, __u32 seed, __u64 k)
{
	return (__u64)(w ^ seed) * k;
}

static __always_inline __u32 mh_final(__u64 sum)
{
	__u32 h = sum >> 32;

	h ^= h >> 16;
	h *= 0x85ebca6b;
	return h ^ (h >> 13);
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
	__u32 ports = 0;
	__u32 ihl = ip->ihl * 4;

	if (l4_has_ports(ip->protocol) && !(ip->frag_off & bpf_htons(0x3fff)) &&
	    ihl >= 20 && ihl + 4 <= inner_len) {
		const __u32 *l4 = (const void *)ip + ihl;

		if ((const void *)(l4 + 1) <= end)
			ports = bpf_ntohl(*l4);
	}
	return mh_final(mh_word(bpf_ntohl(ip->saddr), seed, MH_K0) + mh_word(bpf_ntohl(ip->daddr), seed, MH_K1) +
			mh_word(ip->protocol, seed, MH_K2) + mh_word(ports, seed, MH_K3));
}

/* Inner IPv6 at ip6 (checked >= 40 bytes and in the frame). */
static __always_inline __u32 hash_inner6(const struct ipv6hdr *ip6, __u32 inner_len,
					 const void *end, __u32 seed)
{
	const __u32 *a = (const __u32 *)&ip6->saddr; /* saddr then daddr */
	__u32 ports = 0;
	__u64 sum;

	sum = mh_word(bpf_ntohl(a[0]), seed, MH_K0) + mh_word(bpf_ntohl(a[1]), seed, MH_K1) +
	      mh_word(bpf_ntohl(a[2]), seed, MH_K2) + mh_word(bpf_ntohl(a[3]), seed, MH_K3) +
	      mh_word(bpf_ntohl(a[4]), seed, MH_K4) + mh_word(bpf_ntohl(a[5]), seed, MH_K5) +
	      mh_word(bpf_ntohl(a[6]), seed, MH_K6) + mh_word(bpf_ntohl(a[7]), seed, MH_K7) +
	      mh_word(ip6->nexthdr, seed, MH_K8);
	if (l4_has_ports(ip6->nexthdr) && inner_len >= 44) {
		const __u32 *l4 = (const void *)(ip6 + 1);

		if ((const void *)(l4 + 1) <= end)
			ports = bpf_ntohl(*l4);
	}
	return mh_final(sum + mh_word(ports, seed, MH_K9));
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
