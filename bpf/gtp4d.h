/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* H.M.GTP4.D (RFC 9433 §6.7): GTP-U/IPv4 in, SRv6 out. Spec: §2 of
 * docs/spec.md; our field decisions: docs/datapath.md. */
#ifndef MUP_GTP4D_H
#define MUP_GTP4D_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"
#include "counters.h"
#include "lookup.h"
#include "addr.h"
#include "gtp.h"
#include "hash.h"
#include "srh.h"
#include "fwd.h"
#include "echo.h"
#include "mtu.h"

/* Fill the IPv6 header and the SRH of the translated packet at data. */
static __always_inline int gtp4d_write(struct xdp_md *ctx, const struct mup_config *cfg, const struct mup_policy *pol,
				       struct u128 last_sid, struct u128 src,
				       __u32 vtcfl, __u16 payload_len, __u8 inner_nh,
				       __u32 entries, const struct eth_macs *macs)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	__u32 nsegs = pol->nsegs;

	if ((void *)(ip6 + 1) > end)
		return -1;
	eth_write(cfg, eth, macs, ETH_P_IPV6);

	*(__be32 *)ip6 = bpf_htonl(vtcfl);
	ip6->payload_len = bpf_htons(payload_len);
	ip6->hop_limit = pol->hop_limit;
	u128_store(&ip6->saddr, src);
	if (!entries) {
		ip6->nexthdr = inner_nh;
		u128_store(&ip6->daddr, last_sid);
		return 0;
	}
	ip6->nexthdr = IPPROTO_ROUTING;
	/* DA = S1 when there are segments, else the last SID. */
	if (nsegs)
		__builtin_memcpy(&ip6->daddr, pol->segs[0], 16);
	else
		u128_store(&ip6->daddr, last_sid);
	return srh_write((void *)(ip6 + 1), end, pol->segs, nsegs, last_sid, inner_nh, entries);
}

/* A malformed IPv4 packet is ours to drop only when it is addressed to a
 * policy prefix; anyone else's goes to the kernel untouched. Costs a lookup
 * on this error path only. */
static __always_inline int malformed4(const struct mup_config *cfg, __be32 daddr, __u32 drop_event, __u32 bytes)
{
	if (policy_addr(cfg, daddr))
		return ev(drop_event, bytes, XDP_DROP);
	return ev(MUP_EV_PASS_MALFORMED, bytes, XDP_PASS);
}

