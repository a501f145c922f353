/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Egress MTU. A rule may say how large the translated packet may be (its
 * `mtu`); a packet that would exceed it is not translated: it is dropped
 * and, in its place, an ICMP Fragmentation Needed (IPv4 sender, DF set) or
 * an ICMPv6 Packet Too Big goes back to its source out of the interface it
 * came in on (XDP_TX, MACs swapped), reporting the largest packet the
 * source may send so that its translation fits. Never to a source that is
 * not one host, nor for a link-layer or IP broadcast/multicast (then only
 * dropped, one counter per reason). At most MUP_ICMP_PER_SEC
 * such errors per CPU per second (RFC 1812 §4.3.2.8, RFC 4443 §2.4 (f));
 * beyond that the packet is only dropped. Built from the untouched
 * original packet: called before the translation moves anything. */
#ifndef MUP_MTU_H
#define MUP_MTU_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"
#include "counters.h"
#include "maps.h"
#include "csum.h"
#include "addr.h"
#include "fwd.h"

#define MUP_ICMP_PER_SEC 100
#define ICMP4_QUOTE_MAX  (576 - 20 - 8)   /* RFC 1812 §4.3.2.3: as much as fits in 576 */
#define ICMP6_QUOTE_MAX  (1280 - 40 - 8)  /* RFC 4443 §2.4 (c): as much as fits in 1280 */

/* One more ICMP error from this CPU allowed now? (a helper call: error path only) */
static __always_inline int icmp_allowed(void)
{
	__u32 k = 0;
	struct mup_icmp_window *w = bpf_map_lookup_elem(&mup_icmp_rate, &k);
	__u64 now;

	if (!w)
		return 0;
	now = bpf_ktime_get_ns();
	if (now - w->start_ns >= 1000000000ULL) {
		w->start_ns = now;
		w->sent = 0;
	}
	if (w->sent >= MUP_ICMP_PER_SEC)
		return 0;
	w->sent++;
	return 1;
}

/* No ICMP error for a frame sent to a link-layer group address (broadcast
 * or multicast: RFC 1122 §3.2.2, RFC 1812 §4.3.2.7, RFC 4443 §2.4 (e.4),
 * (e.5)); our answer, its MACs swapped, would also carry that group address
 * as its source. Returns the drop event, or 0. */
static __always_inline __u32 icmp_forbidden_l2(const void *eth)
{
	if (!(*(const __u8 *)eth & 1))
		return 0;
	if (*(const __u32 *)eth == 0xffffffff && *(const __u16 *)(eth + 4) == 0xffff)
		return MUP_EV_DROP_TOO_BIG_L2_BROADCAST;
	return MUP_EV_DROP_TOO_BIG_L2_MULTICAST;
}

/* IPv4 (host order): no ICMP error for a datagram whose source does not
 * define a single host (0/8, 127/8, 224/4, 240/4, 255.255.255.255) nor for
 * one sent to an IP broadcast or multicast address (RFC 1122 §3.2.2, RFC
 * 1812 §4.3.2.7): with a spoofed source we would reflect. */
static __always_inline __u32 icmp_forbidden4(__u32 s, __u32 d)
{
	if ((s >> 24) == 0)
		return MUP_EV_DROP_TOO_BIG_UNSPECIFIED;
	if ((s >> 24) == 127)
		return MUP_EV_DROP_TOO_BIG_LOOPBACK;
	if (s == 0xffffffff || d == 0xffffffff)
		return MUP_EV_DROP_TOO_BIG_BROADCAST;
	if ((s >> 28) == 0xe || (d >> 28) == 0xe)
		return MUP_EV_DROP_TOO_BIG_MULTICAST;
	if ((s >> 28) == 0xf)
		return MUP_EV_DROP_TOO_BIG_RESERVED;
	return 0;
}

/* IPv6: not to a source that does not identify one node (::, ff00::/8;
 * RFC 4443 §2.4 (e.6)) nor to ::1, which must never leave a node (RFC 4291
 * §2.5.3); not for a packet to a multicast destination either, whose
 * error we could only send from that group address (RFC 4443 §2.2). */
static __always_inline __u32 icmp_forbidden6(struct u128 s, struct u128 d)
{
	if (!s.hi && !s.lo)
		return MUP_EV_DROP_TOO_BIG_UNSPECIFIED;
	if (!s.hi && s.lo == 1)
		return MUP_EV_DROP_TOO_BIG_LOOPBACK;
	if ((s.hi >> 56) == 0xff || (d.hi >> 56) == 0xff)
		return MUP_EV_DROP_TOO_BIG_MULTICAST;
	return 0;
}

