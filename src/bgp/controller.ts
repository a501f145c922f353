/**
 * The MUP controller helper (issue 14, item 4): turn PDU-session fields into
 * Type 1 and Type 2 Session Transformed routes (T1ST, T2ST) and originate or
 * withdraw them at a gobgpd, as a MUP controller would from the SMF's data.
 *
 * Two ways in:
 * - `addSession` / `delSession`: through the `gobgp` CLI at the speaker's API
 *   (`mup bgp session add|del`). One process per route: simple, and what an
 *   operator can reproduce by hand, but slow (GoBGP 3.10's `global rib add`
 *   takes one route per call, and its `mrt inject` takes only IPv4/IPv6
 *   unicast RIB records, not the MUP SAFI).
 * - `BgpInjector`: a minimal BGP speaker of our own that peers with the
 *   speaker (a route reflector) and sends pre-encoded UPDATEs, many NLRIs
 *   each. Only for labs and benchmarks that need thousands of routes; it
 *   announces and withdraws, it never learns. Encoding as GoBGP 3.10 sends it
 *   (docs/lab.md, "BGP lab": T1ST prefix always 4 octets, T2ST TEID 32 bits).
 *
 * GoBGP 3.10 facts the checks here enforce: TEID decimal, non-zero, 32 bits;
 * one route target; RDs/RTs with a 2-byte ASN or an IPv4 address (a 4-byte
 * ASN is silently clamped by 3.10).
 */
import { Socket, connect as tcpConnect } from 'node:net';
import { gobgp, type GobgpApi } from './gobgpd.js';

/** A PDU session as the SMF knows it, the fields the two ST routes carry. */
export interface PduSession {
  /** UE address or prefix (T1ST key), IPv4 CIDR, e.g. 10.45.0.2/32. */
  readonly ue: string;
  /** Uplink TEID: the one the gNB sends to the UPF N3 address (T2ST key). 1..2^32-1. */
  readonly teid: number;
  /** Downlink TEID (the gNB's, in the T1ST); default: `teid`. */
  readonly dlTeid?: number;
  /** QoS flow identifier, 0..63 (T1ST). */
  readonly qfi: number;
  /** gNB GTP-U endpoint address (T1ST endpoint), IPv4. */
  readonly endpoint: string;
  /** UPF N3 address the gNB sends GTP-U to (T2ST endpoint), IPv4. */
  readonly n3: string;
  /** Direct segment id, the MUP extended community "A:B" (A 16 bits, B 32 bits), matching a PE's DSD. */
  readonly segmentId: string;
  readonly rd?: string;
  readonly rt?: string;
}

export type RouteType = 't1st' | 't2st';

// ---------------------------------------------------------------- validation

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

export function ipv4Bytes(text: string, where: string): number[] {
  const m = IPV4.exec(text.trim());
  const b = m === null ? [] : m.slice(1).map(Number);
  if (m === null || b.some((x) => x > 255)) throw new Error(`${where}: "${text}" is not an IPv4 address (e.g. 192.0.2.10)`);
  return b;
}

export function ipv4Prefix(text: string, where: string): { addr: number[]; len: number } {
  const [a, l, extra] = text.trim().split('/');
  const len = l === undefined ? 32 : Number(l);
  if (extra !== undefined || !Number.isInteger(len) || len < 0 || len > 32 || (l !== undefined && !/^\d+$/.test(l))) {
    throw new Error(`${where}: "${text}" is not an IPv4 prefix (e.g. 10.45.0.2/32)`);
  }
  const addr = ipv4Bytes(a ?? '', where);
  const v = ((addr[0]! << 24) | (addr[1]! << 16) | (addr[2]! << 8) | addr[3]!) >>> 0;
  const mask = len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0;
  if ((v & ~mask) >>> 0 !== 0) throw new Error(`${where}: "${text}" has host bits set beyond /${len}`);
  return { addr, len };
}

