/**
 * The validated configuration: what src/config/load.ts produces from YAML and
 * what src/dataplane encodes into the BPF maps. Values here are already
 * checked (prefix lengths in range, host bits cleared), so nothing below the
 * config layer validates again.
 */
import type { Ipv4Addr, Ipv4Prefix, Ipv6Prefix, Ipv6Addr } from '../sid/types.js';
import type { ConfigWarning } from './errors.js';

export type SrhMode = 'auto' | 'always' | 'reduced';
export type ContainerMode = 'always' | 'auto' | 'never';
export type ForwardingMode = 'fib' | 'tx' | 'kernel';
/** What a local SID does (RFC 9433 §6.3-6.6); absent in the YAML = end.m.gtp4.e. */
export type LocalSidBehavior = 'end.m.gtp4.e' | 'end.m.gtp6.e' | 'end.m.gtp6.d' | 'end.m.gtp6.d.di';

/**
 * A TEID prefix: the first `len` bits of `value` (0..32; no bit set past
 * them). With a /32 match it makes the policy key the 64-bit DA || TEID.
 */
export interface TeidPrefix {
  readonly value: number;
  /** 1..32; a /0 TEID prefix is the same key as none and is not kept. */
  readonly len: number;
}

/**
 * Where a rule came from, for messages: a file rule's index in its list (3
 * for "policies[3]"; a number, not a string per rule: 4.8 MB and ~150 ms of
 * a 131,072-rule start), else a text: API_WHERE for an API rule (spelled
 * "policies[<key>]"), a state file record's "<file>:<line>", a BGP route's
 * "bgp ...".
 * `whereText` (src/config/keys.ts) spells it. The rule set tells a file
 * rule from the others by it (`fromFile`): a config built by hand for a
 * rule set gives its rules their indexes.
 */
export type Where = string | number;

/** The config's rule lists, by their key. */
export type RuleSection = 'policies' | 'localsids' | 'sessions';

/** H.M.GTP4.D: GTP-U/IPv4 in, SRv6 out. */
export interface Policy {
  /** Where it came from (index in `policies`, or a text), for messages. */
  readonly where: Where;
  readonly name?: string;
  /** IPv4 destination prefix of the GTP-U packets. */
  readonly match: Ipv4Prefix;
  /** G-PDUs whose TEID lies in this prefix (match is then a /32); absent = every TEID (/0). */
  readonly teid?: TeidPrefix;
  /**
   * Last SID = sr_prefix | IPv4 DA | Args.Mob.Session; length L <= 56. With
   * `sid`, that address as a /128 (used as is).
   */
  readonly srPrefix: Ipv6Prefix;
  /** A plain last SID (a PE's End.DT4/DT6/DT46), used as is: no DA, no Args. */
  readonly sid?: Ipv6Addr;
  /** IPv6 SA = src_prefix | IPv4 SA; length P <= 96. */
  readonly srcPrefix: Ipv6Prefix;
  /** S1..Sk visited before the last SID (0..4). */
  readonly segments: readonly Ipv6Addr[];
  readonly srh: SrhMode;
  /** Outer IPv6 hop limit, default 64. */
  readonly hopLimit: number;
  /** Largest translated (IPv6) packet; larger ones get ICMP Fragmentation Needed. Absent = not checked. */
  readonly mtu?: number;
}

/**
 * A local SID. End.M.GTP4.E (the default): SRv6 in, GTP-U/IPv4 out.
 * End.M.GTP6.E: SRv6 in, GTP-U/IPv6 out. End.M.GTP6.D / .D.Di: GTP-U/IPv6
 * to this SID in, SRv6 out (the gtp6 fields below).
 */