static __always_inline void eth_swap(void *eth, const struct eth_macs *m, __u16 proto)
{
	*(__u32 *)eth = m->src_hi;
	*(__u16 *)(eth + 4) = m->src_lo;
	*(__u32 *)(eth + 6) = m->dst_hi;
	*(__u16 *)(eth + 10) = m->dst_lo;
	*(__be16 *)(eth + 12) = bpf_htons(proto);
}

/* No ICMP error about an ICMP error, nor about a fragment other than the
 * first (RFC 1122 §3.2.2, RFC 1812 §4.3.2.7; RFC 4443 §2.4 (e.1)): only
 * H.M.Session.Encaps sees such packets (to a UE); the others' are GTP-U
 * or SRv6. IPv4 at `ip` (its 20 bytes checked). */
static __always_inline int icmp_about_error4(const struct iphdr *ip, const void *end)
{
	const __u8 *l4 = (const void *)ip + ((ip->ihl * 4) & 0x3c);

	if (ip->frag_off & bpf_htons(0x1fff))
		return 1;
	if (ip->protocol != IPPROTO_ICMP)
		return 0;
	if ((const void *)(l4 + 1) > end)
		return 1; /* cut short: no error about it either */
	/* Not an error: echo reply/request (0, 8), router advertisement and
	 * solicitation (9, 10), timestamp (13, 14), and the like. */
	return l4[0] == 3 || l4[0] == 4 || l4[0] == 5 || l4[0] == 11 || l4[0] == 12;
}

/* IPv6 at `ip6` (its 40 bytes checked): an ICMPv6 error right after the
 * header (types below 128), or a fragment header with a non-zero offset. */
static __always_inline int icmp_about_error6(const struct ipv6hdr *ip6, const void *end)
{
	const __u8 *l4 = (const void *)(ip6 + 1);

	if (ip6->nexthdr == IPPROTO_ICMPV6) {
		if ((const void *)(l4 + 1) > end)
			return 1;
		return l4[0] < 128;
	}
	if (ip6->nexthdr == IPPROTO_FRAGMENT) {
		if ((const void *)(l4 + 4) > end)
			return 1;
		return (*(const __be16 *)(l4 + 2) & bpf_htons(0xfff8)) != 0;
	}
	return 0;
}

/* The IPv4 packet at 14 (total length tot, checked against the frame)
 * would be too big once translated; report MTU `report` to its source.
 * The error comes from the packet's destination (ours: an N3 address), or
 * for a session's packet (to a UE, not ours) from the session's IPv4
 * source, the UPF's N3 address (at bit src_plen of its IPv6 source). */
__noinline int icmp_too_big4(struct xdp_md *ctx, __u32 bytes, __u32 tot, __s32 report, const struct mup_session *s)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct eth_macs macs;
	__be32 saddr, daddr;
	__u32 quote = tot < ICMP4_QUOTE_MAX ? tot : ICMP4_QUOTE_MAX;
	__u32 len = 20 + 8 + quote;

	if ((void *)(ip + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (!(ip->frag_off & bpf_htons(0x4000)) || icmp_about_error4(ip, end))
		return ev(MUP_EV_DROP_TOO_BIG, bytes, XDP_DROP);
	{
		__u32 why = icmp_forbidden_l2(data);

		if (!why)
			why = icmp_forbidden4(bpf_ntohl(ip->saddr), bpf_ntohl(ip->daddr));
		if (why)
			return ev(why, bytes, XDP_DROP);
	}
	if (!icmp_allowed())
		return ev(MUP_EV_DROP_TOO_BIG_RATELIMIT, bytes, XDP_DROP);
	eth_save(data, &macs);
	saddr = ip->saddr;
	daddr = ip->daddr;
	if (s) {
		struct u128 v = u128_shl(u128_load(s->sa), s->src_plen & 0x7f);

		daddr = bpf_htonl(v.hi >> 32);
	}
	if (report < 68)
		report = 68; /* RFC 791's minimum */
	if (bpf_xdp_adjust_tail(ctx, (int)(sizeof(struct ethhdr) + quote) - (int)bytes))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (bpf_xdp_adjust_head(ctx, -(20 + 8)))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		struct iphdr *o = data + sizeof(struct ethhdr);
		__u8 *icmp = (void *)(o + 1);
		__u32 sum;

		if ((void *)(icmp + 8) > end)
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		eth_swap(data, &macs, ETH_P_IP);
		o->version = 4;
		o->ihl = 5;
		o->tos = 0xc0; /* internetwork control, as the kernel's ICMP errors */
		o->tot_len = bpf_htons(len);
		o->id = 0;
		o->frag_off = 0;
		o->ttl = 64;
		o->protocol = IPPROTO_ICMP;
		o->saddr = daddr;
		o->daddr = saddr;
		o->check = bpf_htons(ipv4_csum(0xc0, len, 0, 64, IPPROTO_ICMP, bpf_ntohl(daddr), bpf_ntohl(saddr)));
		icmp[0] = 3; /* destination unreachable */
		icmp[1] = 4; /* fragmentation needed and DF set */
		*(__u16 *)(icmp + 2) = 0;
		*(__u16 *)(icmp + 4) = 0;
		*(__be16 *)(icmp + 6) = bpf_htons(report);
		sum = csum_to_end(icmp, end, 0, 2); /* 8 + 548 bytes at most */
		*(__u16 *)(icmp + 2) = csum_fold_udp(sum); /* 0 and 0xffff are the same sum */
	}
	return ev(MUP_EV_REPLY_TOO_BIG, bytes, XDP_TX);
}