/** A TEID as GoBGP 3.10 takes it: decimal, non-zero, 32 bits. Accepts decimal or 0x-hex input. */
export function parseTeid(text: string | number, where = 'teid'): number {
  const s = String(text).trim();
  const n = /^0x[0-9a-f]{1,8}$/i.test(s) ? parseInt(s, 16) : /^\d{1,10}$/.test(s) ? Number(s) : NaN;
  if (!(n >= 1 && n <= 0xffffffff)) throw new Error(`${where}: "${s}" is not a TEID from 1 to 4294967295 (decimal or 0x hex; GoBGP 3.10 refuses TEID 0)`);
  return n;
}

export function parseQfi(text: string | number, where = 'qfi'): number {
  const s = String(text).trim();
  const n = /^\d{1,2}$/.test(s) ? Number(s) : NaN;
  if (!(n >= 0 && n <= 63)) throw new Error(`${where}: "${s}" is not a QFI from 0 to 63`);
  return n;
}

/** "A:B", A 16 bits, B 32 bits: the MUP extended community's direct segment id. */
export function parseSegmentId(text: string, where = 'segment-id'): { a: number; b: number } {
  const m = /^(\d{1,5}):(\d{1,10})$/.exec(text.trim());
  const a = m === null ? NaN : Number(m[1]);
  const b = m === null ? NaN : Number(m[2]);
  if (!(a >= 0 && a <= 0xffff && b >= 0 && b <= 0xffffffff)) {
    throw new Error(`${where}: "${text}" is not A:B with A 0..65535 and B 0..4294967295 (e.g. 10:10)`);
  }
  return { a, b };
}

/** An RD or RT in a form GoBGP 3.10 keeps as given: ASN2:N32 or IPv4:N16. */
export type RdRt = { kind: 'asn'; asn: number; value: number } | { kind: 'ip'; ip: number[]; value: number };

export function parseRdRt(text: string, where: string): RdRt {
  const t = text.trim();
  const i = t.lastIndexOf(':');
  // No colon: "65000" was read as 6500:65000 (slice(0, -1) and the whole).
  if (i <= 0) throw new Error(`${where}: "${t}" is not ASN:N (ASN 0..65535) or IPv4:N (N 0..65535), e.g. 65000:100`);
  const left = t.slice(0, i);
  const right = t.slice(i + 1);
  const value = /^\d{1,10}$/.test(right) ? Number(right) : NaN;
  if (i > 0 && IPV4.test(left)) {
    const ip = ipv4Bytes(left, where);
    if (!(value >= 0 && value <= 0xffff)) throw new Error(`${where}: "${t}": after an IPv4 address the number must be 0..65535`);
    return { kind: 'ip', ip, value };
  }
  const asn = /^\d{1,10}$/.test(left) ? Number(left) : NaN;
  if (asn > 0xffff && asn <= 0xffffffff) {
    throw new Error(`${where}: "${t}" has a 4-byte ASN, which GoBGP 3.10 silently clamps to 65535: use a 2-byte ASN or an IPv4 address (e.g. 10.255.0.1:${right})`);
  }
  if (!(asn >= 0 && asn <= 0xffff) || !(value >= 0 && value <= 0xffffffff)) {
    throw new Error(`${where}: "${t}" is not ASN:N (ASN 0..65535) or IPv4:N (N 0..65535), e.g. 65000:100`);
  }
  return { kind: 'asn', asn, value };
}

/** A session with every field checked and the defaults filled in. */
export interface CheckedSession {
  readonly ue: string;
  readonly teid: number;
  readonly dlTeid: number;
  readonly qfi: number;
  readonly endpoint: string;
  readonly n3: string;
  readonly segmentId: string;
  readonly rd: string;
  readonly rt: string;
}

