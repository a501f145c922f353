/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* GTP-U path management (TS 29.281 §7.2) on the addresses we terminate:
 * an Echo Request is answered statelessly with an Echo Response sent back
 * out of the interface it came in on (XDP_TX, MACs swapped), carrying the
 * request's sequence number and a Recovery IE with restart counter 0 (the
 * receiver ignores its value, §8.2). Every other message that is not a
 * G-PDU is dropped with its own counted reason: RFC 9433 gives End Marker
 * and Error Indication no SRv6 form, and a stateless translator has no
 * session they could end. */
#ifndef MUP_ECHO_H
#define MUP_ECHO_H

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
#include "addr.h"
#include "gtp.h"
#include "csum.h"
#include "fwd.h"
#include "srh.h"

/* What we send after the UDP header: 12 bytes of GTP-U with S set, then the
 * Recovery IE. */
#define ECHO_GTP_LEN 14
#define ECHO_TTL     64

/* A message that is not a G-PDU; gtp_len checked against UDP already.
 * Returns 0 for a well-formed Echo Request (its sequence number in *seq),
 * else the drop event. */
static __always_inline int gtp_signalling(struct gtpu_hdr *gtp, void *end, __u32 gtp_len, __be16 *seq)
{
	__u8 *ie;
	__u32 pos = 4;

	if (gtp->type == GTP_TYPE_END_MARKER)
		return MUP_EV_DROP_GTP_END_MARKER;
	if (gtp->type == GTP_TYPE_ERROR_IND)
		return MUP_EV_DROP_GTP_ERROR_IND;
	if (gtp->type != GTP_TYPE_ECHO_REQ)
		return MUP_EV_DROP_GTP_UNEXPECTED;
	/* §5.1: the sequence number is mandatory in an Echo Request. */
	if (!(gtp->flags & GTP_FLAG_S) || gtp_len < 4)
		return MUP_EV_DROP_ECHO_BAD;
	{
		struct gtpu_opt *opt = (void *)(gtp + 1);

		if ((void *)(opt + 1) > end)
			return MUP_EV_DROP_ECHO_BAD;
		/* Extension headers: the IEs would start after them; none is
		 * defined for an Echo Request (docs/datapath.md). Read as IEs
		 * from here, a crafted one was answered. */
		if ((gtp->flags & GTP_FLAG_E) && opt->next_ext != 0)
			return MUP_EV_DROP_ECHO_BAD;
		*seq = opt->seq;
	}
	/* Optional IEs: Recovery (TV), then Private Extension (TLV); they
	 * must fill the message exactly. */
	ie = (__u8 *)gtp + sizeof(*gtp) + 4;
	if (pos < gtp_len && (void *)(ie + 1) <= end && *ie == GTP_IE_RECOVERY) {
		if (pos + 2 > gtp_len)
			return MUP_EV_DROP_ECHO_BAD;
		pos += 2;
		ie += 2;
	}
	if (pos < gtp_len) {
		__u32 l;

		if ((void *)(ie + 3) > end || *ie != GTP_IE_PRIVATE_EXT || pos + 3 > gtp_len)
			return MUP_EV_DROP_ECHO_BAD;
		l = (__u32)ie[1] << 8 | ie[2];
		pos += 3 + l;
	}
	if (pos != gtp_len)
		return MUP_EV_DROP_ECHO_BAD;
	return 0;
}

/* gtpu_in's answers that are not a verdict. */
#define GTPU_IN_GPDU (-1) /* a G-PDU: translate it */
#define GTPU_IN_ECHO (-2) /* a well-formed Echo Request: answer it */

/* The GTP-U header after a UDP header of udp_len bytes, as H.M.GTP4.D and
 * End.M.GTP6.D check it: whole, version 1 with PT, GTP length = UDP length
 * - 16; a message other than a G-PDU is an Echo Request to answer or a
 * counted drop. Returns GTPU_IN_GPDU (*gtp_len set), GTPU_IN_ECHO (*seq
 * set), or the verdict of a counted drop or pass. */