/* The IPv6 packet at 14 (40 + payload_len bytes, checked against the
 * frame) would be too big once translated; report MTU `report`. From the
 * packet's destination (ours: a SID), or for a session's packet (to a UE)
 * from the session's outer IPv6 source, ours on the SRv6 side. */
__noinline int icmp_too_big6(struct xdp_md *ctx, __u32 bytes, __u32 payload_len, __s32 report, const struct mup_session *s)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct eth_macs macs;
	struct u128 saddr, daddr;
	__u32 total = sizeof(*ip6) + payload_len;
	__u32 quote = total < ICMP6_QUOTE_MAX ? total : ICMP6_QUOTE_MAX;
	__u32 plen = 8 + quote;

	if ((void *)(ip6 + 1) > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	saddr = u128_load(&ip6->saddr);
	daddr = u128_load(&ip6->daddr);
	if (icmp_about_error6(ip6, end))
		return ev(MUP_EV_DROP_TOO_BIG, bytes, XDP_DROP);
	{
		__u32 why = icmp_forbidden_l2(data);

		if (!why)
			why = icmp_forbidden6(saddr, daddr);
		if (why)
			return ev(why, bytes, XDP_DROP);
	}
	if (s)
		daddr = u128_load(s->sa);
	if (!icmp_allowed())
		return ev(MUP_EV_DROP_TOO_BIG_RATELIMIT, bytes, XDP_DROP);
	eth_save(data, &macs);
	if (report < 0)
		report = 0;
	if (bpf_xdp_adjust_tail(ctx, (int)(sizeof(struct ethhdr) + quote) - (int)bytes))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (bpf_xdp_adjust_head(ctx, -(40 + 8)))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		struct ipv6hdr *o = data + sizeof(struct ethhdr);
		__u8 *icmp = (void *)(o + 1);
		__u32 sum;

		if ((void *)(icmp + 8) > end)
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		eth_swap(data, &macs, ETH_P_IPV6);
		*(__be32 *)o = bpf_htonl(6U << 28);
		o->payload_len = bpf_htons(plen);
		o->nexthdr = IPPROTO_ICMPV6;
		o->hop_limit = 64;
		u128_store(&o->saddr, daddr);
		u128_store(&o->daddr, saddr);
		icmp[0] = 2; /* packet too big */
		icmp[1] = 0;
		*(__u16 *)(icmp + 2) = 0;
		*(__be32 *)(icmp + 4) = bpf_htonl(report);
		sum = (__u32)bpf_htons(plen) + bpf_htons(IPPROTO_ICMPV6);
		sum = bpf_csum_diff(0, 0, (void *)&o->saddr, 32, sum);
		sum = csum_to_end(icmp, end, sum, 3); /* 8 + 1232 bytes at most */
		*(__u16 *)(icmp + 2) = csum_fold_udp(sum);
	}
	return ev(MUP_EV_REPLY_TOO_BIG, bytes, XDP_TX);
}

static __always_inline int too_big4(struct xdp_md *ctx, __u32 bytes, __u32 tot, __s32 report)
{
	return icmp_too_big4(ctx, bytes, tot, report, 0);
}

static __always_inline int too_big6(struct xdp_md *ctx, __u32 bytes, __u32 payload_len, __s32 report)
{
	return icmp_too_big6(ctx, bytes, payload_len, report, 0);
}

#endif
