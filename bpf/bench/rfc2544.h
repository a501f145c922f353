/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Structs shared between the RFC 2544 benchmark's programs (trafficgen,
 * sink) and user space (src/bench/rfc2544/). Not part of the data plane. */
#ifndef MUP_RFC2544_H
#define MUP_RFC2544_H

#include <linux/types.h>

#define TGEN_HEAD_MAX 128 /* frame bytes rewritten from the template per frame */
#define SINK_CHECKS 6     /* word checks per sampled frame */
#define SINK_SLOTS 2      /* receiving interfaces (one per direction) */

/* The generator's template: the first bytes of the frame to send. */
struct tgen_tmpl {
	__u32 len;       /* frame length (what ctx.data_end is) */
	__u32 head_len;  /* bytes rewritten per frame: <= 128, multiple of 8 */
	__u16 sport_off; /* offset of the inner source port (big endian), 0: none */
	__u16 sport_base;
	__u16 nflows;    /* source ports sport_base .. sport_base + nflows - 1 */
	__u16 pad;
	__u8 head[TGEN_HEAD_MAX];
};

/* One check: (big-endian 32-bit word at off) & mask == value. */
struct sink_check {
	__u32 off;
	__u32 mask;
	__u32 value;
};

/* What a receiving interface expects; keyed by its ifindex. */
struct sink_cfg {
	__u32 slot;       /* counter slot, < SINK_SLOTS */
	__u32 sample;     /* check one frame in 2^sample (per CPU) */
	__u32 nchecks;    /* <= SINK_CHECKS */
	__u32 min_len;    /* frames shorter are counted bad */
	struct sink_check checks[SINK_CHECKS];
	/* A frame whose big-endian word at pass_off equals pass_value (the
	 * latency probe's magic in its payload) is counted in `passed` and
	 * handed to the stack (XDP_PASS), where the probe's packet socket
	 * captures it; pass_off 0: none. */
	__u32 pass_off;
	__u32 pass_value;
};

/* Per-CPU counters of one slot. */
struct sink_counters {
	__u64 frames;     /* frames that passed the checks (or were not sampled) */
	__u64 bytes;
	__u64 checked;
	__u64 bad;        /* sampled frames that failed a check */
	__u64 unknown;    /* frames on an interface without a sink_cfg */
	__u64 seen;       /* every frame of the slot: picks the sample */
	__u64 passed;     /* probe frames handed to the stack (pass_off) */
};

/* The paced generator (pacedgen.bpf.c): the template above, a second field
 * varied per frame (a big-endian u32, the GTP-U TEID) and the pace. */
struct pgen_cfg {
	struct tgen_tmpl t;
	__u16 teid_off;   /* offset of the varied u32 (big endian), 0: none */
	__u16 pace_batch; /* wait only at every pace_batch-th frame (the kernel's batch), 0: every frame */
	__u32 teid_base;
	__u32 nteids;     /* values teid_base .. teid_base + nteids - 1 */
	__u32 pad3;
	__u64 interval_ps; /* picoseconds between frames, 0: as fast as possible */
	__u64 slack_ps;    /* how far behind the pace a frame may catch up */
};

/* Per-CPU state of the paced generator. */
struct pgen_state {
	__u64 seq;        /* frames sent */
	__u64 next_ps;    /* when the next frame is due (ktime, picoseconds) */
	__u64 late;       /* frames that found the pace more than slack behind */
	__u64 spun_ns;    /* time spent waiting for the pace */
};

/* Burst meter (dutaux.bpf.c): runs of frames the DUT's NAPI receives with
 * gaps below gap_ns, by log2 of their length (bucket i: 2^i .. 2^(i+1)-1). */
#define BURST_BUCKETS 16
struct burst_state {
	__u64 last_ns;
	__u64 run;
	__u64 frames;
	__u64 hist[BURST_BUCKETS];
};

#endif
