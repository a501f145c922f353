/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* IPv4 header checksum from the header's own fields, in registers: cheaper
 * than bpf_csum_diff (a helper call) for the 20 bytes we write. */
#ifndef MUP_CSUM_H
#define MUP_CSUM_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

static __always_inline __u16 csum_fold32(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Sum of the 16-bit words (host order values of the big-endian words) of an
 * IPv4 header with IHL 5, ID 0, checksum 0. Returns the checksum in host
 * order; store it with bpf_htons. */
static __always_inline __u16 ipv4_csum(__u8 tos, __u16 tot_len, __u16 frag,
				       __u8 ttl, __u8 proto, __u32 saddr, __u32 daddr)
{
	__u32 s = (0x4500 | tos) + tot_len + frag + ((__u32)ttl << 8 | proto) +
		  (saddr >> 16) + (saddr & 0xffff) + (daddr >> 16) + (daddr & 0xffff);

	return csum_fold32(s);
}

/* The most csum_to_end sums with `blocks` 512-byte blocks. */
#define CSUM_MAX_BYTES(blocks) ((blocks) * 512 + 511)

/* Ones-complement sum of the packet bytes [p, end), at most
 * CSUM_MAX_BYTES(blocks) of them (the caller checks), added to sum (a 32-bit
 * partial sum in memory order, as bpf_csum_diff keeps it). Used for the UDP
 * checksum over IPv6, which is mandatory there (RFC 8200 §8.1), and for the
 * ICMP errors: unlike everything else on the fast path its cost grows with
 * the packet, a helper call per 512 bytes and one per remaining power of
 * two. */
static __always_inline __u32 csum_to_end(__u8 *p, void *end, __u32 sum, const int blocks)
{
	for (int i = 0; i < blocks; i++) {
		if ((void *)(p + 512) > end)
			break;
		sum = bpf_csum_diff(0, 0, (void *)p, 512, sum);
		p += 512;
	}
#define CSUM_STEP(n)							\
	if ((void *)(p + (n)) <= end) {					\
		sum = bpf_csum_diff(0, 0, (void *)p, (n), sum);		\
		p += (n);						\
	}
	CSUM_STEP(256)
	CSUM_STEP(128)
	CSUM_STEP(64)
	CSUM_STEP(32)
	CSUM_STEP(16)
	CSUM_STEP(8)
	CSUM_STEP(4)
#undef CSUM_STEP
	{
		/* 0..3 bytes left: add them as the memory-order words they
		 * start, zero-padded (little-endian host). */
		__u64 s = sum;

		if ((void *)(p + 2) <= end) {
			s += *(__u16 *)p;
			p += 2;
		}
		if ((void *)(p + 1) <= end)
			s += *p;
		s = (s & 0xffffffff) + (s >> 32);
		s = (s & 0xffffffff) + (s >> 32);
		return (__u32)s;
	}
}

/* A 64-bit sum of 32-bit memory-order words, folded to a 32-bit partial sum. */
static __always_inline __u32 csum_fold64(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	return (__u32)s;
}

/* The ones-complement sum of an inner packet, derived from its own
 * checksums instead of read whole (docs/datapath.md, "UDP checksum of
 * End.M.GTP6.E"): a TCP, UDP or ICMPv6 checksum that verifies makes
 * pseudo header + segment sum to zero (-0), so sum(segment) = -sum(pseudo
 * header); an ICMPv4 one makes sum(message) = -0. The IP header is summed
 * from its bytes (20 or 40, in registers). What this returns equals the sum
 * of the bytes, modulo 0xffff, whenever the inner L4 checksum is right;
 * when it is wrong, the outer checksum is wrong by the same amount.
 *
 * Applies when: inner IPv4 with IHL 5, total length = len, not a fragment
 * (MF clear, offset 0), protocol TCP (>= 20 bytes), UDP (>= 8 bytes, UDP
 * length = the segment, checksum not 0) or ICMP (>= 8 bytes); or inner
 * IPv6 with payload length + 40 = len and next header TCP, UDP (as for
 * IPv4) or ICMPv6 (>= 8 bytes), no extension header; and, for TCP, UDP and
 * ICMPv6, a checksum field that is not the folded pseudo-header sum, which
 * is what a sender's checksum offload (CHECKSUM_PARTIAL) leaves there to be
 * completed. Otherwise it returns -1 and the caller sums the bytes.
 *
 * inner: len bytes, in the frame (the caller checked len against the
 * frame, and at least the fixed IP header against end). *sum: 32-bit
 * partial sum in memory order, as bpf_csum_diff keeps it. */
static __always_inline int csum_inner_derived(const __u8 *inner, const void *end, __u32 len, __u32 *sum)
{
	const __u32 *w = (const void *)inner;
	const __u8 *l4;
	__u64 s, ps;
	__u32 l4len, pf;
	__u16 c;
	__u8 proto;

	if ((const void *)(inner + 1) > end)
		return -1;
	if ((inner[0] >> 4) == 4) {
		const struct iphdr *ip = (const void *)inner;

		if ((const void *)(ip + 1) > end || inner[0] != 0x45 || len < sizeof(*ip) ||
		    bpf_ntohs(ip->tot_len) != len || (ip->frag_off & bpf_htons(0x3fff)))
			return -1;
		s = (__u64)w[0] + w[1] + w[2] + w[3] + w[4];
		ps = (__u64)w[3] + w[4];
		proto = ip->protocol;
		l4 = inner + sizeof(*ip);
		l4len = len - sizeof(*ip);
		if (proto == IPPROTO_ICMP) {
			if (l4len < 8)
				return -1;
			*sum = csum_fold64(s); /* + sum(message) = -0 */
			return 0;
		}
		if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
			return -1;
	} else {
		const struct ipv6hdr *ip6 = (const void *)inner;

		if ((const void *)(ip6 + 1) > end || len < sizeof(*ip6) ||
		    bpf_ntohs(ip6->payload_len) + sizeof(*ip6) != len)
			return -1;
		s = (__u64)w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + w[6] + w[7] + w[8] + w[9];
		ps = (__u64)w[2] + w[3] + w[4] + w[5] + w[6] + w[7] + w[8] + w[9];
		proto = ip6->nexthdr;
		l4 = inner + sizeof(*ip6);
		l4len = len - sizeof(*ip6);
		if (proto != IPPROTO_ICMPV6 && proto != IPPROTO_TCP && proto != IPPROTO_UDP)
			return -1;
	}
	if (proto == IPPROTO_TCP) {
		if (l4len < 20 || (const void *)(l4 + 20) > end)
			return -1;
		c = *(const __u16 *)(l4 + 16);
	} else if (proto == IPPROTO_UDP) {
		if (l4len < 8 || (const void *)(l4 + 8) > end)
			return -1;
		if (*(const __be16 *)(l4 + 4) != bpf_htons(l4len))
			return -1;
		c = *(const __u16 *)(l4 + 6);
		if (!c)
			return -1; /* no checksum: nothing to derive from */
	} else { /* ICMPv6, over IPv6 only */
		if (l4len < 8 || (const void *)(l4 + 8) > end)
			return -1;
		c = *(const __u16 *)(l4 + 2);
	}
	/* Pseudo header: the addresses, then the L4 length and the protocol
	 * as the low halves of their fields (memory order). */
	ps += bpf_htons((__u16)l4len) + bpf_htons((__u16)proto);
	ps = (ps & 0xffff) + ((ps >> 16) & 0xffff) + ((ps >> 32) & 0xffff) + (ps >> 48);
	ps = (ps & 0xffff) + (ps >> 16);
	pf = (ps & 0xffff) + (ps >> 16); /* 1..0xffff: the sum is not 0 */
	if (c == pf)
		return -1; /* checksum offload's pseudo-header sum, not a checksum */
	*sum = csum_fold64(s + (0xffff - pf));
	return 0;
}

/* Fold a 32-bit partial sum in memory order into the checksum field value
 * (store it without byte swapping). UDP sends 0 as 0xffff. */
static __always_inline __u16 csum_fold_udp(__u32 s)
{
	__u16 c;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	c = (__u16)~s;
	return c ? c : 0xffff;
}

#endif
