/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Segment Routing Header (RFC 8754): writing the one H.M.GTP4.D and
 * H.M.Session.Encaps push, and
 * walking the IPv6 extension headers End.M.GTP4.E accepts. */
#ifndef MUP_SRH_H
#define MUP_SRH_H

#include <linux/types.h>
#include <linux/in6.h>
#include "mup_shared.h"
#include "addr.h"

#define SRH_ROUTING_TYPE 4
#define V6_MAX_EXT       4

struct srh_hdr {
	__u8   nexthdr;
	__u8   hdrlen;        /* 8-byte units after the first 8 */
	__u8   type;          /* 4 */
	__u8   segments_left;
	__u8   last_entry;
	__u8   flags;
	__be16 tag;
};

/* entries = segment list length (1..MUP_MAX_SEGS + 1). List[0] is the last
 * SID B; then Sk .. S1 (S2 with reduced encapsulation) of segs, the k
 * segments S1..Sk of a policy or a session in path order. Segments Left is
 * k either way: the DA holds S1. Returns 0, or -1 if the frame is short. */
static __always_inline int srh_write(void *at, void *end, const __u8 (*segs)[16], __u32 k,
				     struct u128 last_sid, __u8 inner_nh, __u32 entries)
{
	struct srh_hdr *srh = at;
	__u8 (*list)[16] = (void *)(srh + 1);

	if ((void *)(srh + 1) > end || (void *)(list + 1) > end)
		return -1;
	srh->nexthdr = inner_nh;
	srh->hdrlen = 2 * entries;
	srh->type = SRH_ROUTING_TYPE;
	srh->segments_left = k;
	srh->last_entry = entries - 1;
	srh->flags = 0;
	srh->tag = 0;
	u128_store(list[0], last_sid);

	for (__u32 j = 1; j <= MUP_MAX_SEGS; j++) {
		if (j >= entries)
			break;
		if ((void *)(list + j + 1) > end)
			return -1;
		__builtin_memcpy(list[j], segs[(k - j) & (MUP_MAX_SEGS - 1)], 16);
	}
	return 0;
}

/* What the local SID functions learn from the headers after the fixed IPv6
 * header. */
struct v6_chain {
	__u32 len;   /* bytes of extension headers */
	__u32 srh;   /* offset of the SRH after the fixed header, V6_NO_SRH if none */
	__u8  inner; /* the first next header that is not one of them */
};

#define V6_NO_SRH 0xffff

/* Walk Hop-by-Hop, Destination Options and the SRH, checking each against
 * both the frame and the payload length. Stops at the first other header
 * (the caller decides whether it is an inner packet). An SRH must have
 * Segments Left == want_sl (0: End.M.GTP4.E, End.M.GTP6.D; 1: End.M.GTP6.E);
 * a routing header of another type is skipped when its Segments Left is 0
 * (as if absent), else dropped (docs/datapath.md, "Unknown routing types").
 * Returns 0 or a drop event. */
static __always_inline int v6_walk(struct ipv6hdr *ip6, void *end, __u32 payload_len,
				   __u32 want_sl, struct v6_chain *c)
{
	__u8 nh = ip6->nexthdr;
	__u32 off = 0;

	c->srh = V6_NO_SRH;

#pragma unroll
	for (int i = 0; i <= V6_MAX_EXT; i++) {
		__u8 *p;
		__u32 len;

		if (nh != IPPROTO_HOPOPTS && nh != IPPROTO_DSTOPTS && nh != IPPROTO_ROUTING) {
			/* The callers mask the chain's length with 0x1fff for the
			 * verifier: four headers of 2,048 bytes (8,192) would read
			 * the header after them at offset 0 (found in review). */
			if (off > 0x1fff)
				return MUP_EV_DROP_V6_BAD_EXT;
			c->len = off;
			c->inner = nh;
			return 0;
		}
		if (i == V6_MAX_EXT)
			return MUP_EV_DROP_V6_BAD_EXT;
		if (nh == IPPROTO_HOPOPTS && i)
			return MUP_EV_DROP_V6_BAD_EXT; /* only right after the header */
		p = (__u8 *)(ip6 + 1) + (off & 0x1fff);
		if ((void *)(p + 8) > end || off + 8 > payload_len)
			return MUP_EV_DROP_V6_TRUNCATED;
		len = ((__u32)p[1] + 1) * 8;
		if (off + len > payload_len)
			return MUP_EV_DROP_V6_TRUNCATED;
		if (nh == IPPROTO_ROUTING) {
			struct srh_hdr *srh = (void *)p;

			if (srh->type != SRH_ROUTING_TYPE) {
				/* RFC 8200 §4.4 (RFC 5095 §3 for type 0): an
				 * unrecognised type with Segments Left 0 is
				 * ignored, the next header processed; with
				 * segments left the packet is discarded. */
				if (srh->segments_left)
					return MUP_EV_DROP_V6_BAD_EXT;
			} else {
				if (srh->segments_left != want_sl)
					return want_sl ? MUP_EV_DROP_SRH_SL_NOT_ONE : MUP_EV_DROP_SRH_SL_NONZERO;
				if (c->srh == V6_NO_SRH)
					c->srh = off;
			}
		}
		nh = p[0];
		off += len;
	}
	return MUP_EV_DROP_V6_BAD_EXT;
}

#endif
