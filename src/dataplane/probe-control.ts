/**
 * The probe switch of a loaded data plane, as the daemon's API serves it
 * (GET/POST /v1/probe, src/daemon/api.ts): validation of the request body at
 * the edge, then writeSelector, and the answer the CLI needs to read the
 * ring buffer itself (the program id: `mup probe` opens the maps by id).
 */
import type { Dataplane } from './dataplane.js';
import { progInfo } from './libbpf.js';
import { checkSelector, readSelector, writeSelector, type ProbeSelector } from './probe-maps.js';

/** A bad /v1/probe body: message and key path. */
export class ProbeRequestError extends Error {
  override readonly name = 'ProbeRequestError';
  constructor(
    message: string,
    readonly path?: string,
  ) {
    super(message);
  }
}

export interface ProbeStatus {
  readonly enabled: boolean;
  readonly udp_port: number;
  readonly sample: number;
  readonly mac: boolean;
  /** The data plane program: `mup probe` opens its ring buffer by this id. */
  readonly prog_id: number;
}

export function probeStatus(dp: Pick<Dataplane, 'tables' | 'progFd'>): ProbeStatus {
  const s = readSelector(dp.tables);
  return { enabled: s.enabled, udp_port: s.udpPort ?? 0, sample: s.sample ?? 1, mac: s.noMac !== true, prog_id: progInfo(dp.progFd).id };
}

const KEYS = ['enabled', 'udp_port', 'sample', 'mac'];

/** Parse a /v1/probe body: {"enabled": true, "udp_port": 47000, "sample": 1, "mac": true}. */
export function parseProbeRequest(body: unknown): ProbeSelector {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ProbeRequestError('the body must be a JSON object: {"enabled": true, "udp_port": 47000, "sample": 1, "mac": true}');
  }
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) {
    if (!KEYS.includes(k)) throw new ProbeRequestError(`unknown key ${k}; the keys are ${KEYS.join(', ')}`, k);
  }
  if (typeof b['enabled'] !== 'boolean') throw new ProbeRequestError('enabled must be true or false', 'enabled');
  const int = (k: string, lo: number, hi: number, what: string): number | undefined => {
    const v = b[k];
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) throw new ProbeRequestError(`${k} must be ${what}`, k);
    return v;
  };
  const udpPort = int('udp_port', 0, 65535, 'an integer 0..65535 (0: every translated frame)');
  const sample = int('sample', 1, 0xffffffff, 'an integer >= 1 (record 1 in N)');
  if (b['mac'] !== undefined && typeof b['mac'] !== 'boolean') throw new ProbeRequestError('mac must be true or false', 'mac');
  const s: ProbeSelector = {
    enabled: b['enabled'],
    ...(udpPort === undefined ? {} : { udpPort }),
    ...(sample === undefined ? {} : { sample }),
    ...(b['mac'] === false ? { noMac: true } : {}),
  };
  checkSelector(s);
  return s;
}

export function setProbe(dp: Pick<Dataplane, 'tables' | 'progFd'>, body: unknown): ProbeStatus {
  writeSelector(dp.tables, parseProbeRequest(body));
  return probeStatus(dp);
}
