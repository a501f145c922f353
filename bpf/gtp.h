/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* GTP-U v1 wire format (3GPP TS 29.281) and the PDU Session Container
 * (TS 38.415). */
#ifndef MUP_GTP_H
#define MUP_GTP_H

#include <linux/types.h>

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

#endif
