/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* End.M.GTP6.D (RFC 9433 §6.3) and End.M.GTP6.D.Di (§6.4): GTP-U/IPv6 to a
 * local SID in, SRv6 out. The SR policy of the SID gives the path
 * S1..Sk and the last SID B, which gets Args.Mob.Session (QFI, R, TEID) at
 * bit L of its prefix. End.M.GTP6.D.Di also keeps the original destination
 * D as SRH[0], so that End.M.GTP6.E at the far end rebuilds the GTP-U packet
 * to D. Our field decisions: docs/datapath.md. */
#ifndef MUP_GTP6D_H
#define MUP_GTP6D_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"
#include "counters.h"
#include "addr.h"
#include "gtp.h"
#include "hash.h"
#include "srh.h"
#include "fwd.h"
#include "echo.h"
#include "mtu.h"

/* The SID list in path order is [S1..Sk, B] (End.M.GTP6.D) or
 * [S1..Sk, B, D] (.Di): n entries. The SRH lists it backwards; entries is n,
 * or n - 1 with reduced encapsulation (S1, in the DA, left out). */
static __always_inline int gtp6d_srh_write(void *at, void *end, const struct mup_policy *pol,
					   struct u128 b, struct u128 d, __u8 inner_nh,
					   __u32 n, __u32 entries)
{
	struct srh_hdr *srh = at;
	__u8 (*list)[16] = (void *)(srh + 1);
	__u32 k = pol->nsegs;

	if ((void *)(srh + 1) > end)
		return -1;
	srh->nexthdr = inner_nh;
	srh->hdrlen = 2 * entries;
	srh->type = SRH_ROUTING_TYPE;
	srh->segments_left = n - 1;
	srh->last_entry = entries - 1;
	srh->flags = 0;
	srh->tag = 0;
	for (__u32 i = 0; i < MUP_MAX_SEGS + 2; i++) {
		__u32 pos = n - 1 - i; /* path position of list[i] */

		if (i >= entries)
			break;
		if ((void *)(list + i + 1) > end)
			return -1;
		if (pos < k)
			__builtin_memcpy(list[i], pol->segs[pos & (MUP_MAX_SEGS - 1)], 16);
		else if (pos == k)
			u128_store(list[i], b);
		else
			u128_store(list[i], d);
	}
	return 0;
}

static __always_inline int gtp6d(struct xdp_md *ctx, const struct mup_config *cfg, __u32 bytes, struct ipv6hdr *ip6,
				 struct mup_localsid *ls, __u32 payload_len)
{
	void *data = (void *)ip6 - sizeof(struct ethhdr); /* same packet pointer as ip6 */
	void *end = (void *)(long)ctx->data_end;
	const struct mup_policy *pol = &ls->pol;
	struct v6_chain chain;
	struct udphdr *udp;
	struct gtpu_hdr *gtp;
	struct gtp_info gi;
	struct u128 d, b, src;
	__u32 udp_len, gtp_len, inner_len, old_hdr, new_hdr, n, entries, h, teid, vtcfl, k;
	struct eth_macs macs;
	struct bpf_fib_lookup fib;
	const struct mup_nexthop *nh = 0;
	__u32 fwd = cfg->fwd_mode;
	long fib_rc = 0;
	__u8 inner_nh, di;
	__u8 *inner;
	int rc;

