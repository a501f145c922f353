/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* H.M.Session.Encaps: the PE role of SRv6 MUP (downlink). An IP packet to a
 * UE address of a session is encapsulated, unchanged, in IPv6 (+ SRH) to the
 * gateway's End.M.GTP4.E SID composed from the session: DA = isd | gNB IPv4
 * | Args.Mob.Session (RFC 9433 §6.1, §6.6), SA = src_prefix | UPF N3 IPv4.
 * Spec: docs/spec.md "PE downlink: H.M.Session.Encaps"; precedence over the
 * other tables: docs/design.md. */
#ifndef MUP_SESSION_H
#define MUP_SESSION_H

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
#include "maps.h"
#include "lookup.h"
#include "addr.h"
#include "hash.h"
#include "srh.h"
#include "fwd.h"
#include "mtu.h"

/* Not a session's packet: the caller goes on with the other tables. */
#define SESSION_NOT_MINE (-1)

static __always_inline struct mup_session *session_lookup4(const struct mup_config *cfg, __be32 daddr)
{
	struct mup_session_key key = {};
	__u32 n = cfg->n_session4_plens;
	__u32 da = bpf_ntohl(daddr);

	key.family = MUP_SESSION_V4;
	for (int i = 0; i < MUP_MAX_PLENS; i++) {
		__u32 plen;
		struct mup_session *s;

		if (i >= n)
			break;
		plen = cfg->session4_plens[i];
		if (plen > 32)
			break;
		key.plen = plen;
		*(__be32 *)key.addr = plen >= 32 ? daddr : bpf_htonl(plen ? da & ~(0xffffffffU >> plen) : 0);
		s = bpf_map_lookup_elem(&mup_sessions, &key);
		if (s)
			return s;
	}
	return 0;
}

static __always_inline struct mup_session *session_lookup6(const struct mup_config *cfg, struct u128 da)
{
	struct mup_session_key key = {};
	__u32 n = cfg->n_session6_plens;

	key.family = MUP_SESSION_V6;
	for (int i = 0; i < MUP_MAX_PLENS; i++) {
		__u32 plen;
		struct mup_session *s;

		if (i >= n)
			break;
		plen = cfg->session6_plens[i];
		key.plen = plen;
		u128_store32(key.addr, u128_mask(da, plen));
		s = bpf_map_lookup_elem(&mup_sessions, &key);
		if (s)
			return s;
	}
	return 0;
}

/* The inner packet (inner_len bytes at 14, checked) goes out behind a new
 * IPv6 header and, when the session says so, an SRH. tc: the inner DSCP/ECN;
 * h: the inner 5-tuple hash (flow label). */
static __always_inline int session_encaps(struct xdp_md *ctx, const struct mup_config *cfg, __u32 bytes,
					  const struct mup_session *s, __u32 inner_len, __u8 tc, __u32 h,
					  __u8 inner_nh, int v4)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct eth_macs macs;
	struct bpf_fib_lookup fib;
	__u32 entries = s->nsegs, new_hdr, vtcfl, fwd = cfg->fwd_mode;
	struct u128 da = u128_load(s->da);
	struct u128 sa = u128_load(s->sa);
	long fib_rc = 0;

	if ((void *)((struct ethhdr *)data + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	eth_save(data, &macs);
	if (entries > MUP_MAX_SEGS)
		return ev(MUP_EV_DROP_BAD_RULE, bytes, XDP_DROP);
	/* [B, Sk..S1]; reduced leaves S1 (in the DA) out: [B, Sk..S2]. */
	if (s->srh_mode != MUP_SRH_REDUCED && (entries || s->srh_mode == MUP_SRH_ALWAYS))
		entries++;
	new_hdr = sizeof(struct ipv6hdr) + (entries ? 8 + 16 * entries : 0);
	if (s->mtu && new_hdr + inner_len > s->mtu) {
		if (v4)
			return icmp_too_big4(ctx, bytes, inner_len, (__s32)s->mtu - (__s32)new_hdr, s);
		return icmp_too_big6(ctx, bytes, inner_len - sizeof(struct ipv6hdr), (__s32)s->mtu - (__s32)new_hdr, s);
	}
	vtcfl = 6U << 28 | (__u32)tc << 20 | (h & 0xfffff);
	if (fwd == MUP_FWD_FIB) {
		__builtin_memset(&fib, 0, sizeof(fib));
		fib.family = AF_INET6;
		fib.l4_protocol = inner_nh;
		fib.tot_len = new_hdr + inner_len;
		fib.flowinfo = bpf_htonl(vtcfl & 0x0fffffff);
		u128_store(fib.ipv6_src, sa);
		if (s->nsegs)
			__builtin_memcpy(fib.ipv6_dst, s->segs[0], 16);
		else
			u128_store(fib.ipv6_dst, da);
		fib_rc = fib_lookup_early(ctx, &fib);
		if (fib_rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
			if (v4)
				return icmp_too_big4(ctx, bytes, inner_len, (__s32)fib.mtu_result - (__s32)new_hdr, s);
			return icmp_too_big6(ctx, bytes, inner_len - sizeof(struct ipv6hdr),
					     (__s32)fib.mtu_result - (__s32)new_hdr, s);
		}
	}

	/* Trailing Ethernet padding would otherwise become payload. */
	if (bytes > sizeof(struct ethhdr) + inner_len &&
	    bpf_xdp_adjust_tail(ctx, (int)(sizeof(struct ethhdr) + inner_len) - (int)bytes))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (bpf_xdp_adjust_head(ctx, -(int)new_hdr))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		struct ethhdr *eth = data;
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end)
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		eth_write(cfg, eth, &macs, ETH_P_IPV6);
		*(__be32 *)ip6 = bpf_htonl(vtcfl);
		ip6->payload_len = bpf_htons(new_hdr - sizeof(struct ipv6hdr) + inner_len);
		ip6->hop_limit = s->hop_limit;
		u128_store(&ip6->saddr, sa);
		if (!entries) {
			ip6->nexthdr = inner_nh;
			u128_store(&ip6->daddr, da);
		} else {
			ip6->nexthdr = IPPROTO_ROUTING;
			/* DA = S1 when there are segments, else the last SID. */
			if (s->nsegs)
				__builtin_memcpy(&ip6->daddr, s->segs[0], 16);
			else
				u128_store(&ip6->daddr, da);
			if (srh_write((void *)(ip6 + 1), end, s->segs, s->nsegs, da, inner_nh, entries))
				return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		}
	}
	count_rule(s->rule, bytes);
	if (fwd != MUP_FWD_FIB)
		return forward_local(cfg, bytes);
	return forward_fib_result(ctx, &fib, fib_rc, bytes);
}

