/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Latency probe: in-band stamping, P4 style (issue 4, src/probe/).
 *
 * mup_xdp pays one branch on cfg->probe_flags. When it is set:
 *   probe_enter()  bpf_ktime_get_ns() before anything else, the ethertype in;
 *   ... the translation runs unchanged ...
 *   probe_exit()   bpf_ktime_get_ns() again, then, for a translated frame
 *                  leaving by XDP_TX or redirect whose inner packet matches
 *                  the selector (inner UDP destination port, 1 in N per CPU):
 *                  the entry time's low 46 bits into the Ethernet source MAC
 *                  (a valid unicast, locally administered address: see
 *                  docs/probe.md, "The MAC stamp"),
 *                  and a struct mup_probe_record into mup_probe_ring.
 * The function is told from the frame in and the frame out (enum
 * mup_probe_fn), so the translations themselves know nothing of the probe.
 * Frames handed to the kernel (XDP_PASS) are neither stamped nor recorded:
 * the kernel rewrites their MACs.
 */
#ifndef MUP_PROBE_H
#define MUP_PROBE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"
#include "maps.h"
#include "gtp.h"

/* Keep the probe's types in the BTF for src/dataplane/btf.ts. */
const volatile enum mup_probe_fn mup_probe_fn_btf __attribute__((used)) = MUP_PROBE_FN_GTP4D;
const volatile enum mup_probe_flag mup_probe_flag_btf __attribute__((used)) = MUP_PROBE_ON;
const volatile enum mup_probe_rec_flag mup_probe_rec_flag_btf __attribute__((used)) = MUP_PROBE_REC_SEQ;
const volatile enum mup_probe_magic mup_probe_magic_btf __attribute__((used)) = MUP_PROBE_MAGIC;
const volatile struct mup_probe_record mup_probe_record_btf __attribute__((used));
const volatile struct mup_probe_payload mup_probe_payload_btf __attribute__((used));
const volatile struct mup_probe_cpu mup_probe_cpu_btf __attribute__((used));

/* Read once at entry and once at exit (volatile: two loads, two branches). */
static __always_inline int probe_on(const struct mup_config *cfg)
{
	return __builtin_expect(*(volatile const __u32 *)&cfg->probe_flags != 0, 0);
}

static __always_inline void probe_enter(struct xdp_md *ctx)
{
	__u64 t0 = bpf_ktime_get_ns();
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct mup_probe_cpu *st;
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&mup_probe_state, &zero);
	if (!st)
		return;
	st->t0 = t0;
	st->proto_in = 0;
	st->len_in = 0;
	if ((void *)(eth + 1) > end)
		return;
	st->proto_in = eth->h_proto;
	/* The IP length in: what tells H.M.Session.Encaps, which keeps the
	 * whole packet, from H.M.GTP4.D / End.M.GTP6.D, whose inner packet is
	 * the GTP-U payload, shorter by at least 36 bytes (probe_inner). */
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) <= end)
			st->len_in = bpf_ntohs(ip->tot_len);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) <= end)
			st->len_in = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	}
}

/* Where the inner packet of a translated frame starts, and which function
 * made the frame; 0 when it is not a translation (an Echo Response, an ICMP
 * error, a passed frame). */
