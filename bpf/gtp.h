/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* GTP-U v1 wire format (3GPP TS 29.281) and the PDU Session Container
 * (TS 38.415), and the parser of the optional fields and the extension
 * chain that H.M.GTP4.D (gtp4d.h) and End.M.GTP6.D (gtp6d.h) share. */
#ifndef MUP_GTP_H
#define MUP_GTP_H

#include <linux/types.h>
#include "mup_shared.h"

#define GTP_FLAGS_V1_PT    0x30  /* version 1, protocol type GTP */
#define GTP_FLAGS_VER_MASK 0xf0  /* version (3 bits) and PT */
#define GTP_FLAG_E         0x04
#define GTP_FLAG_S         0x02
#define GTP_FLAG_PN        0x01
#define GTP_TYPE_GPDU      0xff
#define GTP_TYPE_ECHO_REQ  1
#define GTP_TYPE_ECHO_RESP 2
#define GTP_TYPE_ERROR_IND 26
#define GTP_TYPE_END_MARKER 254
#define GTP_IE_RECOVERY    14   /* TV, 1-byte value */
#define GTP_IE_PRIVATE_EXT 255  /* TLV, 2-byte length */
#define GTP_EXT_PDU_SESSION 0x85
#define GTP_MAX_EXT        8

struct gtpu_hdr {
	__u8   flags;
	__u8   type;
	__be16 length;  /* bytes after the first 8 */
	__be32 teid;
};

/* The 4 optional bytes present when any of E, S, PN is set. */
struct gtpu_opt {
	__be16 seq;
	__u8   npdu;
	__u8   next_ext;
};

/* Downlink PDU Session Container as we emit it: one 4-byte unit. */
struct gtpu_pdu_session {
	__u8 len;       /* 1: in 4-byte units */
	__u8 pdu_type;  /* high nibble: 0 = DL */
	__u8 qfi;       /* PPP << 7 | RQI << 6 | QFI */
	__u8 next_ext;  /* 0: last */
};

/* Extension header types we can skip without understanding more than their
 * length. A comprehension-required type (top bits 10 or 11) not listed here
 * makes the packet undeliverable (TS 29.281 §5.2.1). */
static __always_inline int gtp_ext_known(__u8 type)
{
	switch (type) {
	case 0x81: /* RAN Container */
	case 0x82: /* Long PDCP PDU Number */
	case 0x83: /* Xw RAN Container */
	case 0x84: /* NR RAN Container */
	case 0x85: /* PDU Session Container */
	case 0xc0: /* PDCP PDU Number */
		return 1;
	}
	return type < 0x80;
}

/* What the GTP-U header and its extension chain told us. */
struct gtp_info {
	__u32 hdr_len;  /* GTP-U header incl. optional fields and extensions */
	__u8  qfi;
	__u8  rqi;
};

/* Parse the optional fields and the extension chain after the 8-byte header
 * at gtp. Returns 0 or a drop event. */
static __always_inline int gtp_parse_ext(struct gtpu_hdr *gtp, void *end,
					 __u32 gtp_total, struct gtp_info *gi)
{
	__u8 *p;
	__u8 next;
	__u32 off = sizeof(struct gtpu_hdr);

	gi->hdr_len = off;
	gi->qfi = 0;
	gi->rqi = 0;
	if (!(gtp->flags & (GTP_FLAG_E | GTP_FLAG_S | GTP_FLAG_PN)))
		return 0;

	{
		struct gtpu_opt *opt = (void *)(gtp + 1);

		if ((void *)(opt + 1) > end || gtp_total < off + sizeof(*opt))
			return MUP_EV_DROP_GTP_TRUNCATED;
		/* The next-extension field means something only with E set. */
		next = (gtp->flags & GTP_FLAG_E) ? opt->next_ext : 0;
		off += sizeof(*opt);
	}

#pragma unroll
	for (int i = 0; i <= GTP_MAX_EXT; i++) {
		__u32 elen;
		__u8 type = next;

		if (!type)
			break;
		if (i == GTP_MAX_EXT)
			return MUP_EV_DROP_GTP_EXT_CHAIN;
		p = (__u8 *)gtp + (off & 0x3fff);
		if ((void *)(p + 4) > end || off + 4 > gtp_total)
			return MUP_EV_DROP_GTP_EXT_TRUNCATED;
		elen = (__u32)p[0] * 4;
		if (!elen)
			return MUP_EV_DROP_GTP_EXT_ZERO;
		if (off + elen > gtp_total)
			return MUP_EV_DROP_GTP_EXT_TRUNCATED;
		if (!gtp_ext_known(type))
			return MUP_EV_DROP_GTP_EXT_UNKNOWN;
		if (type == GTP_EXT_PDU_SESSION) {
			/* octet 1: PDU type (high nibble); octet 2: QFI, and
			 * RQI (bit 6) in a downlink container only. */
			gi->qfi = p[2] & 0x3f;
			gi->rqi = (p[1] >> 4) == 0 ? (p[2] >> 6) & 1 : 0;
		}
		{
			__u8 *last = p + elen - 1;

			if ((void *)(last + 1) > end)
				return MUP_EV_DROP_GTP_EXT_TRUNCATED;
			next = *last;
		}
		off += elen;
	}
	gi->hdr_len = off;
	return 0;
}

#endif