/* IPv4 at 14. Precedence (docs/design.md): GTP-U (UDP to port 2152, not a
 * later fragment) to an address a policy covers stays H.M.GTP4.D's. */
static __always_inline int session4(struct xdp_md *ctx, const struct mup_config *cfg, __u32 bytes)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct mup_session *s;
	__u32 ihl, tot;

	if ((void *)(ip + 1) > end)
		return SESSION_NOT_MINE;
	s = session_lookup4(cfg, ip->daddr);
	if (!s)
		return SESSION_NOT_MINE;
	ihl = ip->ihl * 4;
	if (ip->protocol == IPPROTO_UDP && !(ip->frag_off & bpf_htons(0x1fff)) && cfg->n_policy_plens) {
		struct udphdr *udp = (void *)ip + (ihl & 0x3c);

		if ((void *)(udp + 1) <= end && udp->dest == bpf_htons(MUP_GTPU_PORT) &&
		    policy_addr(cfg, ip->daddr))
			return SESSION_NOT_MINE;
	}
	tot = bpf_ntohs(ip->tot_len);
	if (ip->version != 4 || ihl < sizeof(*ip) || tot < ihl)
		return ev(MUP_EV_DROP_V4_BAD_HEADER, bytes, XDP_DROP);
	if (sizeof(struct ethhdr) + tot > bytes)
		return ev(MUP_EV_DROP_V4_TRUNCATED, bytes, XDP_DROP);
	return session_encaps(ctx, cfg, bytes, s, tot, ip->tos, hash_inner4(ip, tot, end, cfg->hash_seed),
			      IPPROTO_IPIP, 1);
}

/* IPv6 at 14. Precedence: an address a local SID covers stays the local
 * SID's. */
static __always_inline int session6(struct xdp_md *ctx, const struct mup_config *cfg, __u32 bytes)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct mup_session *s;
	struct u128 da;
	__u32 payload_len;

	if ((void *)(ip6 + 1) > end)
		return SESSION_NOT_MINE;
	da = u128_load(&ip6->daddr);
	s = session_lookup6(cfg, da);
	if (!s)
		return SESSION_NOT_MINE;
	if (cfg->n_localsid_plens && localsid_lookup(cfg, da))
		return SESSION_NOT_MINE;
	if (ip6->version != 6)
		return ev(MUP_EV_DROP_V6_BAD_HEADER, bytes, XDP_DROP);
	payload_len = bpf_ntohs(ip6->payload_len);
	if (sizeof(struct ethhdr) + sizeof(*ip6) + payload_len > bytes)
		return ev(MUP_EV_DROP_V6_BAD_LENGTH, bytes, XDP_DROP);
	return session_encaps(ctx, cfg, bytes, s, sizeof(*ip6) + payload_len,
			      (__u8)(bpf_ntohl(*(__be32 *)ip6) >> 20),
			      hash_inner6(ip6, sizeof(*ip6) + payload_len, end, cfg->hash_seed), IPPROTO_IPV6, 0);
}

#endif
