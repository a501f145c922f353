/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Everything user space sees of the data plane: map keys and values, the
 * global configuration, counter indices. Defined once, here. TypeScript reads
 * the same layouts from the object's BTF (src/dataplane/btf.ts) and refuses to
 * run when its own codec disagrees, so the two cannot drift.
 */
#ifndef MUP_SHARED_H
#define MUP_SHARED_H

#include <linux/types.h>

/* Limits both sides depend on. An enum, not #defines, so that they are in
 * the object's BTF and user space checks its own copies against them. */
enum mup_limits {
	MUP_MAX_SEGS = 4,      /* policy segments S1..Sk before the last SID */
	MUP_MAX_PLENS = 16,    /* distinct prefix lengths per table */
	MUP_EVENT_SLOTS = 64,  /* counter slots before the per-rule ones */
	MUP_RETIRED_SLOT = 58, /* first of the MUP_FN_COUNT slots of rules gone (enum mup_function) */
	MUP_GTPU_PORT = 2152,
};

/* Policy table key (H.M.GTP4.D): longest match over the 64-bit value
 * IPv4 DA || TEID, as a BGP MUP Type 2 Session Transformed route's endpoint
 * || TEID prefix. plen <= 32: the DA prefix alone (teid = 0); plen 33..64: a
 * /32 DA and the TEID's first plen - 32 bits (docs/design.md). The program
 * looks up one exact-match entry per configured length, longest first: the
 * cost depends on the number of lengths, not of rules. */
struct mup_policy_key {
	__u32 plen;   /* 0..64 */
	__u32 daddr;  /* network order, masked to plen */
	__u32 teid;   /* network order, masked to plen - 32 */
};

enum mup_srh_mode {
	MUP_SRH_AUTO = 0,    /* no SRH when the SID list is just the last SID */
	MUP_SRH_ALWAYS = 1,  /* SRH even for a single SID */
	MUP_SRH_REDUCED = 2, /* H.Encaps.Red: S1 only in the DA */
};

struct mup_policy {
	__u8  sr_prefix[16];  /* masked to sr_plen */
	__u8  src_prefix[16]; /* masked to src_plen */
	__u8  segs[MUP_MAX_SEGS][16]; /* S1..Sk, in path order */
	__u32 rule;           /* counter index of this rule */
	__u8  sr_plen;        /* L, <= 56 */
	__u8  src_plen;       /* P, <= 96 */
	__u8  nsegs;          /* k, 0..MUP_MAX_SEGS */
	__u8  srh_mode;       /* enum mup_srh_mode */
	__u8  hop_limit;
	__u8  flags;          /* enum mup_policy_flag */
	__u16 mtu;            /* egress MTU of the translated packet, 0 = not checked (mtu.h) */
};

/* mup_policy.flags. */
enum mup_policy_flag {
	/* The last SID is sr_prefix as is (sr_plen 128): a PE's End.DT4/DT6/
	 * DT46 SID, no IPv4 DA or Args.Mob.Session in it. */
	MUP_POL_PLAIN_SID = 1,
	/* Not a rule: the /32 entry of an N3 address that has (N3, TEID)
	 * policies but no policy of its own without a TEID. Makes the address
	 * ours for messages other than G-PDU (matched by the address alone);
	 * a G-PDU lookup skips it and goes on to shorter prefixes
	 * (lookup.h). User space adds and removes it with the TEID policies. */
	MUP_POL_ADDR_ONLY = 2,
};

/* Local SID table key (End.M.GTP4.E): exact match per configured length. */
struct mup_localsid_key {
	__u32 plen;      /* 0..128 */
	__u8  addr[16];  /* masked to plen */
};

enum mup_container_mode {
	MUP_CONTAINER_ALWAYS = 0,
	MUP_CONTAINER_AUTO = 1,  /* only when QFI or R is non-zero */
	MUP_CONTAINER_NEVER = 2,
};

/* What a local SID does with a packet addressed to it. */
enum mup_behavior {
	MUP_BEH_GTP4E = 0,     /* End.M.GTP4.E: SRv6 in, GTP-U/IPv4 out */
	MUP_BEH_GTP6E = 1,     /* End.M.GTP6.E: SRv6 in, GTP-U/IPv6 out */
	MUP_BEH_GTP6D = 2,     /* End.M.GTP6.D: GTP-U/IPv6 in, SRv6 out */
	MUP_BEH_GTP6D_DI = 3,  /* End.M.GTP6.D.Di: the same, original DA kept as SRH[0] */
};