static __always_inline __u32 probe_inner(void *data, void *end, __u16 proto_in, __u16 len_in, __u32 *fn)
{
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__u8 nh;

	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;

		if ((void *)(ip6 + 1) > end)
			return 0;
		nh = ip6->nexthdr;
		off += sizeof(*ip6);
		if (nh == 43) { /* SRH */
			__u8 *srh = data + off;

			if ((void *)(srh + 2) > end)
				return 0;
			nh = srh[0];
			off += ((__u32)srh[1] + 1) * 8;
		}
		if (nh == IPPROTO_IPIP || nh == IPPROTO_IPV6) {
			/* SRv6 out: the frame in was GTP-U (H.M.GTP4.D,
			 * End.M.GTP6.D) unless the packet inside is the
			 * whole packet in, as long (H.M.Session.Encaps). */
			__u8 *in;
			__u16 len;

			if (off > 512)
				return 0;
			in = data + (off & 0x3ff);
			if ((void *)(in + 6) > end)
				return 0;
			if (nh == IPPROTO_IPIP)
				len = bpf_ntohs(*(__be16 *)(in + 2));
			else
				len = bpf_ntohs(*(__be16 *)(in + 4)) + sizeof(struct ipv6hdr);
			if (len == len_in)
				*fn = MUP_PROBE_FN_SESSION;
			else
				*fn = proto_in == bpf_htons(ETH_P_IP) ? MUP_PROBE_FN_GTP4D : MUP_PROBE_FN_GTP6D;
			return off;
		}
		if (nh != IPPROTO_UDP || proto_in != bpf_htons(ETH_P_IPV6))
			return 0;
		*fn = MUP_PROBE_FN_GTP6E;
	} else if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;

		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP || proto_in != bpf_htons(ETH_P_IPV6))
			return 0;
		off += ip->ihl * 4;
		*fn = MUP_PROBE_FN_GTP4E;
	} else {
		return 0;
	}

	/* GTP-U out (End.M.GTP4.E / GTP6.E): UDP to 2152, a G-PDU, its
	 * extension headers (we emit at most one, a PDU Session Container). */
	if (off > 128)
		return 0;
	{
		struct udphdr *udp = data + off;
		struct gtpu_hdr *gtp = (void *)(udp + 1);
		__u8 *opt, *last;
		int i;

		if ((void *)(gtp + 1) > end || udp->dest != bpf_htons(MUP_GTPU_PORT) || gtp->type != GTP_TYPE_GPDU)
			return 0;
		off += sizeof(*udp) + sizeof(*gtp);
		if (!(gtp->flags & (GTP_FLAG_E | GTP_FLAG_S | GTP_FLAG_PN)))
			return off;
		opt = (void *)(gtp + 1);
		if ((void *)(opt + 4) > end)
			return 0;
		nh = (gtp->flags & GTP_FLAG_E) ? opt[3] : 0;
		off += 4;
		for (i = 0; i < 2 && nh; i++) {
			__u8 *e;

			if (off > 256)
				return 0;
			e = data + off;
			if ((void *)(e + 1) > end || e[0] == 0)
				return 0;
			off += (__u32)e[0] * 4;
			if (off > 512)
				return 0;
			{
				__u32 at = off - 1; /* the last byte: the next type */

				asm volatile("" : "+r"(at)); /* a variable offset, not data - 1 */
				if (at > 511)
					return 0;
				last = data + at;
				if ((void *)(last + 1) > end)
					return 0;
				nh = *last;
			}
		}
		return nh ? 0 : off;
	}
}

