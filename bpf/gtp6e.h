/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* End.M.GTP6.E (RFC 9433 §6.5): SRv6 in, GTP-U/IPv6 out. The active SID
 * (the DA, Segments Left 1) carries Args.Mob.Session right after its L-bit
 * locator+function; SRH[0] is the gNB's address, the new DA. Our field
 * decisions: docs/datapath.md. */
#ifndef MUP_GTP6E_H
#define MUP_GTP6E_H

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
#include "csum.h"
#include "srh.h"
#include "fwd.h"
#include "mtu.h"
#include "emit.h"

/* Outer headers we push: IPv6 + UDP + GTP-U, and optionally the 4 optional
 * bytes plus a one-unit PDU Session Container. */
struct gtp6e_hdrs {
	struct ipv6hdr ip6;
	struct udphdr udp;
	struct gtpu_hdr gtp;
	struct gtpu_opt opt;
	struct gtpu_pdu_session psc;
};
_Static_assert(sizeof(struct gtp6e_hdrs) == 64, "gtp6e_hdrs must have no padding");

#define GTP6E_HDR_MIN (sizeof(struct ipv6hdr) + sizeof(struct udphdr) + sizeof(struct gtpu_hdr))
#define GTP6E_HDR_PSC sizeof(struct gtp6e_hdrs)
/* The UDP checksum covers frames of up to 18 x 512 + 511 = 9,727 bytes of UDP: a
 * jumbo frame of 9000 bytes; only generic mode hands us such frames. */
#define GTP6E_CSUM_BLOCKS 18

/* The two addresses' part of the pseudo header, from registers rather than
 * a helper call: summed as host-order words, folded, then byte-swapped into
 * the memory order bpf_csum_diff sums in (a ones-complement sum commutes
 * with swapping bytes, RFC 1071 §2 (B)). */
static __always_inline __u32 csum_addrs(struct u128 a, struct u128 b)
{
	__u64 s = 0;

	s += (a.hi >> 32) + (a.hi & 0xffffffff) + (a.lo >> 32) + (a.lo & 0xffffffff);
	s += (b.hi >> 32) + (b.hi & 0xffffffff) + (b.lo >> 32) + (b.lo & 0xffffffff);
	s = (s & 0xffff) + ((s >> 16) & 0xffff) + ((s >> 32) & 0xffff) + (s >> 48);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return bpf_htons((__u16)s);
}

static __always_inline int gtp6e(struct xdp_md *ctx, const struct mup_config *cfg, __u32 bytes, struct ipv6hdr *ip6,
				 struct mup_localsid *ls, __u32 payload_len)
{
	void *data = (void *)ip6 - sizeof(struct ethhdr); /* same packet pointer as ip6 */
	void *end = (void *)(long)ctx->data_end;
	struct v6_chain chain;
	struct u128 da, gnb, src;
	__u32 inner_len, new_hdr, h, teid, rule, vtcfl;
	struct eth_macs macs;
	struct bpf_fib_lookup fib;
	__u32 fwd = cfg->fwd_mode;
	long fib_rc = 0;
	__u16 sport;
	__u8 hlim, qfi, r, with_psc, inner_nh;
	__u8 *inner;
	__u64 args;
	int rc;