	if ((void *)(ip6 + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP); /* checked by the caller */
	rc = v6_walk(ip6, end, payload_len, 0, &chain);
	if (rc)
		return ev(rc, bytes, XDP_DROP);
	if (chain.inner != IPPROTO_UDP)
		return ev(MUP_EV_DROP_GTP6_NOT_GTPU, bytes, XDP_DROP);
	udp = (void *)(ip6 + 1) + (chain.len & 0x1fff);
	if ((void *)(udp + 1) > end || chain.len + sizeof(*udp) > payload_len)
		return ev(MUP_EV_DROP_UDP_TRUNCATED, bytes, XDP_DROP);
	if (udp->dest != bpf_htons(MUP_GTPU_PORT))
		return ev(MUP_EV_DROP_GTP6_NOT_GTPU, bytes, XDP_DROP);
	udp_len = bpf_ntohs(udp->len);
	if (udp_len != payload_len - chain.len)
		return ev(MUP_EV_DROP_UDP_BAD_LENGTH, bytes, XDP_DROP);
	gtp = (void *)(udp + 1);
	{
		__be16 seq = 0;

		rc = gtpu_in(gtp, end, udp_len, bytes, &gtp_len, &seq);
		if (rc == GTPU_IN_ECHO)
			return echo_reply6(ctx, bytes, payload_len, u128_load(&ip6->saddr), u128_load(&ip6->daddr),
					   udp->source, seq);
		if (rc != GTPU_IN_GPDU)
			return rc;
		/* RFC 8200 8.1: over IPv6 a zero UDP checksum is no checksum,
		 * which a receiver MUST discard (Echo Requests: echo.h). A
		 * non-zero one is not verified (the payload is not summed). */
		if (udp->check == 0)
			return ev(MUP_EV_DROP_UDP_ZERO_CHECKSUM, bytes, XDP_DROP);
	}

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
	d = u128_load(&ip6->daddr);
	teid = bpf_ntohl(gtp->teid);
	vtcfl = (bpf_ntohl(*(__be32 *)ip6) & 0x0ff00000) | 6U << 28 | (h & 0xfffff);
	old_hdr = sizeof(*ip6) + chain.len + sizeof(*udp) + gi.hdr_len;

	k = pol->nsegs;
	if (k > MUP_MAX_SEGS)
		return ev(MUP_EV_DROP_BAD_RULE, bytes, XDP_DROP);
	di = ls->behavior == MUP_BEH_GTP6D_DI;
	n = k + 1 + di;
	entries = n;
	if (pol->srh_mode == MUP_SRH_REDUCED)
		entries = n - 1;
	else if (n == 1 && pol->srh_mode == MUP_SRH_AUTO)
		entries = 0;
	new_hdr = sizeof(struct ipv6hdr) + (entries ? 8 + 16 * entries : 0);
	if (ls->mtu && new_hdr + inner_len > ls->mtu)
		return too_big6(ctx, bytes, payload_len,
				(__s32)ls->mtu - (__s32)(new_hdr + inner_len - sizeof(*ip6) - payload_len));

	{
		/* RFC 9433 §6.1: B = sr_prefix | QFI R U TEID at bit L. */
		__u64 args = (__u64)gi.qfi << 34 | (__u64)gi.rqi << 33 | teid;
		struct u128 v = { args << 24, 0 };
		struct u128 pfx = u128_load(pol->sr_prefix);

		v = u128_shr(v, pol->sr_plen & 0x7f);
		b.hi = pfx.hi | v.hi;
		b.lo = pfx.lo | v.lo;
		src = u128_load(pol->src_prefix);
	}
	/* fib: look the new destination up first, so that a packet too big
	 * for the egress is answered from the original. */
	if (fwd == MUP_FWD_FIB)
		nh = nh_cached(ls->rule, AF_INET6, (const __u32 *)(k ? pol->segs[0] : pol->sr_prefix),
			       k ? 128 : pol->sr_plen, new_hdr + inner_len);
	if (fwd == MUP_FWD_FIB && !nh) {
		__builtin_memset(&fib, 0, sizeof(fib));
		fib.family = AF_INET6;
		fib.l4_protocol = inner_nh;
		fib.tot_len = new_hdr + inner_len;
		fib.flowinfo = bpf_htonl(vtcfl & 0x0fffffff);
		u128_store(fib.ipv6_src, src);
		if (k)
			__builtin_memcpy(fib.ipv6_dst, pol->segs[0], 16);
		else
			u128_store(fib.ipv6_dst, b);
		fib_rc = fib_lookup_early(ctx, &fib);
		if (fib_rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
			return too_big6(ctx, bytes, payload_len,
					(__s32)fib.mtu_result -
						(__s32)(new_hdr + inner_len - sizeof(*ip6) - payload_len));
	}

	if (bytes > sizeof(struct ethhdr) + sizeof(*ip6) + payload_len &&
	    bpf_xdp_adjust_tail(ctx, (int)(sizeof(struct ethhdr) + sizeof(*ip6) + payload_len) -
					     (int)bytes))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (bpf_xdp_adjust_head(ctx, (int)old_hdr - (int)new_hdr))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);

	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		struct ethhdr *eth = data;
		struct ipv6hdr *o = (void *)(eth + 1);

		if ((void *)(o + 1) > end)
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		eth_write(cfg, eth, &macs, ETH_P_IPV6);
		*(__be32 *)o = bpf_htonl(vtcfl);
		o->payload_len = bpf_htons(new_hdr - sizeof(struct ipv6hdr) + inner_len);
		o->hop_limit = pol->hop_limit;
		u128_store(&o->saddr, src);
		/* DA = S1, or B without segments. */
		if (k)
			__builtin_memcpy(&o->daddr, pol->segs[0], 16);
		else
			u128_store(&o->daddr, b);
		if (entries) {
			o->nexthdr = IPPROTO_ROUTING;
			if (gtp6d_srh_write((void *)(o + 1), end, pol, b, d, inner_nh, n, entries))
				return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		} else {
			o->nexthdr = inner_nh;
		}
		count_rule(ls->rule, bytes);
		if (fwd != MUP_FWD_FIB)
			return forward_local(cfg, bytes);
		if (nh)
			return forward_nh(ctx, nh, bytes);
		return forward_fib_result(ctx, &fib, fib_rc, bytes);
	}
}

#endif
