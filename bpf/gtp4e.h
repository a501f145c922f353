/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* End.M.GTP4.E (RFC 9433 §6.6): SRv6 in, GTP-U/IPv4 out. Spec: §3 of
 * docs/spec.md; our field decisions: docs/datapath.md. */
#ifndef MUP_GTP4E_H
#define MUP_GTP4E_H

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
#include "csum.h"
#include "srh.h"
#include "fwd.h"
#include "mtu.h"
#include "emit.h"

/* Outer headers we push: IPv4 + UDP + GTP-U, and optionally the 4 optional
 * bytes plus a one-unit PDU Session Container. */
struct gtp4e_hdrs {
	struct iphdr ip;
	struct udphdr udp;
	struct gtpu_hdr gtp;
	struct gtpu_opt opt;
	struct gtpu_pdu_session psc;
};
/* Naturally aligned, so no packing (which would make every store a byte
 * store): 20 + 8 + 8 + 4 + 4. */
_Static_assert(sizeof(struct gtp4e_hdrs) == 44, "gtp4e_hdrs must have no padding");

#define GTP4E_HDR_MIN (sizeof(struct iphdr) + sizeof(struct udphdr) + sizeof(struct gtpu_hdr))
#define GTP4E_HDR_PSC sizeof(struct gtp4e_hdrs)

/* The packet is addressed to local SID ls (an End.M.GTP4.E one); local.h
 * checked the fixed header against the frame, the IPv6 version and that
 * payload_len fits the frame, and hands over what it already loaded. */
static __always_inline int gtp4e(struct xdp_md *ctx, const struct mup_config *cfg, __u32 bytes, void *data, void *end,
				 struct ipv6hdr *ip6, struct u128 da, struct mup_localsid *ls,
				 __u32 payload_len)
{
	struct v6_chain chain;
	struct u128 sa;
	__u32 inner_len, new_hdr, h, daddr4, saddr4, teid, rule;
	struct eth_macs macs;
	struct bpf_fib_lookup fib;
	const struct mup_nexthop *nh = 0;
	__u32 fwd = cfg->fwd_mode;
	long fib_rc = 0;
	__u16 sport;
	__u8 tos, ttl, qfi, r, with_psc, inner_nh;
	__u8 *inner;
	__u64 args;
	int rc;

	rc = v6_walk(ip6, end, payload_len, 0, &chain);
	if (rc)
		return ev(rc, bytes, XDP_DROP);
	/* A packet that spent its hop budget is not re-originated with a
	 * fresh TTL. (A loop through H.M.GTP4.D still goes on: it writes the
	 * configured hop limit, not the TTL it got; docs/limitations.md.) */
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

	/* RFC 9433 §6.1: IPv4 DA and Args.Mob.Session follow the L-bit SID
	 * prefix; the IPv4 SA sits at bit P of the IPv6 SA. */
	{
		struct u128 v = u128_shl(da, ls->sid_plen & 0x3f);

		daddr4 = v.hi >> 32;
		args = (v.hi & 0xffffffff) << 8 | v.lo >> 56;
		sa = u128_load(&ip6->saddr);
		v = u128_shl(sa, ls->src_plen & 0x7f);
		saddr4 = v.hi >> 32;
	}
	teid = (__u32)args;
	qfi = (args >> 34) & 0x3f;
	r = (args >> 33) & 1;
	with_psc = ls->container == MUP_CONTAINER_ALWAYS ||
		   (ls->container == MUP_CONTAINER_AUTO && (qfi || r));
	new_hdr = with_psc ? GTP4E_HDR_PSC : GTP4E_HDR_MIN;
	if (ls->mtu && new_hdr + inner_len > ls->mtu)
		return too_big6(ctx, bytes, payload_len,
				(__s32)ls->mtu - (__s32)(new_hdr + inner_len - sizeof(*ip6) - payload_len));
	tos = (bpf_ntohl(*(__be32 *)ip6) >> 20) & 0xff;
	ttl = ls->ttl;
	rule = ls->rule;
	eth_save(data, &macs);
	sport = cfg->sport_base + (__u16)(((__u64)h * cfg->sport_span) >> 32);
	/* fib: look the new destination up first, so that a packet too big
	 * for the egress is answered from the original. */
	if (fwd == MUP_FWD_FIB)
		nh = nh_cached4(ls->rule, daddr4, new_hdr + inner_len);
	if (fwd == MUP_FWD_FIB && !nh) {
		__builtin_memset(&fib, 0, sizeof(fib));
		fib.family = AF_INET;
		fib.tos = tos;
		fib.l4_protocol = IPPROTO_UDP;
		fib.sport = bpf_htons(sport);
		fib.dport = bpf_htons(MUP_GTPU_PORT);
		fib.tot_len = new_hdr + inner_len;
		fib.ipv4_src = bpf_htonl(saddr4);
		fib.ipv4_dst = bpf_htonl(daddr4);
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
	if (bpf_xdp_adjust_head(ctx, (int)(sizeof(*ip6) + chain.len) - (int)new_hdr))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);

	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		struct ethhdr *eth = data;
		struct gtp4e_hdrs *o = (void *)(eth + 1);
		__u32 tot = new_hdr + inner_len;

		if ((void *)o + GTP4E_HDR_PSC > end)
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		eth_write(cfg, eth, &macs, ETH_P_IP);

		o->ip.version = 4;
		o->ip.ihl = 5;
		o->ip.tos = tos;
		o->ip.tot_len = bpf_htons(tot);
		o->ip.id = 0;
		o->ip.frag_off = bpf_htons(0x4000); /* DF: GTP-U is not fragmented */
		o->ip.ttl = ttl;
		o->ip.protocol = IPPROTO_UDP;
		o->ip.saddr = bpf_htonl(saddr4);
		o->ip.daddr = bpf_htonl(daddr4);
		o->ip.check = bpf_htons(ipv4_csum(tos, tot, 0x4000, ttl, IPPROTO_UDP,
						  saddr4, daddr4));
		o->udp.check = 0; /* allowed over IPv4 */
		gtpu_gpdu_write(&o->udp, sport, tot - sizeof(struct iphdr), teid, inner_len, with_psc, qfi, r);
		count_rule(rule, bytes);
		if (fwd != MUP_FWD_FIB)
			return forward_local(cfg, bytes);
		if (nh)
			return forward_nh(ctx, nh, bytes);
		return forward_fib_result(ctx, &fib, fib_rc, bytes);
	}
}

#endif