static __always_inline int gtpu_in(struct gtpu_hdr *gtp, void *end, __u32 udp_len, __u32 bytes,
				   __u32 *gtp_len, __be16 *seq)
{
	__u32 len;
	int rc;

	if ((void *)(gtp + 1) > end || udp_len < sizeof(struct udphdr) + sizeof(*gtp))
		return ev(MUP_EV_DROP_GTP_TRUNCATED, bytes, XDP_DROP);
	if ((gtp->flags & GTP_FLAGS_VER_MASK) != GTP_FLAGS_V1_PT)
		return ev(MUP_EV_PASS_GTP_NOT_V1, bytes, XDP_PASS);
	len = bpf_ntohs(gtp->length);
	if (len + 16 != udp_len)
		return ev(MUP_EV_DROP_GTP_BAD_LENGTH, bytes, XDP_DROP);
	*gtp_len = len;
	if (gtp->type == GTP_TYPE_GPDU)
		return GTPU_IN_GPDU;
	rc = gtp_signalling(gtp, end, len, seq);
	if (rc)
		return ev(rc, bytes, XDP_DROP);
	return GTPU_IN_ECHO;
}

/* The request's UDP checksum is checked before it is answered (RFC 1122
 * §4.1.3.4: a datagram with a non-zero, wrong checksum is discarded; RFC
 * 8200 §8.1: over IPv6 a zero checksum is wrong too). Requests longer than
 * this are not summed: dropped as drop_echo_bad (an Echo Request is 12 to a
 * few dozen bytes). */
#define ECHO_CSUM_BLOCKS 1
#define ECHO_UDP_MAX     CSUM_MAX_BYTES(ECHO_CSUM_BLOCKS)

/* The UDP datagram [udp, end) with pseudo-header partial sum `sum` (memory
 * order): 0 when its checksum verifies, else the drop event. */
static __always_inline int echo_udp_csum_ok(__u8 *udp, void *end, __u32 udp_len, __u32 sum)
{
	if (udp_len > ECHO_UDP_MAX)
		return MUP_EV_DROP_ECHO_BAD;
	sum = csum_to_end(udp, end, sum + bpf_htons(udp_len) + bpf_htons(IPPROTO_UDP), ECHO_CSUM_BLOCKS);
	return csum_fold32(sum) ? MUP_EV_DROP_ECHO_BAD_CHECKSUM : 0;
}

/* Called after the padding is trimmed, so the frame ends with the request's
 * UDP datagram. Return 0 (verified) or the drop event. */
static __always_inline int echo_csum4(struct xdp_md *ctx, __u32 tot)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	__u8 *udp;
	__u32 ihl;

	if ((void *)(ip + 1) > end)
		return MUP_EV_DROP_ADJUST;
	ihl = (ip->ihl * 4) & 0x3c;
	udp = (void *)ip + ihl;
	if ((void *)(udp + 8) > end || tot < ihl)
		return MUP_EV_DROP_ADJUST;
	/* RFC 768: a zero checksum over IPv4 means none was sent. */
	if (!*(__u16 *)(udp + 6))
		return 0;
	return echo_udp_csum_ok(udp, end, tot - ihl, bpf_csum_diff(0, 0, (void *)&ip->saddr, 8, 0));
}

/* IPv6: the UDP header after the extension headers v6_walk accepted. */
static __always_inline int echo_csum6(struct xdp_md *ctx, __u32 payload_len)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	__u32 off = 0;
	__u8 nh, *udp;

	if ((void *)(ip6 + 1) > end)
		return MUP_EV_DROP_ADJUST;
	nh = ip6->nexthdr;
	for (int i = 0; i < V6_MAX_EXT; i++) {
		__u8 *p;

		if (nh == IPPROTO_UDP)
			break;
		p = (__u8 *)(ip6 + 1) + (off & 0x1fff);
		if ((void *)(p + 2) > end)
			return MUP_EV_DROP_ADJUST;
		nh = p[0];
		off += ((__u32)p[1] + 1) * 8;
	}
	udp = (__u8 *)(ip6 + 1) + (off & 0x1fff);
	if (nh != IPPROTO_UDP || off + 8 > payload_len || (void *)(udp + 8) > end)
		return MUP_EV_DROP_ADJUST; /* v6_walk found it: never */
	/* RFC 8200 §8.1: zero is no checksum, not allowed over IPv6 (the
	 * one's complement sum could still come out right). */
	if (!*(__u16 *)(udp + 6))
		return MUP_EV_DROP_ECHO_BAD_CHECKSUM;
	return echo_udp_csum_ok(udp, end, payload_len - off, bpf_csum_diff(0, 0, (void *)&ip6->saddr, 32, 0));
}