	if ((void *)(ip6 + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP); /* checked by the caller */
	da = u128_load(&ip6->daddr);
	rc = v6_walk(ip6, end, payload_len, 1, &chain);
	if (rc)
		return ev(rc, bytes, XDP_DROP);
	if (chain.srh == V6_NO_SRH)
		return ev(MUP_EV_DROP_SRH_MISSING, bytes, XDP_DROP);
	{
		/* SRH[0], the gNB. The reduced form (the active SID only in
		 * the DA, Last Entry 0) has it at the same place. */
		struct srh_hdr *srh = (void *)(ip6 + 1) + (chain.srh & 0x1fff);

		if ((void *)(srh + 1) > end)
			return ev(MUP_EV_DROP_V6_TRUNCATED, bytes, XDP_DROP);
		if (srh->hdrlen < 2)
			return ev(MUP_EV_DROP_SRH_MISSING, bytes, XDP_DROP); /* no segment list */
		/* v6_walk checked the whole SRH against the frame */
		if ((void *)srh + 8 + 16 > end)
			return ev(MUP_EV_DROP_V6_TRUNCATED, bytes, XDP_DROP);
		gnb = u128_load((void *)(srh + 1));
	}
	if (ip6->hop_limit <= 1)
		return ev(MUP_EV_DROP_HOP_LIMIT, bytes, XDP_DROP);
	if (chain.inner != IPPROTO_IPIP && chain.inner != IPPROTO_IPV6)
		return ev(MUP_EV_DROP_INNER_NOT_IP, bytes, XDP_DROP);

	inner_len = payload_len - chain.len;
	inner = (__u8 *)(ip6 + 1) + (chain.len & 0x1fff);
	rc = hash_inner(inner, inner_len, end, chain.inner == IPPROTO_IPIP ? 4 : 6,
			cfg->hash_seed, &h, &inner_nh);
	if (rc)
		return ev(rc, bytes, XDP_DROP);

	/* RFC 9433 §6.1: Args.Mob.Session follows the L-bit SID prefix. */
	{
		struct u128 v = u128_shl(da, ls->sid_plen & 0x7f);

		args = v.hi >> 24;
	}
	teid = (__u32)args;
	qfi = (args >> 34) & 0x3f;
	r = (args >> 33) & 1;
	with_psc = ls->container == MUP_CONTAINER_ALWAYS ||
		   (ls->container == MUP_CONTAINER_AUTO && (qfi || r));
	new_hdr = with_psc ? GTP6E_HDR_PSC : GTP6E_HDR_MIN;
	if (ls->mtu && new_hdr + inner_len > ls->mtu)
		return too_big6(ctx, bytes, payload_len,
				(__s32)ls->mtu - (__s32)(new_hdr + inner_len - sizeof(*ip6) - payload_len));
	/* Only a generic-mode (linearised) jumbo frame gets here. */
	if (new_hdr - sizeof(struct ipv6hdr) + inner_len > CSUM_MAX_BYTES(GTP6E_CSUM_BLOCKS))
		return ev(MUP_EV_DROP_TOO_LONG, bytes, XDP_DROP);
	/* Traffic class carried over, flow label from the inner 5-tuple. */
	vtcfl = (bpf_ntohl(*(__be32 *)ip6) & 0x0ff00000) | 6U << 28 | (h & 0xfffff);
	hlim = ls->ttl;
	rule = ls->rule;
	src = u128_load(ls->pol.src_prefix);
	eth_save(data, &macs);
	sport = cfg->sport_base + (__u16)(((__u64)h * cfg->sport_span) >> 32);
	/* fib: look the new destination up first, so that a packet too big
	 * for the egress is answered from the original. */
	if (fwd == MUP_FWD_FIB) {
		__builtin_memset(&fib, 0, sizeof(fib));
		fib.family = AF_INET6;
		fib.l4_protocol = IPPROTO_UDP;
		fib.sport = bpf_htons(sport);
		fib.dport = bpf_htons(MUP_GTPU_PORT);
		fib.tot_len = new_hdr + inner_len;
		fib.flowinfo = bpf_htonl(vtcfl & 0x0fffffff);
		u128_store(fib.ipv6_src, src);
		u128_store(fib.ipv6_dst, gnb);
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
	/* A reduced SRH (24 bytes) makes way for exactly the 24 bytes of the
	 * PDU Session Container form: no move, no helper call. */
	if (sizeof(*ip6) + chain.len != new_hdr &&
	    bpf_xdp_adjust_head(ctx, (int)(sizeof(*ip6) + chain.len) - (int)new_hdr))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);

	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		struct ethhdr *eth = data;
		struct gtp6e_hdrs *o = (void *)(eth + 1);
		__u32 udp_len = new_hdr - sizeof(struct ipv6hdr) + inner_len;
		__u32 sum, isum;

		if ((void *)o + GTP6E_HDR_PSC > end)
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		eth_write(cfg, eth, &macs, ETH_P_IPV6);

		*(__be32 *)&o->ip6 = bpf_htonl(vtcfl);
		o->ip6.payload_len = bpf_htons(udp_len);
		o->ip6.nexthdr = IPPROTO_UDP;
		o->ip6.hop_limit = hlim;
		u128_store(&o->ip6.saddr, src);
		u128_store(&o->ip6.daddr, gnb);
		o->udp.check = 0;
		gtpu_gpdu_write(&o->udp, sport, udp_len, teid, inner_len, with_psc, qfi, r);
		/* UDP checksum: pseudo header (addresses, length, next
		 * header), then the UDP header and everything after it. */
		/* 16-bit words in memory order: the 32-bit length and next
		 * header fields add as their low halves (no carry lost). */
		sum = (__u32)bpf_htons(udp_len) + bpf_htons(IPPROTO_UDP) + csum_addrs(src, gnb);
		/* The inner packet (16 or 24 bytes after UDP) from its own
		 * checksums when they allow it (csum.h, docs/datapath.md),
		 * else from its bytes. Here rather than before the helper
		 * calls, so that nothing of it lives across them (stack). */
		if (!csum_inner_derived((__u8 *)&o->udp + (with_psc ? 24 : 16), end, inner_len, &isum)) {
			/* The headers just written, read back as words,
			 * then the inner packet's derived sum: no helper
			 * call, the same cost at any length. */
			const __u32 *w = (const void *)&o->udp;
			__u64 s = (__u64)sum + isum + w[0] + w[1] + w[2] + w[3];

			if (with_psc)
				s += (__u64)w[4] + w[5];
			sum = csum_fold64(s);
		} else {
			sum = csum_to_end((__u8 *)&o->udp, end, sum, GTP6E_CSUM_BLOCKS);
			o = (void *)(long)ctx->data + sizeof(struct ethhdr);
			if ((void *)o + GTP6E_HDR_MIN > (void *)(long)ctx->data_end)
				return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		}
		o->udp.check = csum_fold_udp(sum);

		count_rule(rule, bytes);
		if (fwd != MUP_FWD_FIB)
			return forward_local(cfg, bytes);
		return forward_fib_result(ctx, &fib, fib_rc, bytes);
	}
}

#endif
