// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * The lab's gNB emulator (not part of the translator): two TC ingress
 * programs on the gNB namespace's veths (src/lab/gnb.ts attaches them).
 *
 *   gnb_uplink   on the UE-facing veth: IPv4 from a UE (gnb_ue_ul, keyed
 *                on the source address) gets outer IPv4/UDP 2152/GTP-U
 *                (G-PDU, that UE's uplink TEID, PDU Session Container UL
 *                with its QFI) toward the translator's N3 address and
 *                leaves by the N3 veth.
 *   gnb_downlink on the N3 veth: G-PDUs to the gNB address with a UE's
 *                downlink TEID (gnb_ue_dl) whose inner destination is that
 *                UE lose their outer headers and go to the UE.
 *
 * TC, not XDP, so that packet sockets on the N3 veth (tcpdump, the latency
 * probe) see the frames on the wire. Everything else passes to the kernel
 * (ARP, the plain-routed baseline); every drop is counted by reason.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "gnb.h"

#define GTPU_PORT 2152
#define GTP_GPDU 0xff
#define GTP_EXT_PDU_SESSION 0x85
/* Outer IPv4 (20) + UDP (8) + GTP-U (8) + seq/N-PDU/next (4) + container (4). */
#define GNB_ENCAP_LEN 44
#define GNB_MAX_EXT 4

_Static_assert(sizeof(struct gnb_cfg) == 44, "struct gnb_cfg is 44 bytes (src/lab/gnb.ts)");
_Static_assert(sizeof(struct gnb_ue_ul) == 8, "struct gnb_ue_ul is 8 bytes (src/lab/gnb.ts)");
_Static_assert(sizeof(struct gnb_ue_dl) == 8, "struct gnb_ue_dl is 8 bytes (src/lab/gnb.ts)");

#define GNB_MAX_UES 4096

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gnb_cfg);
} gnb_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GNB_MAX_UES);
	__type(key, __be32);
	__type(value, struct gnb_ue_ul);
} gnb_ue_ul SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GNB_MAX_UES);
	__type(key, __be32);
	__type(value, struct gnb_ue_dl);
} gnb_ue_dl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GNB_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} gnb_counters SEC(".maps");

struct gnb_encap {
	struct iphdr ip;
	struct udphdr udp;
	__u8 flags;
	__u8 type;
	__be16 length;
	__be32 teid;
	__be16 seq;
	__u8 npdu;
	__u8 next;
	__u8 ext_len;
	__u8 pdu_type;
	__u8 qfi;
	__u8 ext_next;
};

_Static_assert(sizeof(struct gnb_encap) == GNB_ENCAP_LEN, "outer headers are 44 bytes");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&gnb_counters, &idx);

	if (c)
		*c += 1;
}

static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

static __always_inline __u16 ip_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 s = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	return csum_fold(s);
}

SEC("tc")
int gnb_uplink(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct gnb_cfg *cfg = bpf_map_lookup_elem(&gnb_config, &zero);
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct gnb_encap h = {};
	struct gnb_ue_ul *ue;
	__be32 saddr;
	__u16 inner_len;
	__u32 hash;

	if (!cfg || !cfg->ready || (void *)(ip + 1) > data_end ||
	    eth->h_proto != bpf_htons(ETH_P_IP)) {
		count(GNB_UL_PASS);
		return TC_ACT_OK;
	}
	saddr = ip->saddr;
	ue = bpf_map_lookup_elem(&gnb_ue_ul, &saddr);
	if (!ue) {
		count(GNB_UL_PASS);
		return TC_ACT_OK;
	}
	if (skb->gso_size != 0) {
		count(GNB_UL_DROP_GSO);
		return TC_ACT_SHOT;
	}
	inner_len = bpf_ntohs(ip->tot_len);
	/* Per-flow UDP source port (ECMP entropy): addresses, protocol and, for
	 * TCP/UDP without IP options, the ports. */
	hash = ip->saddr ^ ip->daddr ^ ((__u32)ip->protocol << 16);
	if (ip->ihl == 5 && (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) &&
	    (void *)(ip + 1) + 4 <= data_end)
		hash ^= *(__u32 *)(ip + 1);
	hash ^= hash >> 16;
	hash *= 0x45d9f3b;
	hash ^= hash >> 16;

	h.ip.version = 4;
	h.ip.ihl = 5;
	h.ip.tot_len = bpf_htons(inner_len + GNB_ENCAP_LEN);
	h.ip.frag_off = bpf_htons(0x4000); /* DF */
	h.ip.ttl = cfg->ttl;
	h.ip.protocol = IPPROTO_UDP;
	h.ip.saddr = cfg->gnb_addr;
	h.ip.daddr = cfg->n3_addr;
	h.ip.check = ip_csum(&h.ip);
	h.udp.source = bpf_htons(49152 | (hash & 0x3fff));
	h.udp.dest = bpf_htons(GTPU_PORT);
	h.udp.len = bpf_htons(inner_len + GNB_ENCAP_LEN - sizeof(struct iphdr));
	h.udp.check = 0;
	h.flags = 0x34; /* version 1, PT 1, E */
	h.type = GTP_GPDU;
	h.length = bpf_htons(inner_len + 8);
	h.teid = ue->ul_teid;
	h.next = GTP_EXT_PDU_SESSION;
	h.ext_len = 1;
	h.pdu_type = 0x10; /* PDU Type 1 = UL */
	h.qfi = ue->qfi & 0x3f;
	h.ext_next = 0;

	if (bpf_skb_adjust_room(skb, GNB_ENCAP_LEN, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP) ||
	    bpf_skb_store_bytes(skb, sizeof(struct ethhdr), &h, sizeof(h), 0) ||
	    bpf_skb_store_bytes(skb, 0, cfg->n3_dmac, 6, 0) ||
	    bpf_skb_store_bytes(skb, 6, cfg->n3_smac, 6, 0)) {
		count(GNB_UL_DROP_ROOM);
		return TC_ACT_SHOT;
	}
	count(GNB_UL_ENCAP);
	return bpf_redirect(cfg->n3_ifindex, 0);
}