struct mup_localsid {
	__u32 rule;       /* counter index of this rule */
	__u8  sid_plen;   /* L: <= 56 (GTP4.E), <= 88 (GTP6.E), <= 128 (GTP6.D) */
	__u8  src_plen;   /* P, <= 96 (GTP4.E only) */
	__u8  container;  /* enum mup_container_mode (GTP4.E, GTP6.E) */
	__u8  ttl;        /* outer IPv4 TTL (GTP4.E) or IPv6 hop limit (GTP6.E) */
	/* Added for GTP-U over IPv6; a GTP4.E entry leaves them zero. */
	__u8  behavior;   /* enum mup_behavior */
	__u8  pad;
	__u16 mtu;        /* egress MTU of the translated packet, 0 = not checked (mtu.h) */
	__u8  pad2[4];
	/* End.M.GTP6.D/.Di: the SR policy (sr_prefix = prefix of the last
	 * SID B, which gets Args.Mob.Session at bit sr_plen <= 88; src_prefix
	 * = the outer IPv6 source A, all 128 bits; segs, srh_mode, hop_limit).
	 * End.M.GTP6.E: src_prefix = the outer IPv6 source A. */
	struct mup_policy pol;
};

/* PE downlink encapsulation, H.M.Session.Encaps (session.h, docs/spec.md
 * "PE downlink: H.M.Session.Encaps"). Key: a UE prefix, IPv4 or IPv6,
 * exact match per configured length (longest first), as for policies.
 * IPv4: addr[0..3] = the address, addr[4..15] = 0. */
enum mup_session_family {
	MUP_SESSION_V4 = 4,
	MUP_SESSION_V6 = 6,
};

struct mup_session_key {
	__u8  family;    /* enum mup_session_family */
	__u8  plen;      /* 0..32 (IPv4), 0..128 (IPv6) */
	__u8  pad[2];
	__u8  addr[16];  /* network order, masked to plen */
};

/* Everything of the outer header is fixed per session, so user space
 * composes it once (src/sid/mobile.ts): da = isd | gNB IPv4 |
 * Args.Mob.Session(QFI, R, U = 0, TEID) at bit L (RFC 9433 §6.1, the
 * End.M.GTP4.E SID of §6.6), sa = src_prefix | UPF N3 IPv4 at bit P. */
struct mup_session {
	__u8  da[16];         /* the last SID */
	__u8  sa[16];         /* the outer IPv6 source */
	__u8  segs[MUP_MAX_SEGS][16]; /* S1..Sk, in path order */
	__u32 rule;           /* counter index of this rule */
	__u8  nsegs;          /* k, 0..MUP_MAX_SEGS */
	__u8  srh_mode;       /* enum mup_srh_mode */
	__u8  hop_limit;
	__u8  src_plen;       /* P: the IPv4 source (the UPF's N3 address) sits at bit P of sa; the source of our ICMP errors about IPv4 packets to the UE */
	__u16 mtu;            /* egress MTU of the encapsulated packet, 0 = not checked (mtu.h) */
	__u8  pad2[2];
};

enum mup_fwd_mode {
	MUP_FWD_FIB = 0,    /* bpf_fib_lookup + redirect, kernel on a miss */
	MUP_FWD_TX = 1,     /* swap MACs, XDP_TX (replay, benchmarks, one-armed) */
	MUP_FWD_KERNEL = 2, /* XDP_PASS the translated frame, kernel forwards */
};