export interface LocalSid {
  readonly where: Where;
  readonly name?: string;
  /** Absent = end.m.gtp4.e (configs from before GTP-U over IPv6). */
  readonly behavior?: LocalSidBehavior;
  /**
   * Locator+function. GTP4.E: IPv4 DA and Args.Mob.Session follow, L <= 56.
   * GTP6.E: Args.Mob.Session follows, L <= 88. GTP6.D: the GTP-U/IPv6
   * destinations, any length.
   */
  readonly sid: Ipv6Prefix;
  /** P: the IPv4 SA is read from IPv6 SA bits [P, P+32); <= 96 (GTP4.E; 0 otherwise). */
  readonly srcPrefixLen: number;
  readonly container: ContainerMode;
  /** Outer IPv4 TTL (GTP4.E) or IPv6 hop limit (GTP6.E, GTP6.D), default 64. */
  readonly ttl: number;
  /** GTP6.E, GTP6.D: the outer IPv6 source address (RFC 9433's A). */
  readonly source?: Ipv6Addr;
  /** GTP6.D: prefix of the last SID B, Args.Mob.Session at bit L <= 88. */
  readonly srPrefix?: Ipv6Prefix;
  /** GTP6.D: S1..Sk visited before B (0..4). */
  readonly segments?: readonly Ipv6Addr[];
  readonly srh?: SrhMode;
  /** Largest translated packet; larger ones get ICMPv6 Packet Too Big. Absent = not checked. */
  readonly mtu?: number;
  /** GTP4.E / GTP6.E: advertised as BGP MUP ISD routes (docs/bgp.md); lb + ln + fn = the SID's length. */
  readonly advertise?: LocalSidAdvertise;
}

/** The access prefixes a local SID serves, and its SID structure, for its ISD routes. */
export interface LocalSidAdvertise {
  /** As configured; the ISDs are these split to /25 (IPv4) or /121 (IPv6) (gobgpd 3.10). */
  readonly prefixes: readonly string[];
  readonly lb: number;
  readonly ln: number;
  readonly fn: number;
}

/**
 * H.M.Session.Encaps, the PE role of SRv6 MUP (downlink): an IP packet to an
 * address in `ue` is encapsulated in IPv6 to the gateway's End.M.GTP4.E SID
 * isd | endpoint | Args.Mob.Session(qfi, rqi, U = 0, teid), from
 * src_prefix | source (docs/spec.md "PE downlink: H.M.Session.Encaps").
 */
export interface Session {
  readonly where: Where;
  readonly name?: string;
  /** The UE prefix, IPv4 or IPv6 (longest match within its family). */
  readonly ue: { readonly family: 4; readonly prefix: Ipv4Prefix } | { readonly family: 6; readonly prefix: Ipv6Prefix };
  readonly teid: number;
  readonly qfi: number;
  readonly rqi: boolean;
  /** The gNB's N3 IPv4 address (the GTP-U destination End.M.GTP4.E restores). */
  readonly endpoint: Ipv4Addr;
  /** The UPF's N3 IPv4 address (the GTP-U source End.M.GTP4.E restores). */
  readonly source: Ipv4Addr;
  /** The gateway's End.M.GTP4.E SID prefix, L <= 56. */
  readonly isd: Ipv6Prefix;
  /** IPv6 source prefix, P <= 96. */
  readonly srcPrefix: Ipv6Prefix;
  readonly segments: readonly Ipv6Addr[];
  readonly srh: SrhMode;
  readonly hopLimit: number;
  /** Largest encapsulated (IPv6) packet; larger ones get ICMP Fragmentation Needed / ICMPv6 Packet Too Big. */
  readonly mtu?: number;
}

export interface Settings {
  readonly forwarding: ForwardingMode;
  /** Outer UDP source port range for End.M.GTP4.E, inclusive. Default 49152-65535. */
  readonly sourcePortMin: number;
  readonly sourcePortMax: number;
  /** Table sizes (BPF map max_entries). Default 65536 each. */
  readonly maxPolicies: number;
  readonly maxLocalSids: number;
  /** Size of the session table; absent = 65536 (DEFAULT_MAX_SESSIONS). */
  readonly maxSessions?: number;
  /** Seed of the inner 5-tuple hash (flow label, UDP source port). Default 0. */
  readonly hashSeed: number;
}

/** XDP attach mode: native (in the driver) or generic (after skb allocation; slow). */
export type XdpMode = 'native' | 'generic';

/** An interface `mup daemon` attaches the program to. */
export interface InterfaceConfig {
  readonly where: string;
  readonly name: string;
  readonly xdp: XdpMode;
}