export function checkSession(s: PduSession, defaults: { rd: string; rt: string }): CheckedSession {
  const p = ipv4Prefix(s.ue, 'ue');
  ipv4Bytes(s.endpoint, 'endpoint');
  ipv4Bytes(s.n3, 'n3');
  parseSegmentId(s.segmentId);
  const rd = (s.rd ?? defaults.rd).trim();
  const rt = (s.rt ?? defaults.rt).trim();
  parseRdRt(rd, 'rd');
  parseRdRt(rt, 'rt');
  return {
    ue: `${p.addr.join('.')}/${p.len}`,
    teid: parseTeid(s.teid),
    dlTeid: parseTeid(s.dlTeid ?? s.teid, 'dl-teid'),
    qfi: parseQfi(s.qfi),
    endpoint: s.endpoint.trim(),
    n3: s.n3.trim(),
    segmentId: s.segmentId.trim(),
    rd,
    rt,
  };
}

// ---------------------------------------------------------------- gobgp CLI

/**
 * The `gobgp global rib add|del` argument lists of a session's two routes.
 * T1ST: UE prefix -> (gNB endpoint, downlink TEID, QFI), for the PEs.
 * T2ST: (UPF N3 address, uplink TEID) -> direct segment id, for the gateways.
 */
export function sessionArgs(op: 'add' | 'del', s: CheckedSession, nexthop: string): { t1st: string[]; t2st: string[] } {
  const head = ['global', 'rib', op, '-a', 'mup-ipv4'];
  return {
    t1st: [...head, 't1st', s.ue, 'rd', s.rd, 'rt', s.rt, 'teid', String(s.dlTeid), 'qfi', String(s.qfi), 'endpoint', s.endpoint, 'nexthop', nexthop],
    t2st: [...head, 't2st', s.n3, 'rd', s.rd, 'rt', s.rt, 'teid', String(s.teid), 'mup', s.segmentId, 'nexthop', nexthop],
  };
}

export interface SpeakerIdentity {
  readonly asn: number;
  readonly routerId: string;
}

/** The speaker's ASN and router id (`gobgp global -j`). */
export async function speakerIdentity(api: GobgpApi, netns?: string): Promise<SpeakerIdentity> {
  const out = await gobgp(api, ['global', '-j'], netns === undefined ? {} : { netns });
  const j = JSON.parse(out) as { asn?: number; router_id?: string };
  if (typeof j.asn !== 'number' || typeof j.router_id !== 'string') throw new Error(`gobgp global -j at ${api.host}:${api.port}: no asn/router_id in ${out.slice(0, 200)}`);
  return { asn: j.asn, routerId: j.router_id };
}

/**
 * Defaults when --rd/--rt are not given: RD <router-id>:1 (an IPv4-address
 * RD, valid whatever the ASN), RT <asn>:100 (or <router-id>:100 for a 4-byte
 * ASN). The gateways and PEs must import that RT.
 */
export function defaultRdRt(id: SpeakerIdentity): { rd: string; rt: string } {
  return { rd: `${id.routerId}:1`, rt: id.asn <= 0xffff ? `${id.asn}:100` : `${id.routerId}:100` };
}

export interface SessionOptions {
  readonly netns?: string;
  /** Next hop of the routes; default the speaker's router id. */
  readonly nexthop?: string;
  /** Which routes: both (default), or only one type. */
  readonly types?: readonly RouteType[];
}

/** Originate (add) or withdraw (del) a session's T1ST and T2ST at the speaker behind `api`, through the gobgp CLI. */
export async function sessionOp(op: 'add' | 'del', api: GobgpApi, s: PduSession, o: SessionOptions = {}): Promise<CheckedSession> {
  const id = await speakerIdentity(api, o.netns);
  const c = checkSession(s, defaultRdRt(id));
  const nh = o.nexthop ?? id.routerId;
  ipv4Bytes(nh, 'nexthop');
  const args = sessionArgs(op, c, nh);
  for (const t of o.types ?? ['t1st', 't2st']) {
    await gobgp(api, args[t as RouteType], o.netns === undefined ? {} : { netns: o.netns });
  }
  return c;
}

export const addSession = (api: GobgpApi, s: PduSession, o?: SessionOptions): Promise<CheckedSession> => sessionOp('add', api, s, o);
export const delSession = (api: GobgpApi, s: PduSession, o?: SessionOptions): Promise<CheckedSession> => sessionOp('del', api, s, o);

