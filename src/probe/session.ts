/**
 * The translator side of a probe run: switch the in-band stamps on and read
 * them, either in a running daemon (POST /v1/probe on its socket, then the
 * ring buffer opened by program id) or in a data plane this process loads
 * and attaches itself (standalone). close() switches the stamps off again
 * and undoes what open did, also after a failure.
 */
import { request } from 'node:http';
import type { Config } from '../config/types.js';
import { openDataplane, type Dataplane, type XdpMode } from '../dataplane/dataplane.js';
import { closeProbeMaps, openProbeMaps, ProbeRing, readProbeCounters, writeSelector, type ProbeCounters, type ProbeMaps } from '../dataplane/probe-maps.js';
import type { Endpoint } from './probe.js';

export interface StampSession {
  readonly ring: ProbeRing;
  counters(): ProbeCounters;
  /** Where the stamps come from, for the report. */
  readonly describe: string;
  close(): Promise<void>;
}

export interface DaemonTarget {
  readonly socket: string;
  readonly udpPort: number;
  readonly sample?: number;
}

export interface StandaloneTarget {
  readonly config: Config;
  readonly object?: string;
  /** The translator's interfaces to attach to (N3 side and core side). */
  readonly attach: readonly Endpoint[];
  readonly xdpMode?: XdpMode;
  readonly udpPort: number;
  readonly sample?: number;
}

function apiPost(socket: string, path: string, body: unknown): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const text = JSON.stringify(body);
    const req = request(
      { socketPath: socket, path, method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const raw = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = JSON.parse(raw);
          } catch {
            json = { error: raw };
          }
          if ((res.statusCode ?? 500) >= 300) {
            const msg = (json as { error?: string }).error ?? raw;
            reject(new Error(`the daemon answered ${res.statusCode} to POST ${path}: ${msg}`));
          } else {
            resolve(json);
          }
        });
      },
    );
    req.on('error', (e) => reject(new Error(`cannot reach the daemon on ${socket}: ${e.message} (is \`mup daemon\` running? --socket PATH)`)));
    req.end(text);
  });
}

/** Switch the stamps on in the daemon behind `socket`; close() switches them off. */
export async function daemonSession(t: DaemonTarget): Promise<StampSession> {
  const answer = (await apiPost(t.socket, '/v1/probe', { enabled: true, udp_port: t.udpPort, sample: t.sample ?? 1 })) as {
    probe?: { prog_id?: number };
  };
  const progId = answer.probe?.prog_id;
  const off = (): Promise<unknown> => apiPost(t.socket, '/v1/probe', { enabled: false });
  if (typeof progId !== 'number') {
    await off().catch(() => undefined);
    throw new Error('the daemon did not say which program it runs (no probe.prog_id in its answer): is it the same version as this mup?');
  }
  let maps: ProbeMaps;
  let ring: ProbeRing;
  try {
    maps = openProbeMaps({ id: progId });
    try {
      ring = new ProbeRing(maps.ringFd);
    } catch (e) {
      closeProbeMaps(maps);
      throw e;
    }
  } catch (e) {
    await off().catch(() => undefined);
    throw e;
  }
  return {
    ring,
    counters: () => readProbeCounters(maps.stateFd),
    describe: `daemon on ${t.socket} (program id ${progId})`,
    async close() {
      ring.close();
      closeProbeMaps(maps);
      await off();
    },
  };
}

/**
 * Switch the stamps on in a data plane this process has open and attached
 * (the RFC 2544 benchmark's translator); close() switches them off again and
 * leaves the data plane as it was.
 */
export function dataplaneSession(dp: Dataplane, t: { readonly udpPort: number; readonly sample?: number }, describe: string): StampSession {
  writeSelector(dp.tables, { enabled: true, udpPort: t.udpPort, sample: t.sample ?? 1 });
  let maps: ProbeMaps | undefined;
  let ring: ProbeRing | undefined;
  const cleanup = (): void => {
    ring?.close();
    if (maps !== undefined) closeProbeMaps(maps);
    writeSelector(dp.tables, { enabled: false, udpPort: t.udpPort, sample: t.sample ?? 1 });
  };
  try {
    maps = openProbeMaps({ fd: dp.progFd });
    ring = new ProbeRing(maps.ringFd);
  } catch (e) {
    cleanup();
    throw e;
  }
  const m = maps;
  return {
    ring,
    counters: () => readProbeCounters(m.stateFd),
    describe,
    close() {
      cleanup();
      return Promise.resolve();
    },
  };
}

/** Load the data plane, attach it, switch the stamps on; close() detaches and unloads it. */
export function standaloneSession(t: StandaloneTarget): Promise<StampSession> {
  let dp: Dataplane | undefined;
  let stamps: StampSession | undefined;
  try {
    dp = openDataplane({ config: t.config, ...(t.object === undefined ? {} : { object: t.object }) });
    for (const a of t.attach) dp.attach(a.dev, { ...(a.netns === undefined ? {} : { netns: a.netns }), mode: t.xdpMode ?? 'native' });
    const where = t.attach.map((a) => `${a.netns === undefined ? '' : `${a.netns}/`}${a.dev}`).join(', ');
    stamps = dataplaneSession(dp, t, `data plane loaded by this probe from ${dp.object}, attached to ${where}`);
  } catch (e) {
    dp?.close();
    return Promise.reject(e);
  }
  const [loaded, s] = [dp, stamps];
  return Promise.resolve({
    ...s,
    async close() {
      await s.close().finally(() => loaded.close());
    },
  });
}