/* Stamp and record a selected frame; return the verdict unchanged. */
static __always_inline int probe_exit(struct xdp_md *ctx, const struct mup_config *cfg, int verdict)
{
	__u64 t1 = bpf_ktime_get_ns();
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct mup_probe_record *r;
	struct mup_probe_cpu *st;
	__u32 zero = 0, fn = 0, off, sample;
	__u16 sport, dport;
	__u8 proto, flags = 0, *l4;
	__u64 gap, t0;

	st = bpf_map_lookup_elem(&mup_probe_state, &zero);
	if (!st)
		return verdict;
	/* 0: probing was switched on while this frame was in flight. */
	t0 = st->t0;
	st->t0 = 0;
	if (!t0)
		return verdict;
	if (verdict != XDP_TX && verdict != XDP_REDIRECT)
		return verdict;
	off = probe_inner(data, end, st->proto_in, st->len_in, &fn);
	if (!off || off > 512)
		return verdict;

	/* The inner packet: IPv4 or IPv6, then its L4 ports. */
	{
		__u8 *ip = data + off;

		if ((void *)(ip + 1) > end)
			return verdict;
		if ((ip[0] >> 4) == 4) {
			struct iphdr *ip4 = (void *)ip;

			if ((void *)(ip4 + 1) > end)
				return verdict;
			proto = ip4->protocol;
			l4 = (void *)ip4 + (ip4->ihl & 0xf) * 4;
		} else if ((ip[0] >> 4) == 6) {
			struct ipv6hdr *ip6 = (void *)ip;

			if ((void *)(ip6 + 1) > end)
				return verdict;
			proto = ip6->nexthdr;
			l4 = (void *)(ip6 + 1);
			flags |= MUP_PROBE_REC_INNER_V6;
		} else {
			return verdict;
		}
	}
	if ((void *)(l4 + 4) > end)
		return verdict;
	sport = bpf_ntohs(*(__be16 *)l4);
	dport = bpf_ntohs(*(__be16 *)(l4 + 2));
	if (cfg->probe_udp_port && (proto != IPPROTO_UDP || dport != cfg->probe_udp_port))
		return verdict;

	st->seen++;
	sample = cfg->probe_sample;
	if (sample > 1 && st->seen % sample)
		return verdict;
	gap = st->last_exit_ns ? t0 - st->last_exit_ns : 0;
	st->last_exit_ns = t1;

	if (!(cfg->probe_flags & MUP_PROBE_NO_MAC)) {
		struct ethhdr *eth = data;

		if ((void *)(eth + 1) > end)
			return verdict;
		/* 46 bits of the entry time: the first octet's low two
		 * bits stay 1 0 (locally administered, unicast), or a
		 * bridge drops the frame (a group source address). */
		eth->h_source[0] = (__u8)((t0 >> 38) & 0xfc) | 0x02;
		eth->h_source[1] = (__u8)(t0 >> 32);
		*(__be32 *)(eth->h_source + 2) = bpf_htonl(t0);
		flags |= MUP_PROBE_REC_MAC;
	}

	r = bpf_ringbuf_reserve(&mup_probe_ring, sizeof(*r), 0);
	if (!r) {
		st->ring_full++;
		return verdict;
	}
	st->recorded++;
	r->entry_ns = t0;
	r->exit_ns = t1;
	r->gap_ns = gap;
	r->seq = 0;
	r->run = 0;
	if (proto == IPPROTO_UDP) {
		struct mup_probe_payload *p = (void *)(l4 + 8);

		if ((void *)(p + 1) <= end && p->magic == bpf_htonl(MUP_PROBE_MAGIC)) {
			r->seq = bpf_ntohl(p->seq);
			r->run = bpf_ntohl(p->run);
			flags |= MUP_PROBE_REC_SEQ;
		}
	}
	r->cpu = bpf_get_smp_processor_id();
	r->ifindex = ctx->ingress_ifindex;
	r->rx_queue = ctx->rx_queue_index;
	r->cpu_count = st->seen;
	r->fn = fn;
	r->verdict = verdict;
	r->flags = flags;
	r->proto = proto;
	r->sport = sport;
	r->dport = dport;
	if (flags & MUP_PROBE_REC_INNER_V6) {
		struct ipv6hdr *ip6 = data + off;

		if ((void *)(ip6 + 1) > end) {
			bpf_ringbuf_discard(r, 0);
			return verdict;
		}
		__builtin_memcpy(r->saddr, &ip6->saddr, 16);
		__builtin_memcpy(r->daddr, &ip6->daddr, 16);
	} else {
		struct iphdr *ip4 = data + off;

		if ((void *)(ip4 + 1) > end) {
			bpf_ringbuf_discard(r, 0);
			return verdict;
		}
		__builtin_memset(r->saddr, 0, 16);
		__builtin_memset(r->daddr, 0, 16);
		__builtin_memcpy(r->saddr, &ip4->saddr, 4);
		__builtin_memcpy(r->daddr, &ip4->daddr, 4);
	}
	bpf_ringbuf_submit(r, 0);
	return verdict;
}

#endif