// ---------------------------------------------------------------- BGP wire encoding (GoBGP 3.10 layout)

const AFI_IPV4 = 1;
const SAFI_MUP = 85;

function rdBytes(r: RdRt): number[] {
  if (r.kind === 'ip') return [0, 1, ...r.ip, (r.value >> 8) & 0xff, r.value & 0xff];
  return [0, 0, (r.asn >> 8) & 0xff, r.asn & 0xff, ...u32(r.value)];
}

function u32(n: number): number[] {
  return [(n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff];
}

/** T1ST NLRI: arch 1, type 3, RD, prefix length, prefix (always 4 octets in 3.10), TEID, QFI, endpoint length 32, endpoint. */
export function encodeT1st(s: CheckedSession): Buffer {
  const p = ipv4Prefix(s.ue, 'ue');
  const body = [...rdBytes(parseRdRt(s.rd, 'rd')), p.len, ...p.addr, ...u32(s.dlTeid), s.qfi, 32, ...ipv4Bytes(s.endpoint, 'endpoint')];
  return Buffer.from([1, 0, 3, body.length, ...body]);
}

/** T2ST NLRI: arch 1, type 4, RD, endpoint address length 64 (32 + 32 TEID bits), endpoint, TEID. */
export function encodeT2st(s: CheckedSession): Buffer {
  const body = [...rdBytes(parseRdRt(s.rd, 'rd')), 64, ...ipv4Bytes(s.n3, 'n3'), ...u32(s.teid)];
  return Buffer.from([1, 0, 4, body.length, ...body]);
}

function rtExtComm(r: RdRt): number[] {
  return r.kind === 'ip' ? [0x01, 0x02, ...r.ip, (r.value >> 8) & 0xff, r.value & 0xff] : [0x00, 0x02, (r.asn >> 8) & 0xff, r.asn & 0xff, ...u32(r.value)];
}

function attr(flags: number, type: number, value: Buffer): Buffer {
  if (value.length > 255) {
    const h = Buffer.from([flags | 0x10, type, (value.length >> 8) & 0xff, value.length & 0xff]);
    return Buffer.concat([h, value]);
  }
  return Buffer.concat([Buffer.from([flags & ~0x10, type, value.length]), value]);
}

function message(type: number, body: Buffer): Buffer {
  const len = 19 + body.length;
  if (len > 4096) throw new Error(`BGP message of ${len} bytes exceeds 4096`);
  const h = Buffer.alloc(19, 0xff);
  h.writeUInt16BE(len, 16);
  h[18] = type;
  return Buffer.concat([h, body]);
}

/** NLRIs per UPDATE: 4096-byte messages with room for the attributes. */
const NLRI_BYTES_PER_UPDATE = 3900;

/**
 * UPDATE messages announcing `nlris` (all with the same attributes: one RT,
 * optionally the MUP EC) or, with `withdraw`, withdrawing them.
 */
export function updates(nlris: readonly Buffer[], o: { nexthop: string; rt: string; segmentId?: string; withdraw?: boolean }): Buffer[] {
  const out: Buffer[] = [];
  let i = 0;
  while (i < nlris.length) {
    const chunk: Buffer[] = [];
    let bytes = 0;
    while (i < nlris.length && bytes + nlris[i]!.length <= NLRI_BYTES_PER_UPDATE) {
      bytes += nlris[i]!.length;
      chunk.push(nlris[i]!);
      i++;
    }
    const afiSafi = Buffer.from([0, AFI_IPV4, SAFI_MUP]);
    let attrs: Buffer;
    if (o.withdraw === true) {
      attrs = attr(0x80, 15, Buffer.concat([afiSafi, ...chunk]));
    } else {
      const ec = [...rtExtComm(parseRdRt(o.rt, 'rt'))];
      if (o.segmentId !== undefined) {
        const { a, b } = parseSegmentId(o.segmentId);
        ec.push(0x0c, 0x00, (a >> 8) & 0xff, a & 0xff, ...u32(b));
      }
      const nh = ipv4Bytes(o.nexthop, 'nexthop');
      attrs = Buffer.concat([
        attr(0x40, 1, Buffer.from([2])), // ORIGIN incomplete
        attr(0x40, 2, Buffer.alloc(0)), // AS_PATH empty (iBGP)
        attr(0x40, 5, Buffer.from(u32(100))), // LOCAL_PREF
        attr(0x80, 14, Buffer.concat([afiSafi, Buffer.from([4, ...nh, 0]), ...chunk])),
        attr(0xc0, 16, Buffer.from(ec)),
      ]);
    }
    const body = Buffer.alloc(4 + attrs.length);
    body.writeUInt16BE(0, 0); // no withdrawn IPv4 routes
    body.writeUInt16BE(attrs.length, 2);
    attrs.copy(body, 4);
    out.push(message(2, body));
  }
  return out;
}

// ---------------------------------------------------------------- the injector

export interface InjectorOptions {
  /** The speaker to peer with (its BGP address and port). */
  readonly host: string;
  readonly port: number;
  /** Our address: the speaker must have it as a neighbor (with the ipv4-mup family). */
  readonly localAddress: string;
  readonly asn: number;
  readonly routerId: string;
  /** Hold time offered, seconds (default 90); keepalives go every third of the negotiated one. */
  readonly holdTime?: number;
  /** How long to wait for the session to be established (default 15 s). */
  readonly timeoutMs?: number;
}

/**
 * A BGP session that only sends: OPEN with the IPv4 MUP family (AFI 1,
 * SAFI 85), then UPDATEs built by `updates`. Routes live as long as the
 * session: `close()` makes the speaker withdraw them all.
 */
export class BgpInjector {
  private keepalive: NodeJS.Timeout | undefined;
  private closedWith: string | undefined;
  /** The negotiated hold time, seconds. */
  holdTime = 0;

  private constructor(
    private readonly sock: Socket,
    readonly options: InjectorOptions,
  ) {}

  static async connect(o: InjectorOptions): Promise<BgpInjector> {
    const hold = o.holdTime ?? 90;
    const sock = tcpConnect({ host: o.host, port: o.port, localAddress: o.localAddress });
    const where = `BGP injector ${o.localAddress} -> ${o.host}:${o.port}`;
    const timeoutMs = o.timeoutMs ?? 15_000;
    let buf = Buffer.alloc(0);
    let negotiated = hold;
    const inj = new BgpInjector(sock, o);
    await new Promise<void>((res, rej) => {
      const t = setTimeout(() => fail(new Error(`${where}: no session within ${timeoutMs} ms (is ${o.localAddress} a neighbor of the speaker, with afi-safi ipv4-mup?)`)), timeoutMs);
      let gotOpen = false;
      const fail = (e: Error): void => {
        clearTimeout(t);
        sock.destroy();
        rej(e);
      };
      sock.once('error', (e) => fail(new Error(`${where}: ${e.message}`)));
      sock.once('close', () => fail(new Error(`${where}: the speaker closed the connection${gotOpen ? ' after its OPEN' : ''}`)));
      sock.once('connect', () => {
        const caps = Buffer.from([1, 4, 0, AFI_IPV4, 0, SAFI_MUP]); // multiprotocol: IPv4 MUP
        const opt = Buffer.from([2, caps.length, ...caps]);
        const body = Buffer.concat([Buffer.from([4, (o.asn >> 8) & 0xff, o.asn & 0xff, (hold >> 8) & 0xff, hold & 0xff, ...ipv4Bytes(o.routerId, 'router id'), opt.length]), opt]);
        sock.write(message(1, body));
      });
      const onData = (d: Buffer): void => {
        buf = Buffer.concat([buf, d]);
        while (buf.length >= 19) {
          const len = buf.readUInt16BE(16);
          if (buf.length < len) break;
          const type = buf[18];
          const msg = buf.subarray(0, len);
          buf = buf.subarray(len);
          if (type === 3) {
            return fail(new Error(`${where}: NOTIFICATION code ${msg[19]} subcode ${msg[20]}`));
          }
          if (type === 1) {
            gotOpen = true;
            // The session's hold time is the smaller of the two offers (RFC 4271 4.2); keepalives every third of it.
            if (msg.length >= 29) negotiated = Math.min(hold, msg.readUInt16BE(22));
            sock.write(message(4, Buffer.alloc(0)));
          }
          if (type === 4 && gotOpen) {
            clearTimeout(t);
            sock.removeAllListeners('close');
            sock.removeAllListeners('error');
            sock.removeListener('data', onData);
            sock.on('data', () => undefined); // the speaker's UPDATEs and KEEPALIVEs: not ours to learn
            sock.on('error', (e) => (inj.closedWith ??= e.message));
            sock.on('close', () => (inj.closedWith ??= 'closed by the speaker'));
            inj.holdTime = negotiated;
            inj.keepalive = setInterval(() => sock.write(message(4, Buffer.alloc(0))), negotiated === 0 ? 30_000 : Math.max(1, Math.floor(negotiated / 3)) * 1000);
            inj.keepalive.unref();
            return res();
          }
        }
      };
      sock.on('data', onData);
    });
    return inj;
  }

  /** Send the messages; resolves when the socket has taken them all. */
  async send(msgs: readonly Buffer[]): Promise<void> {
    if (this.closedWith !== undefined) throw new Error(`BGP injector to ${this.options.host}:${this.options.port}: session down (${this.closedWith})`);
    for (const m of msgs) {
      if (!this.sock.write(m)) await new Promise<void>((r) => this.sock.once('drain', () => r()));
    }
  }

  /** Announce (or withdraw) sessions' T2STs or T1STs, grouped by their attributes. */
  async sessions(type: RouteType, ss: readonly CheckedSession[], o: { nexthop: string; withdraw?: boolean }): Promise<void> {
    const groups = new Map<string, CheckedSession[]>();
    for (const s of ss) {
      const k = type === 't2st' ? `${s.rt}|${s.segmentId}` : s.rt;
      const g = groups.get(k);
      if (g === undefined) groups.set(k, [s]);
      else g.push(s);
    }
    for (const g of groups.values()) {
      const nlris = g.map((s) => (type === 't2st' ? encodeT2st(s) : encodeT1st(s)));
      await this.send(updates(nlris, { nexthop: o.nexthop, rt: g[0]!.rt, ...(type === 't2st' ? { segmentId: g[0]!.segmentId } : {}), ...(o.withdraw === true ? { withdraw: true } : {}) }));
    }
  }

  get down(): string | undefined {
    return this.closedWith;
  }

  /** Close the session (the speaker withdraws what we sent). */
  async close(): Promise<void> {
    if (this.keepalive !== undefined) clearInterval(this.keepalive);
    this.closedWith ??= 'closed';
    await new Promise<void>((r) => {
      if (this.sock.destroyed) return r();
      this.sock.once('close', () => r());
      this.sock.end();
      setTimeout(() => {
        this.sock.destroy();
        r();
      }, 1000).unref();
    });
  }
}

// ---------------------------------------------------------------- speaker configs for labs and benches

export interface TomlNeighbor {
  readonly address: string;
  readonly port?: number;
  /** Our address towards it (transport local-address). */
  readonly localAddress: string;
  readonly rrClient?: boolean;
  /** Wait for it to connect (for injectors, which only connect out). */
  readonly passive?: boolean;
  /** Graceful restart time, seconds; omitted: no GR. */
  readonly gracefulRestart?: number;
}

/**
 * A gobgpd 3.10 TOML for a lab or bench speaker: one AS, the MUP families
 * on every neighbor, GR (restart time + MP GR on both MUP families) where
 * asked. Until the daemon's `mup bgp config` produces the translators'
 * sidecar configs, the lab and the bench take theirs from here.
 */
export function speakerToml(o: { asn: number; routerId: string; listen: string; port: number; clusterId?: string; neighbors: readonly TomlNeighbor[] }): string {
  const l: string[] = ['[global.config]', `  as = ${o.asn}`, `  router-id = "${o.routerId}"`, `  port = ${o.port}`, `  local-address-list = ["${o.listen}"]`];
  for (const n of o.neighbors) {
    l.push('[[neighbors]]', '  [neighbors.config]', `    neighbor-address = "${n.address}"`, `    peer-as = ${o.asn}`);
    l.push('  [neighbors.transport.config]', `    local-address = "${n.localAddress}"`, `    remote-port = ${n.port ?? o.port}`);
    if (n.passive === true) l.push('    passive-mode = true');
    l.push('  [neighbors.timers.config]', '    connect-retry = 1', '    hold-time = 30', '    keepalive-interval = 10');
    if (n.gracefulRestart !== undefined) l.push('  [neighbors.graceful-restart.config]', '    enabled = true', `    restart-time = ${n.gracefulRestart}`);
    if (n.rrClient === true) l.push('  [neighbors.route-reflector.config]', '    route-reflector-client = true', `    route-reflector-cluster-id = "${o.clusterId ?? o.routerId}"`);
    for (const fam of ['ipv4-mup', 'ipv6-mup']) {
      l.push('  [[neighbors.afi-safis]]', '    [neighbors.afi-safis.config]', `      afi-safi-name = "${fam}"`);
      if (n.gracefulRestart !== undefined) l.push('    [neighbors.afi-safis.mp-graceful-restart.config]', '      enabled = true');
    }
  }
  return `${l.join('\n')}\n`;
}

/**
 * The route reflector of bench:bgp and the large-table test: AS 65000,
 * router id 10.255.0.1 on `listen`; its clients our injector (passive: the
 * injector connects) and a translator's sidecar (graceful restart 120 s).
 */
export function reflectorToml(o: { listen: string; port: number; injector: string; sidecar: string }): string {
  return speakerToml({
    asn: 65000,
    routerId: '10.255.0.1',
    listen: o.listen,
    port: o.port,
    neighbors: [
      { address: o.injector, localAddress: o.listen, rrClient: true, passive: true },
      { address: o.sidecar, localAddress: o.listen, rrClient: true, gracefulRestart: 120 },
    ],
  });
}

/** Session state of the neighbor `address` at the speaker behind `api` ("established", "active", ...), or undefined. */
export async function neighborState(api: GobgpApi, address: string, netns?: string): Promise<string | undefined> {
  const out = await gobgp(api, ['neighbor', '-j'], netns === undefined ? {} : { netns });
  const j = JSON.parse(out || '[]') as { conf?: { neighbor_address?: string }; state?: { session_state?: number | string } }[];
  const n = j.find((x) => x.conf?.neighbor_address === address);
  const s = n?.state?.session_state;
  if (s === undefined) return undefined;
  // 3.10 prints the gRPC enum as a number: 1 idle, 2 connect, 3 active, 4 opensent, 5 openconfirm, 6 established.
  const names = ['unknown', 'idle', 'connect', 'active', 'opensent', 'openconfirm', 'established'];
  return typeof s === 'number' ? (names[s] ?? String(s)) : s.toLowerCase();
}

/** Destinations in the speaker's global MUP table (`gobgp global rib summary`). */
export async function mupRoutes(api: GobgpApi, o: { family?: 'mup-ipv4' | 'mup-ipv6'; netns?: string } = {}): Promise<number> {
  const out = await gobgp(api, ['global', 'rib', 'summary', '-a', o.family ?? 'mup-ipv4'], { timeout: 30_000, ...(o.netns === undefined ? {} : { netns: o.netns }) });
  const m = /Destination: (\d+)/.exec(out);
  if (m === null) throw new Error(`gobgp global rib summary at ${api.host}:${api.port}: no "Destination:" in ${out.slice(0, 200)}`);
  return Number(m[1]);
}
