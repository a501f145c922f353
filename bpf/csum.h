/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* IPv4 header checksum from the header's own fields, in registers: cheaper
 * than bpf_csum_diff (a helper call) for the 20 bytes we write. */
#ifndef MUP_CSUM_H
#define MUP_CSUM_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

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
