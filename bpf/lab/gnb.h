/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The lab's gNB emulator (bpf/lab/gnb.bpf.c): the structs and counter indexes
 * user space also sees (src/lab/gnb.ts writes gnb_cfg and reads the
 * counters; it checks the map's value size against sizeof here).
 */
#ifndef MUP_GNB_H
#define MUP_GNB_H

#include <linux/types.h>

/* One entry (key 0) of the config map. Addresses in network byte order,
 * as they go on the wire. The UEs are in the two UE maps. */
struct gnb_cfg {
	__u32 ue_ifindex;	/* the gNB's veth facing the UEs (downlink out) */
	__u32 n3_ifindex;	/* the gNB's N3 veth facing the translator (uplink out) */
	__be32 gnb_addr;	/* GTP-U source (uplink), destination (downlink) */
	__be32 n3_addr;		/* the translator's N3 address (uplink GTP-U destination) */
	__u8 ttl;		/* outer IPv4 TTL */
	__u8 ready;		/* 0 until user space has written the entry */
	__u8 pad[2];
	__u8 n3_dmac[6];	/* the translator's N3 MAC */
	__u8 n3_smac[6];	/* our N3 veth's MAC */
	__u8 ue_dmac[6];	/* the UEs' MAC (all UEs share the UE namespace's veth) */
	__u8 ue_smac[6];	/* our UE-facing veth's MAC */
};

/* gnb_ue_ul: UE IPv4 address (network order) -> its uplink tunnel. */
struct gnb_ue_ul {
	__be32 ul_teid;		/* TEID of the UE's uplink G-PDUs */
	__u8 qfi;		/* QFI in the uplink PDU Session Container */
	__u8 pad[3];
};

/* gnb_ue_dl: downlink TEID (network order) -> the UE it belongs to. */
struct gnb_ue_dl {
	__be32 ue_addr;		/* the inner IPv4 destination must be this UE */
	__u8 qfi;		/* the QFI the DL container should carry */
	__u8 pad[3];
};

/* Per-CPU packet counters (an array indexed by these). */
enum gnb_counter {
	GNB_UL_ENCAP = 0,	/* UE IPv4 sent as G-PDU to the translator */
	GNB_UL_PASS,		/* not from a UE of gnb_ue_ul (ARP, the plain baseline): to the kernel */
	GNB_UL_DROP_GSO,	/* a GSO packet: the GTP length cannot be per segment */
	GNB_UL_DROP_ROOM,	/* bpf_skb_adjust_room / store failed */
	GNB_DL_DECAP,		/* G-PDU for a TEID of gnb_ue_dl: inner IPv4 to its UE */
	GNB_DL_PASS,		/* not GTP-U to us (ARP, the plain baseline): to the kernel */
	GNB_DL_DROP_TEID,	/* G-PDU with a TEID no UE has */
	GNB_DL_DROP_NOT_GPDU,	/* GTP-U message other than G-PDU, or not v1/PT 1 */
	GNB_DL_DROP_MALFORMED,	/* truncated, bad GTP length, bad extension chain */
	GNB_DL_DROP_INNER,	/* inner packet not IPv4 */
	GNB_DL_DROP_ROOM,	/* bpf_skb_adjust_room failed */
	GNB_DL_QFI_MISMATCH,	/* accepted, but the DL container's QFI differs from ours (counted, not dropped) */
	GNB_DL_NO_CONTAINER,	/* accepted, without a PDU Session Container (counted, not dropped) */
	GNB_DL_DROP_UE,		/* the TEID's UE is not the inner destination */
	GNB_COUNTERS,
};

#endif