/** How `mup daemon` serves its control API; defaults depend on the instance name. */
export interface DaemonSettings {
  /** Unix socket; default /run/mup/<instance>.sock. */
  readonly socket?: string;
  /** Group owning the socket (mode 0660); default root's. */
  readonly socketGroup?: string;
  /** Runtime changes; default /var/lib/mup/<instance>.state.json. */
  readonly stateFile?: string;
  /** Optional HTTP listener (API and /metrics). */
  readonly http?: {
    readonly host: string;
    readonly port: number;
    /** Bearer token for every request (reads too unless openReads); without it the listener is read-only. */
    readonly tokenFile?: string;
    /** Loopback only: GET/HEAD without a token. */
    readonly openReads?: boolean;
    /** A second token that reads (GET, /metrics) but changes nothing; its file is checked as token_file's. */
    readonly readTokenFile?: string;
  };
  /** A reload that would delete more than this share (0..1) of the rules needs --force; default 0.5. */
  readonly reloadMaxDeleteShare?: number;
  /** Open connections per listener (socket, HTTP); more are answered 503. Default DEFAULT_MAX_CONNECTIONS. */
  readonly maxConnections?: number;
  /** Seconds an answer may make no progress before its connection is closed. Default DEFAULT_STALL_TIMEOUT_S. */
  readonly stallTimeout?: number;
  /** daemon.metrics: what /metrics exposes besides the bounded series. */
  readonly metrics?: { readonly perRule?: PerRuleSeries };
}

/** Per-rule Prometheus series: none (default), every rule, or the N rules with the most packets. */
export type PerRuleSeries = 'off' | 'all' | { readonly top: number };

/** Defaults of the rules learned from BGP (MUP routes carry no source prefix or transit segments). */
export interface BgpRuleDefaults {
  readonly srcPrefix: Ipv6Prefix;
  readonly segments: readonly Ipv6Addr[];
  readonly srh: SrhMode;
  readonly hopLimit: number;
  readonly mtu?: number;
}

/** A DSD route the PE advertises for one of its End.DT4/DT6/DT46 SIDs. */
export interface BgpDsd {
  readonly where: string;
  /** The DSD's address (the PE's); default router_id. */
  readonly address: string;
  readonly sid: Ipv6Addr;
  readonly behavior: 'end.dt4' | 'end.dt6' | 'end.dt46';
  /** The MUP extended community, "A:B" (A 16 bits, B 32 bits). */
  readonly segmentId: string;
  readonly lb: number;
  readonly ln: number;
  readonly fn: number;
}

/** `bgp:` (docs/bgp.md): the sidecar gobgpd, what is learned and what is advertised. */
export interface BgpConfig {
  readonly asn: number;
  readonly routerId: string;
  /** Where the sidecar speaks BGP; default 0.0.0.0:179. */
  readonly listen: { readonly host: string; readonly port: number };
  /** The sidecar's gRPC API, loopback only. */
  readonly api: { readonly host: string; readonly port: number };
  readonly neighbors: readonly { readonly address: string; readonly port: number; readonly asn: number }[];
  readonly rd: string;
  readonly rt: string;
  readonly importRts: readonly string[];
  /** Seconds a withdrawn route stays in the data plane (cancelled by a re-advertisement); default 5. */
  readonly holdDown: number;
  /** Graceful restart time, seconds; default 120. */
  readonly gracefulRestart: number;
  readonly roles: readonly ('gw' | 'pe')[];
  /** IPv6 next hop of the ISD/DSD routes we advertise (gobgp 3.10 takes only IPv6 there). */
  readonly nexthop?: Ipv6Addr;
  readonly policyDefaults?: BgpRuleDefaults;
  readonly sessionDefaults?: BgpRuleDefaults & { readonly source: Ipv4Addr };
  readonly dsd: readonly BgpDsd[];
}

export interface Config {
  /** File the config came from, or "<inline>". */
  readonly file: string;
  readonly settings: Settings;
  /** Interfaces for `mup daemon` (replay and tests ignore them). */
  readonly interfaces?: readonly InterfaceConfig[];
  readonly daemon?: DaemonSettings;
  readonly policies: readonly Policy[];
  readonly localsids: readonly LocalSid[];
  /** PE downlink sessions; absent = none. */
  readonly sessions?: readonly Session[];
  /** BGP MUP (docs/bgp.md); absent = none. */
  readonly bgp?: BgpConfig;
  /**
   * Things the loader accepted but changed or finds suspicious (e.g. host bits
   * masked off a prefix). Set by load.ts; callers should print them.
   */
  readonly warnings?: readonly ConfigWarning[];
}