/* Global functions: the verifier checks each once, not once per path that
 * reaches an Echo Request. 1: dropped (and counted), 0: answer it. */
__attribute__((noinline)) int mup_echo_csum4(struct xdp_md *ctx, __u32 tot, __u32 bytes)
{
	int rc = echo_csum4(ctx, tot);

	if (rc)
		mup_count(rc, bytes);
	return rc != 0;
}

__attribute__((noinline)) int mup_echo_csum6(struct xdp_md *ctx, __u32 payload_len, __u32 bytes)
{
	int rc = echo_csum6(ctx, payload_len);

	if (rc)
		mup_count(rc, bytes);
	return rc != 0;
}

/* Sum of the host-order 16-bit words of the UDP header and the GTP-U
 * message we send (checksum field 0), for the UDP checksum. */
static __always_inline __u32 echo_sum(__u16 sport, __u16 dport, __u16 seq)
{
	__u32 udp_len = sizeof(struct udphdr) + ECHO_GTP_LEN;

	return sport + dport + udp_len + udp_len /* pseudo header */ + IPPROTO_UDP +
	       (GTP_FLAGS_V1_PT | GTP_FLAG_S) * 256 + GTP_TYPE_ECHO_RESP + 6 + seq +
	       GTP_IE_RECOVERY * 256;
}

static __always_inline __u32 sum128(struct u128 a)
{
	return (a.hi >> 48) + ((a.hi >> 32) & 0xffff) + ((a.hi >> 16) & 0xffff) + (a.hi & 0xffff) +
	       (a.lo >> 48) + ((a.lo >> 32) & 0xffff) + ((a.lo >> 16) & 0xffff) + (a.lo & 0xffff);
}

/* Write UDP + GTP-U Echo Response at udp (14 + 8 bytes checked by the caller). */
static __always_inline void echo_write(struct udphdr *udp, __u16 dport, __be16 seq, __u32 sum)
{
	struct gtpu_hdr *g = (void *)(udp + 1);
	struct gtpu_opt *opt = (void *)(g + 1);
	__u8 *ie = (void *)(opt + 1);

	udp->source = bpf_htons(MUP_GTPU_PORT);
	udp->dest = bpf_htons(dport);
	udp->len = bpf_htons(sizeof(struct udphdr) + ECHO_GTP_LEN);
	udp->check = bpf_htons(csum_fold32(sum) ? csum_fold32(sum) : 0xffff);
	g->flags = GTP_FLAGS_V1_PT | GTP_FLAG_S;
	g->type = GTP_TYPE_ECHO_RESP;
	g->length = bpf_htons(6);
	g->teid = 0;
	opt->seq = seq;
	opt->npdu = 0;
	opt->next_ext = 0;
	ie[0] = GTP_IE_RECOVERY;
	ie[1] = 0;
}