/* Global configuration, a BTF global (.data map) written by user space. */
struct mup_config {
	__u32 fwd_mode;        /* enum mup_fwd_mode */
	__u32 hash_seed;
	__u16 sport_base;      /* outer UDP source port range: base .. base+span-1 */
	__u16 sport_pad;
	__u32 sport_span;      /* 1..65536 */
	__u8  n_policy_plens;
	__u8  n_localsid_plens;
	__u8  policy_plens[MUP_MAX_PLENS];   /* longest first */
	__u8  localsid_plens[MUP_MAX_PLENS]; /* longest first */
	__u8  pad[2];
	/* Latency probe (probe.h), appended. probe_flags == 0: off, and the
	 * program pays one branch on it. */
	__u32 probe_flags;     /* MUP_PROBE_ON | ... */
	__u32 probe_sample;    /* record 1 in N selected packets per CPU; 0 and 1: every one */
	__u16 probe_udp_port;  /* inner UDP destination port to select, host order; 0: any inner packet */
	__u16 probe_pad;
	/* Change with every policy (local SID) added, replaced or deleted:
	 * what a CPU's copy of the last one it found (lookup.h) was taken
	 * under. Appended. */
	__u32 policy_gen;
	__u32 localsid_gen;
	/* Sessions (session.h), appended: the UE prefix lengths per family,
	 * longest first. Both 0: no session, and the program pays one load
	 * and a branch per packet for them. */
	__u8  n_session4_plens;
	__u8  n_session6_plens;
	__u8  session4_plens[MUP_MAX_PLENS];
	__u8  session6_plens[MUP_MAX_PLENS];
	__u8  session_pad[2];
};

/* One counter slot: the packets and bytes (as received) of one event. */
struct mup_counter {
	__u64 packets;
	__u64 bytes;
};

/*
 * Drops are for packets addressed to us (a policy prefix or a local SID). A
 * malformed packet for anyone else is passed to the kernel, which keeps its
 * own error counters for it.
 *
 * Counter slots 0..MUP_EV_MAX-1 are events: what happened to a packet.
 * Every packet the program sees lands in exactly one of them, so their sum is
 * the number of packets seen (slots MUP_RETIRED_SLOT.. before
 * MUP_EVENT_SLOTS are the retired slots, enum mup_function below). Slots
 * MUP_EVENT_SLOTS + rule count packets per rule (policy, local SID or
 * session) in addition. User space takes the event names
 * from this enum's BTF (src/dataplane/btf.ts): lower case, without MUP_EV_.
 */
