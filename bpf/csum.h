/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* IPv4 header checksum from the header's own fields, in registers: cheaper
 * than bpf_csum_diff (a helper call) for the 20 bytes we write. */
#ifndef MUP_CSUM_H
#define MUP_CSUM_H

#include <linux/types.h>

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

#endif