/* IPv4: the request ends at 14 + tot (padding not yet trimmed). */
static __always_inline int echo_reply4(struct xdp_md *ctx, __u32 bytes, __u32 tot,
				       __be32 saddr, __be32 daddr, __be16 sport, __be16 seq)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 new_len = sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr) + ECHO_GTP_LEN;
	__u32 ip_tot = new_len - sizeof(struct ethhdr);
	struct eth_macs macs;
	__u32 sum;

	if ((void *)data + 12 > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	eth_save(data, &macs);
	if (bytes > sizeof(struct ethhdr) + tot &&
	    bpf_xdp_adjust_tail(ctx, (int)(sizeof(struct ethhdr) + tot) - (int)bytes))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (mup_echo_csum4(ctx, tot, bytes))
		return XDP_DROP; /* counted there */
	if (bpf_xdp_adjust_head(ctx, (int)(sizeof(struct ethhdr) + tot) - (int)new_len))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		struct ethhdr *eth = data;
		struct iphdr *ip = (void *)(eth + 1);
		struct udphdr *udp = (void *)(ip + 1);
		__u32 s = bpf_ntohl(daddr), d = bpf_ntohl(saddr);

		if ((void *)eth + new_len > end)
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		/* Back to the neighbour it came from. */
		*(__u32 *)eth = macs.src_hi;
		*(__u16 *)((void *)eth + 4) = macs.src_lo;
		*(__u32 *)((void *)eth + 6) = macs.dst_hi;
		*(__u16 *)((void *)eth + 10) = macs.dst_lo;
		eth->h_proto = bpf_htons(ETH_P_IP);
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = 0;
		ip->tot_len = bpf_htons(ip_tot);
		ip->id = 0;
		ip->frag_off = bpf_htons(0x4000);
		ip->ttl = ECHO_TTL;
		ip->protocol = IPPROTO_UDP;
		ip->saddr = daddr;
		ip->daddr = saddr;
		ip->check = bpf_htons(ipv4_csum(0, ip_tot, 0x4000, ECHO_TTL, IPPROTO_UDP, s, d));
		sum = echo_sum(MUP_GTPU_PORT, bpf_ntohs(sport), bpf_ntohs(seq)) +
		      (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff);
		echo_write(udp, bpf_ntohs(sport), seq, sum);
	}
	return ev(MUP_EV_REPLY_ECHO, bytes, XDP_TX);
}

/* IPv6: the request ends at 14 + 40 + payload_len. */
static __always_inline int echo_reply6(struct xdp_md *ctx, __u32 bytes, __u32 payload_len,
				       struct u128 saddr, struct u128 daddr, __be16 sport, __be16 seq)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 old_len = sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + payload_len;
	__u32 udp_len = sizeof(struct udphdr) + ECHO_GTP_LEN;
	__u32 new_len = sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + udp_len;
	struct eth_macs macs;
	__u32 sum;

	if ((void *)data + 12 > end)
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	eth_save(data, &macs);
	if (bytes > old_len && bpf_xdp_adjust_tail(ctx, (int)old_len - (int)bytes))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	if (mup_echo_csum6(ctx, payload_len, bytes))
		return XDP_DROP; /* counted there */
	if (bpf_xdp_adjust_head(ctx, (int)old_len - (int)new_len))
		return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		struct ethhdr *eth = data;
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct udphdr *udp = (void *)(ip6 + 1);

		if ((void *)eth + new_len > end)
			return ev(MUP_EV_DROP_ADJUST, bytes, XDP_DROP);
		*(__u32 *)eth = macs.src_hi;
		*(__u16 *)((void *)eth + 4) = macs.src_lo;
		*(__u32 *)((void *)eth + 6) = macs.dst_hi;
		*(__u16 *)((void *)eth + 10) = macs.dst_lo;
		eth->h_proto = bpf_htons(ETH_P_IPV6);
		*(__be32 *)ip6 = bpf_htonl(6U << 28);
		ip6->payload_len = bpf_htons(udp_len);
		ip6->nexthdr = IPPROTO_UDP;
		ip6->hop_limit = ECHO_TTL;
		u128_store(&ip6->saddr, daddr);
		u128_store(&ip6->daddr, saddr);
		sum = echo_sum(MUP_GTPU_PORT, bpf_ntohs(sport), bpf_ntohs(seq)) + sum128(saddr) + sum128(daddr);
		echo_write(udp, bpf_ntohs(sport), seq, sum);
	}
	return ev(MUP_EV_REPLY_ECHO, bytes, XDP_TX);
}

#endif