enum mup_event {
	/* Not for us: handed to the kernel unchanged. */
	MUP_EV_PASS_NOT_IP = 0,        /* not IPv4/IPv6 (ARP, VLAN, ...) */
	MUP_EV_PASS_NOT_GTPU = 1,      /* IPv4 but not UDP to port 2152 */
	MUP_EV_PASS_NO_POLICY = 2,     /* GTP-U to an address with no policy */
	MUP_EV_PASS_V4_FRAGMENT = 3,   /* matching IPv4 fragment: not translated */
	MUP_EV_PASS_GTP_NOT_V1 = 4,    /* version != 1 or PT != 1 */
	MUP_EV_PASS_GTP_SIGNALLING = 5,/* no longer counted: see MUP_EV_REPLY_ECHO and below */
	MUP_EV_PASS_NO_LOCALSID = 6,   /* IPv6 not to a local SID */
	MUP_EV_PASS_MALFORMED = 7,     /* malformed, not addressed to us: the kernel judges */
	/* Translated: how the result left. */
	MUP_EV_FWD_TX = 8,             /* XDP_TX (fwd_mode tx, or FIB egress = ingress) */
	MUP_EV_FWD_REDIRECT = 9,       /* FIB hit, redirected */
	MUP_EV_FWD_KERNEL = 10,        /* fwd_mode kernel: XDP_PASS */
	MUP_EV_FWD_FIB_MISS = 11,      /* FIB lookup found no neighbour: XDP_PASS */
	MUP_EV_FWD_FIB_FAIL = 12,      /* no route, blackhole, ...: XDP_PASS */
	MUP_EV_FWD_FIB_FRAG = 13,      /* larger than the egress MTU: XDP_PASS */
	MUP_EV_FWD_CACHED = 14,        /* cached next hop (no FIB lookup): redirected, or XDP_TX when egress = ingress */
	/* Dropped, by reason. */
	MUP_EV_DROP_V4_TRUNCATED = 16,     /* frame ends before the IPv4 total length */
	MUP_EV_DROP_V4_BAD_HEADER = 17,    /* version != 4, IHL < 5, total length < IHL */
	MUP_EV_DROP_UDP_TRUNCATED = 18,
	MUP_EV_DROP_UDP_BAD_LENGTH = 19,   /* UDP length vs IPv4 payload */
	MUP_EV_DROP_GTP_TRUNCATED = 20,
	MUP_EV_DROP_GTP_BAD_LENGTH = 21,   /* GTP length != UDP length - 16 */
	MUP_EV_DROP_GTP_EXT_ZERO = 22,     /* extension header of length 0 */
	MUP_EV_DROP_GTP_EXT_TRUNCATED = 23,
	MUP_EV_DROP_GTP_EXT_CHAIN = 24,    /* more than 8 extension headers */
	MUP_EV_DROP_GTP_EXT_UNKNOWN = 25,  /* unknown comprehension-required type */
	MUP_EV_DROP_INNER_NOT_IP = 26,     /* inner PDU neither IPv4 nor IPv6 */
	MUP_EV_DROP_INNER_TRUNCATED = 27,  /* inner IP header cut short */
	MUP_EV_DROP_V6_TRUNCATED = 28,     /* extension header cut short */
	MUP_EV_DROP_V6_BAD_LENGTH = 29,    /* payload length vs frame */
	MUP_EV_DROP_V6_BAD_EXT = 30,       /* unsupported routing type, chain too long */
	MUP_EV_DROP_SRH_SL_NONZERO = 31,   /* End.M.GTP4.E with Segments Left != 0 */
	MUP_EV_DROP_HOP_LIMIT = 32,        /* hop limit <= 1 */
	MUP_EV_DROP_ADJUST = 33,           /* bpf_xdp_adjust_head/tail refused */
	MUP_EV_DROP_BAD_RULE = 34,         /* table entry out of range (never expected) */
	MUP_EV_DROP_V6_BAD_HEADER = 35,    /* IPv6 ethertype, version != 6 */
	/* GTP-U over IPv6 (End.M.GTP6.*) */
	MUP_EV_DROP_SRH_SL_NOT_ONE = 36,   /* End.M.GTP6.E with Segments Left != 1 */
	MUP_EV_DROP_SRH_MISSING = 37,      /* End.M.GTP6.E without an SRH (no SRH[0] = gNB) */
	MUP_EV_DROP_GTP6_NOT_GTPU = 38,    /* to an End.M.GTP6.D SID, not UDP to port 2152 */
	/* GTP-U messages other than G-PDU, to an address we terminate
	 * (a policy prefix, an End.M.GTP6.D SID): never passed on. */
	MUP_EV_REPLY_ECHO = 39,            /* Echo Request answered with an Echo Response (XDP_TX) */
	MUP_EV_DROP_ECHO_BAD = 40,         /* Echo Request without S flag or with broken IEs */
	MUP_EV_DROP_GTP_END_MARKER = 41,   /* RFC 9433 defines no SRv6 form of it: dropped */
	MUP_EV_DROP_GTP_ERROR_IND = 42,    /* stateless: no session to tear down, no SRv6 form */
	MUP_EV_DROP_GTP_UNEXPECTED = 43,   /* Echo Response, any other message type */
	/* Larger than the rule's egress MTU after translation (mtu.h). */
	MUP_EV_REPLY_TOO_BIG = 44,         /* dropped; ICMP Fragmentation Needed / ICMPv6 Packet Too Big sent back instead (XDP_TX) */
	MUP_EV_DROP_TOO_BIG = 45,          /* dropped, no ICMP: IPv4 with DF clear (we do not fragment); an ICMP error or a non-first fragment (mtu.h) */
	MUP_EV_DROP_TOO_BIG_RATELIMIT = 46,/* dropped, no ICMP: this CPU sent its ICMP errors for this second */
	MUP_EV_DROP_TOO_LONG = 47,         /* End.M.GTP6.E: UDP over 9,727 bytes, beyond our checksum loop (generic mode only) */
	/* A G-PDU to an N3 address of (N3, TEID) policies whose TEID none of
	 * them covers (and no shorter prefix of the address does). */
	MUP_EV_DROP_NO_TEID_POLICY = 48,
	/* Too big, and no ICMP error allowed (RFC 1122 §3.2.2, RFC 1812
	 * §4.3.2.7, RFC 4443 §2.4 (e); mtu.h, docs/datapath.md): dropped. */
	MUP_EV_DROP_TOO_BIG_L2_BROADCAST = 49, /* frame sent to ff:ff:ff:ff:ff:ff */
	MUP_EV_DROP_TOO_BIG_L2_MULTICAST = 50, /* frame sent to another group MAC (I/G bit set) */
	MUP_EV_DROP_TOO_BIG_UNSPECIFIED = 51,  /* source 0.0.0.0/8 ("this network") or :: */
	MUP_EV_DROP_TOO_BIG_LOOPBACK = 52,     /* source 127.0.0.0/8 or ::1 */
	MUP_EV_DROP_TOO_BIG_MULTICAST = 53,    /* source 224.0.0.0/4 or ff00::/8; or such a destination */
	MUP_EV_DROP_TOO_BIG_BROADCAST = 54,    /* source or destination 255.255.255.255 */
	MUP_EV_DROP_TOO_BIG_RESERVED = 55,     /* source 240.0.0.0/4 (class E) */
	MUP_EV_DROP_ECHO_BAD_CHECKSUM = 56,    /* Echo Request, UDP checksum wrong (or 0 over IPv6): not answered (echo.h) */
	MUP_EV_DROP_UDP_ZERO_CHECKSUM = 57,    /* G-PDU over IPv6 with UDP checksum 0: RFC 8200 8.1 says discard (gtp6d.h) */
	MUP_EV_MAX = 58,
};

