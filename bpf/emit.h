/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* What End.M.GTP4.E and End.M.GTP6.E both push after their IP header: UDP
 * ports and length, and the GTP-U G-PDU header with or without the downlink
 * PDU Session Container (docs/datapath.md "End.M.GTP4.E output"). */
#ifndef MUP_EMIT_H
#define MUP_EMIT_H

#include <linux/types.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include "mup_shared.h"
#include "gtp.h"

/* udp, then the GTP-U header, its 4 optional bytes and the one-unit
 * container right after it (the caller checked all 24 bytes against the
 * frame). GTP length: the inner packet plus the 8 bytes of optional fields
 * and container when there is one. The UDP checksum is the caller's. */
static __always_inline void gtpu_gpdu_write(struct udphdr *udp, __u16 sport, __u32 udp_len, __u32 teid,
					    __u32 inner_len, __u8 with_psc, __u8 qfi, __u8 r)
{
	struct gtpu_hdr *gtp = (void *)(udp + 1);
	struct gtpu_opt *opt = (void *)(gtp + 1);
	struct gtpu_pdu_session *psc = (void *)(opt + 1);

	udp->source = bpf_htons(sport);
	udp->dest = bpf_htons(MUP_GTPU_PORT);
	udp->len = bpf_htons(udp_len);
	gtp->type = GTP_TYPE_GPDU;
	gtp->teid = bpf_htonl(teid);
	if (with_psc) {
		gtp->flags = GTP_FLAGS_V1_PT | GTP_FLAG_E;
		gtp->length = bpf_htons(inner_len + sizeof(*opt) + sizeof(*psc));
		opt->seq = 0;
		opt->npdu = 0;
		opt->next_ext = GTP_EXT_PDU_SESSION;
		psc->len = 1;
		psc->pdu_type = 0; /* DL */
		psc->qfi = r << 6 | qfi;
		psc->next_ext = 0;
	} else {
		gtp->flags = GTP_FLAGS_V1_PT;
		gtp->length = bpf_htons(inner_len);
	}
}

#endif