static __always_inline int gtp4d(struct xdp_md *ctx, const struct mup_config *cfg, __u32 bytes)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct mup_policy *pol;
	struct udphdr *udp;
	struct gtpu_hdr *gtp;
	struct gtp_info gi;
	__u32 ihl, tot, udp_len, gtp_len, inner_len, old_hdr, new_hdr, entries, h;
	__u32 saddr, daddr, teid, vtcfl;
	struct eth_macs macs;
	__u8 tos, inner_nh;
	__u8 *inner;
	int rc;

	if ((void *)(ip + 1) > end)
		return ev(MUP_EV_PASS_MALFORMED, bytes, XDP_PASS); /* no DA to judge by */
	if (ip->protocol != IPPROTO_UDP)
		return ev(MUP_EV_PASS_NOT_GTPU, bytes, XDP_PASS);
	ihl = ip->ihl * 4;
	tot = bpf_ntohs(ip->tot_len);
	if (ip->version != 4 || ihl < sizeof(*ip) || tot < ihl)
		return malformed4(cfg, ip->daddr, MUP_EV_DROP_V4_BAD_HEADER, bytes);
	if (sizeof(struct ethhdr) + tot > bytes)
		return malformed4(cfg, ip->daddr, MUP_EV_DROP_V4_TRUNCATED, bytes);
	if (ip->frag_off & bpf_htons(0x3fff)) {
		/* Not translated (spec §2); the kernel reassembles or drops. */
		if (policy_addr(cfg, ip->daddr))
			return ev(MUP_EV_PASS_V4_FRAGMENT, bytes, XDP_PASS);
		return ev(MUP_EV_PASS_NOT_GTPU, bytes, XDP_PASS);
	}

	/* Lengths are checked against the IPv4 total length, not only the
	 * frame: a frame padded to 60 bytes must not lend a short packet the
	 * bytes of its padding. */
	udp = (void *)ip + (ihl & 0x3c);
	if ((void *)(udp + 1) > end || ihl + sizeof(*udp) > tot)
		return malformed4(cfg, ip->daddr, MUP_EV_DROP_UDP_TRUNCATED, bytes);
	if (udp->dest != bpf_htons(MUP_GTPU_PORT))
		return ev(MUP_EV_PASS_NOT_GTPU, bytes, XDP_PASS);
	/* A G-PDU is matched by DA || TEID (longest prefix); any other
	 * message by the address alone (docs/design.md). */
	gtp = (void *)(udp + 1);
	pol = 0;
	if ((void *)(gtp + 1) <= end && gtp->type == GTP_TYPE_GPDU) {
		int addr_seen = 0;

		pol = policy_lookup_memo(cfg, (__u64)bpf_ntohl(ip->daddr) << 32 | bpf_ntohl(gtp->teid), &addr_seen);
		if (!pol && !addr_seen)
			return ev(MUP_EV_PASS_NO_POLICY, bytes, XDP_PASS);
	} else if (!policy_addr(cfg, ip->daddr)) {
		return ev(MUP_EV_PASS_NO_POLICY, bytes, XDP_PASS);
	}

	udp_len = bpf_ntohs(udp->len);
	if (udp_len != tot - ihl)
		return ev(MUP_EV_DROP_UDP_BAD_LENGTH, bytes, XDP_DROP);
	{
		__be16 seq = 0;

		rc = gtpu_in(gtp, end, udp_len, bytes, &gtp_len, &seq);
		if (rc == GTPU_IN_ECHO)
			return echo_reply4(ctx, bytes, tot, ip->saddr, ip->daddr, udp->source, seq);
		if (rc != GTPU_IN_GPDU)
			return rc;
	}
	/* Ours by its address, but no (N3, TEID) policy covers the TEID. */
	if (!pol)
		return ev(MUP_EV_DROP_NO_TEID_POLICY, bytes, XDP_DROP);

	rc = gtp_parse_ext(gtp, end, gtp_len + sizeof(*gtp), &gi);
	if (rc)
		return ev(rc, bytes, XDP_DROP);
	inner_len = gtp_len + sizeof(*gtp) - gi.hdr_len;

	inner = (__u8 *)gtp + (gi.hdr_len & 0x3fff);
	rc = hash_inner(inner, inner_len, end, 0, cfg->hash_seed, &h, &inner_nh);
	if (rc)
		return ev(rc, bytes, XDP_DROP);

	/* Everything the new headers need, before the frame moves. */
	eth_save(data, &macs);
	tos = ip->tos;
	saddr = bpf_ntohl(ip->saddr);
	daddr = bpf_ntohl(ip->daddr);
	teid = bpf_ntohl(gtp->teid);
	old_hdr = ihl + sizeof(*udp) + gi.hdr_len;

	entries = pol->nsegs;
	if (entries > MUP_MAX_SEGS)
		return ev(MUP_EV_DROP_BAD_RULE, bytes, XDP_DROP);
	/* [B, Sk..S1]; reduced leaves S1 (in the DA) out: [B, Sk..S2]. */
	if (pol->srh_mode != MUP_SRH_REDUCED && (entries || pol->srh_mode == MUP_SRH_ALWAYS))
		entries++;
	new_hdr = sizeof(struct ipv6hdr) + (entries ? 8 + 16 * entries : 0);
	if (pol->mtu && new_hdr + inner_len > pol->mtu)
		return too_big4(ctx, bytes, tot, (__s32)pol->mtu - (__s32)(new_hdr + inner_len - tot));

	{
		/* RFC 9433 §6.1: SID B = sr_prefix | IPv4 DA | QFI R U TEID,
		 * placed at bit L (or a plain SID as is); SA = src_prefix | IPv4 SA at bit P. */
		__u64 args = (__u64)gi.qfi << 34 | (__u64)gi.rqi << 33 | teid;
		struct u128 v = { (__u64)daddr << 32 | args >> 8, (args & 0xff) << 56 };
		struct u128 pfx = u128_load(pol->sr_prefix);
		struct u128 sid, src;
		struct bpf_fib_lookup fib;
		const struct mup_nexthop *nh = 0;
		__u32 fwd = cfg->fwd_mode;
		long fib_rc = 0;

		if (pol->flags & MUP_POL_PLAIN_SID) {
			/* A PE's End.DT4/DT6/DT46 SID, used as is. */
			sid = pfx;
		} else {
			v = u128_shr(v, pol->sr_plen & 0x3f);
			sid.hi = pfx.hi | v.hi;
			sid.lo = pfx.lo | v.lo;
		}
		v.hi = (__u64)saddr << 32;
		v.lo = 0;
		v = u128_shr(v, pol->src_plen & 0x7f);
		pfx = u128_load(pol->src_prefix);
		src.hi = pfx.hi | v.hi;
		src.lo = pfx.lo | v.lo;

		vtcfl = 6U << 28 | (__u32)tos << 20 | (h & 0xfffff);
		/* fib: look the new destination up first, so that a packet
		 * too big for the egress is answered from the original. */
		if (fwd == MUP_FWD_FIB)
			nh = nh_cached(pol->rule, AF_INET6,
				       (const __u32 *)(pol->nsegs ? pol->segs[0] : pol->sr_prefix),
				       pol->nsegs ? 128 : pol->sr_plen, new_hdr + inner_len);
		if (fwd == MUP_FWD_FIB && !nh) {
			__builtin_memset(&fib, 0, sizeof(fib));
			fib.family = AF_INET6;
			fib.l4_protocol = inner_nh;
			fib.tot_len = new_hdr + inner_len;
			fib.flowinfo = bpf_htonl(vtcfl & 0x0fffffff);
			u128_store(fib.ipv6_src, src);
			if (pol->nsegs)
				__builtin_memcpy(fib.ipv6_dst, pol->segs[0], 16);
			else
				u128_store(fib.ipv6_dst, sid);
			fib_rc = fib_lookup_early(ctx, &fib);
			if (fib_rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
				return too_big4(ctx, bytes, tot,
						(__s32)fib.mtu_result - (__s32)(new_hdr + inner_len - tot));
		}

		/* Trailing Ethernet padding would otherwise become payload. */
		if (bytes > sizeof(struct ethhdr) + tot &&
		    bpf_xdp_adjust_tail(ctx, (int)(sizeof(struct ethhdr) + tot) - (int)bytes))
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		if (bpf_xdp_adjust_head(ctx, (int)old_hdr - (int)new_hdr))
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);

		if (gtp4d_write(ctx, cfg, pol, sid, src, vtcfl,
				new_hdr - sizeof(struct ipv6hdr) + inner_len, inner_nh,
				entries, &macs))
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		count_rule(pol->rule, bytes);
		if (fwd != MUP_FWD_FIB)
			return forward_local(cfg, bytes);
		if (nh)
			return forward_nh(ctx, nh, bytes);
		return forward_fib_result(ctx, &fib, fib_rc, bytes);
	}
}

#endif