/*
 * Translation functions, in the order of their "retired" counter slots
 * MUP_RETIRED_SLOT + fn (58..63, after the events). Each holds what the
 * rules of that function that are gone had counted. The program never
 * writes them: user space adds a deleted rule's counts there when it zeroes
 * the rule's slot, so that a function's total (its retired slot plus its
 * rules' slots) does not go down when a rule goes (src/dataplane/tables.ts;
 * a local SID that changes behaviour takes a new rule id). A local
 * SID's function is MUP_FN_END_M_GTP4_E + its enum mup_behavior.
 */
enum mup_function {
	MUP_FN_H_M_GTP4_D = 0,
	MUP_FN_END_M_GTP4_E = 1,
	MUP_FN_END_M_GTP6_E = 2,
	MUP_FN_END_M_GTP6_D = 3,
	MUP_FN_END_M_GTP6_D_DI = 4,
	MUP_FN_H_M_SESSION_ENCAPS = 5,
	MUP_FN_COUNT = 6,
};
_Static_assert(MUP_EV_MAX <= MUP_RETIRED_SLOT, "event slots run into the retired slots");
_Static_assert(MUP_RETIRED_SLOT + MUP_FN_COUNT <= MUP_EVENT_SLOTS, "retired slots run into the rule slots");
_Static_assert(MUP_FN_END_M_GTP4_E + MUP_BEH_GTP6E == MUP_FN_END_M_GTP6_E &&
	       MUP_FN_END_M_GTP4_E + MUP_BEH_GTP6D == MUP_FN_END_M_GTP6_D &&
	       MUP_FN_END_M_GTP4_E + MUP_BEH_GTP6D_DI == MUP_FN_END_M_GTP6_D_DI,
	       "a local SID's function is MUP_FN_END_M_GTP4_E + its behaviour");

/* ------------------------------------------------------------------------
 * Latency probe (bpf/probe.h, src/probe/). With mup_config.probe_flags set,
 * the program reads bpf_ktime_get_ns() (CLOCK_MONOTONIC) on entry and after
 * the translation; a translated frame that leaves by XDP_TX or redirect and
 * matches the selector gets the entry time's low 46 bits in its Ethernet
 * source MAC (bits 45..40 in the first octet above its U/L and I/G bits,
 * which stay 1 and 0; bits 39..0 big endian in the other five) and one record in the
 * ring buffer mup_probe_ring.
 */
enum mup_probe_flag {
	MUP_PROBE_ON = 1,        /* stamp and record selected frames */
	MUP_PROBE_NO_MAC = 2,    /* record, but leave the source MAC alone */
};