SEC("tc")
int gnb_downlink(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct gnb_cfg *cfg = bpf_map_lookup_elem(&gnb_config, &zero);
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp;
	struct gnb_ue_dl *ue;
	__be32 teid;
	__u8 *gtp;
	__u32 ihl, off, udp_len, base;
	__u8 next, qfi = 0xff;
	int ext;

	if (!cfg || !cfg->ready || (void *)(ip + 1) > data_end ||
	    eth->h_proto != bpf_htons(ETH_P_IP) || ip->daddr != cfg->gnb_addr ||
	    ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x3fff))) {
		count(GNB_DL_PASS);
		return TC_ACT_OK;
	}
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip) || ihl > 60) {
		count(GNB_DL_DROP_MALFORMED);
		return TC_ACT_SHOT;
	}
	udp = (void *)ip + ihl;
	if ((void *)(udp + 1) > data_end) {
		count(GNB_DL_DROP_MALFORMED);
		return TC_ACT_SHOT;
	}
	if (udp->dest != bpf_htons(GTPU_PORT)) {
		count(GNB_DL_PASS);
		return TC_ACT_OK;
	}
	gtp = (__u8 *)(udp + 1);
	if ((void *)(gtp + 8) > data_end) {
		count(GNB_DL_DROP_MALFORMED);
		return TC_ACT_SHOT;
	}
	if ((gtp[0] & 0xf0) != 0x30 || gtp[1] != GTP_GPDU) {
		count(GNB_DL_DROP_NOT_GPDU);
		return TC_ACT_SHOT;
	}
	teid = *(__be32 *)(gtp + 4);
	ue = bpf_map_lookup_elem(&gnb_ue_dl, &teid);
	if (!ue) {
		count(GNB_DL_DROP_TEID);
		return TC_ACT_SHOT;
	}
	udp_len = bpf_ntohs(udp->len);
	if (udp_len < 16 || bpf_ntohs(*(__be16 *)(gtp + 2)) != udp_len - 16) {
		count(GNB_DL_DROP_MALFORMED);
		return TC_ACT_SHOT;
	}
	base = (__u32)sizeof(*eth) + ihl + sizeof(*udp);
	off = 8;
	if (gtp[0] & 0x07) {
		if ((void *)(gtp + 12) > data_end) {
			count(GNB_DL_DROP_MALFORMED);
			return TC_ACT_SHOT;
		}
		next = gtp[11];
		off = 12;
		/* Extension headers: [length in 4-byte units][content][next type]. */
		for (ext = 0; ext < GNB_MAX_EXT; ext++) {
			__u8 e[4];
			__u32 len;

			if (next == 0)
				break;
			if (bpf_skb_load_bytes(skb, base + off, e, 4) || e[0] == 0) {
				count(GNB_DL_DROP_MALFORMED);
				return TC_ACT_SHOT;
			}
			len = (__u32)e[0] * 4;
			if (next == GTP_EXT_PDU_SESSION)
				qfi = e[2] & 0x3f;
			/* The next-type byte is the extension's last. */
			if (bpf_skb_load_bytes(skb, base + off + len - 1, &next, 1)) {
				count(GNB_DL_DROP_MALFORMED);
				return TC_ACT_SHOT;
			}
			off += len;
			if (off > 255) {
				count(GNB_DL_DROP_MALFORMED);
				return TC_ACT_SHOT;
			}
		}
		if (next != 0) {
			count(GNB_DL_DROP_MALFORMED);
			return TC_ACT_SHOT;
		}
	}
	{
		struct iphdr inner;

		if (bpf_skb_load_bytes(skb, base + off, &inner, sizeof(inner))) {
			count(GNB_DL_DROP_MALFORMED);
			return TC_ACT_SHOT;
		}
		if (inner.version != 4) {
			count(GNB_DL_DROP_INNER);
			return TC_ACT_SHOT;
		}
		if (inner.daddr != ue->ue_addr) {
			count(GNB_DL_DROP_UE);
			return TC_ACT_SHOT;
		}
	}
	if (qfi == 0xff)
		count(GNB_DL_NO_CONTAINER);
	else if (qfi != (ue->qfi & 0x3f))
		count(GNB_DL_QFI_MISMATCH);

	if (bpf_skb_adjust_room(skb, -(__s32)(ihl + sizeof(*udp) + off), BPF_ADJ_ROOM_MAC, 0) ||
	    bpf_skb_store_bytes(skb, 0, cfg->ue_dmac, 6, 0) ||
	    bpf_skb_store_bytes(skb, 6, cfg->ue_smac, 6, 0)) {
		count(GNB_DL_DROP_ROOM);
		return TC_ACT_SHOT;
	}
	count(GNB_DL_DECAP);
	return bpf_redirect(cfg->ue_ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