/* The translation, told from the frame in and the frame out. */
enum mup_probe_fn {
	MUP_PROBE_FN_GTP4D = 1,  /* H.M.GTP4.D: IPv4 in, IPv6 (SRv6) out */
	MUP_PROBE_FN_GTP4E = 2,  /* End.M.GTP4.E: IPv6 in, GTP-U/IPv4 out */
	MUP_PROBE_FN_GTP6E = 3,  /* End.M.GTP6.E: IPv6 in, GTP-U/IPv6 out */
	MUP_PROBE_FN_GTP6D = 4,  /* End.M.GTP6.D or .D.Di: GTP-U/IPv6 in, SRv6 out */
	MUP_PROBE_FN_SESSION = 5, /* H.M.Session.Encaps: IP in, SRv6 out, the packet in whole inside */
};

enum mup_probe_rec_flag {
	MUP_PROBE_REC_SEQ = 1,       /* the inner UDP payload was a probe payload: seq and run are set */
	MUP_PROBE_REC_MAC = 2,       /* the entry time is in the frame's source MAC */
	MUP_PROBE_REC_INNER_V6 = 4,  /* inner addresses are IPv6 (else IPv4 in the first 4 bytes) */
};

/* The payload of a probe frame's inner UDP packet (network order). */
enum mup_probe_magic { MUP_PROBE_MAGIC = 0x4d555052 }; /* "MUPR" */
struct mup_probe_payload {
	__be32 magic;
	__be32 run;      /* one number per probe run: frames of another run are not ours */
	__be32 seq;      /* 0, 1, 2, ... per run and direction */
	__u8   dir;      /* 0 uplink, 1 downlink */
	__u8   pad[3];
};

/* One record per stamped frame, in mup_probe_ring. */
struct mup_probe_record {
	__u64 entry_ns;   /* bpf_ktime_get_ns() as the program started */
	__u64 exit_ns;    /* bpf_ktime_get_ns() after the translation and forwarding decision */
	__u64 gap_ns;     /* entry_ns - exit of the previous probed frame on this CPU; 0: none yet */
	__u32 seq;        /* from the probe payload, when MUP_PROBE_REC_SEQ */
	__u32 run;
	__u32 cpu;
	__u32 ifindex;    /* ingress */
	__u32 rx_queue;
	__u32 cpu_count;  /* probed frames on this CPU so far (this one included) */
	__u8  fn;         /* enum mup_probe_fn */
	__u8  verdict;    /* XDP action returned */
	__u8  flags;      /* enum mup_probe_rec_flag */
	__u8  proto;      /* inner L4 protocol */
	__u16 sport;      /* inner L4 ports, host order */
	__u16 dport;
	__u8  saddr[16];  /* inner addresses */
	__u8  daddr[16];
};

/*
 * Next-hop cache (bpf/fwd.h, src/dataplane/nexthop.ts). In forwarding mode fib
 * a rule whose translated packets all go to one destination range (H.M.GTP4.D
 * and End.M.GTP6.D: the last SID's prefix, or S1) may have a next hop that user space resolved from the kernel's routes and
 * neighbours: mup_nh_rules[rule] is a slot of mup_nexthops, 0 = none. A slot
 * is written once and never changed while a rule points to it (a new next hop
 * is a new slot), and it names the range it was resolved for: the program
 * uses it only when that range is the rule's, so a stale pointer (a rule id
 * reused) falls back to the FIB lookup instead of misdirecting. End.M.GTP4.E,
 * whose gNB addresses span all of IPv4, gets a slot for one route's prefix
 * with one next hop for all of it, used when the packet's destination lies in
 * it (fwd.h, nh_cached4). The whole
 * cache is used only while the lease runs: a daemon that dies stops
 * renewing it, and packets go back to the FIB lookup within the lease.
 */
struct mup_nexthop {
	__u8  dst[16];   /* the range's prefix, masked, network order (IPv4: first 4 bytes, rest 0) */
	__u32 ifindex;   /* egress interface */
	__u16 mtu;       /* egress MTU (route or interface); larger packets take the FIB path */
	__u8  plen;      /* the range's prefix length */
	__u8  family;    /* AF_INET (2) or AF_INET6 (10); 0 = empty slot */
	__u8  dmac[6];   /* the neighbour's link-layer address */
	__u8  smac[6];   /* the egress interface's address */
};

struct mup_nh_lease {
	__u64 expires_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns); 0 = cache off */
};

#endif /* MUP_SHARED_H */
