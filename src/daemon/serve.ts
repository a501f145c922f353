/**
 * The daemon process: start the Daemon, serve the API on the unix socket
 * (and HTTP if configured), handle signals. SIGHUP reloads; SIGTERM and
 * SIGINT stop (leaving the data plane forwarding unless --detach-on-exit).
 */
import { readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Server } from 'node:http';
import { apiHandler, groupId, listenTcp, listenUnix, makeServer, readTokenFile, socketAlive } from './api.js';
import { Daemon, type DaemonOptions } from './daemon.js';
import { defaultSocket } from '../host/paths.js';
import { notifyReady } from '../host/notify.js';
import { pidAlive } from '../host/process.js';
import type { Logger } from './log.js';
import { createMetrics } from './metrics.js';
import { startServingProfile } from './profile.js';
import { holdMallocTrimThreshold, requestEnded, requestStarted } from './memory.js';
import { DAEMON_NODE_FLAGS, missingDaemonNodeFlags } from '../host/node-flags.js';
import type { PerRuleSeries } from '../config/types.js';
import { makeDirs } from '../host/mkdirs.js';

export interface RunOptions extends Omit<DaemonOptions, 'log'> {
  readonly socket?: string;
  /** Overrides daemon.metrics.per_rule (mup daemon --metrics-per-rule). */
  readonly metricsPerRule?: PerRuleSeries;
  readonly log: Logger;
}

/**
 * Claim the socket path: refuse if it answers (a daemon runs) or its
 * lock file names a live process; then write our pid there. Returns the
 * function that releases it.
 */
async function claimSocket(socket: string, instance: string): Promise<() => void> {
  if (await socketAlive(socket)) {
    throw new Error(`instance ${instance}: ${socket} is answered by a running daemon; stop it first, or start this one with another --instance / --socket`);
  }
  const lock = `${socket}.lock`;
  makeDirs(dirname(lock), 0o755);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: 'wx', mode: 0o644 });
      return () => {
        try {
          if (readFileSync(lock, 'utf8').trim() === String(process.pid)) unlinkSync(lock);
        } catch {
          // already gone
        }
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const pid = Number(readFileSync(lock, 'utf8').trim());
      if (Number.isInteger(pid) && pid > 0 && pidAlive(pid)) {
        throw new Error(`instance ${instance}: process ${pid} holds ${lock} (a daemon starting or running); stop it first`);
      }
      unlinkSync(lock); // left by a daemon that died
    }
  }
  throw new Error(`instance ${instance}: could not take ${lock}`);
}


/** Start everything; resolves once serving, with a function that stops it all. */
export async function runDaemon(o: RunOptions): Promise<{ daemon: Daemon; stop: () => Promise<void> }> {
  const log = o.log;
  if (!holdMallocTrimThreshold()) log.warn('mallopt(M_TRIM_THRESHOLD) refused: glibc keeps its dynamic trim threshold, and the free memory of its arenas with it');
  const d = new Daemon(o);
  // Nothing below touches the running data plane until the instance is ours
  // and the whole config (token file included) has been checked.
  await d.prepare();
  // A start refused from here on unloads the program prepare() loaded (never pinned nor attached).
  const refused: (e: unknown) => never = (e) => {
    d.dropPrepared();
    throw e;
  };
  const { api, socket, token, readToken, group } = (() => {
    try {
      const api = d.config.daemon ?? {};
      const socket = o.socket ?? api.socket ?? defaultSocket(o.instance);
      // The loader has checked listen/token_file/open_reads together; the file itself is read (and its mode checked) here.
      const token = api.http?.tokenFile === undefined ? undefined : readTokenFile(api.http.tokenFile);
      const readToken = api.http?.readTokenFile === undefined ? undefined : readTokenFile(api.http.readTokenFile, 'daemon.http.read_token_file');
      if (readToken !== undefined && readToken === token) {
        throw new Error('daemon.http.read_token_file holds the same token as token_file: the read-only token must differ; write another (openssl rand -hex 16)');
      }
      const group = api.socketGroup === undefined ? undefined : ([api.socketGroup, groupId(api.socketGroup)] as const);
      return { api, socket, token, readToken, group };
    } catch (e) {
      return refused(e);
    }
  })();
  // One daemon per instance and per state file (flocks, held for life):
  // a second daemon is refused here, naming the first's pid.
  try {
    d.lock();
  } catch (e) {
    refused(e);
  }
  let release: () => void;
  try {
    release = await claimSocket(socket, o.instance);
  } catch (e) {
    d.unlock();
    refused(e);
  }
  try {
    d.takeOver();
  } catch (e) {
    release();
    d.unlock();
    refused(e);
  }
  const metrics = createMetrics(d, o.metricsPerRule === undefined ? {} : { perRule: o.metricsPerRule });
  const servers: Server[] = [];
  try {
    const limits = { maxConnections: api.maxConnections, stallTimeout: api.stallTimeout, log };
    const unix = makeServer(apiHandler({ daemon: d, metrics, log }), { ...limits, name: 'socket' });
    await listenUnix(unix, socket, group);
    servers.push(unix);
    log.info({ socket, group: api.socketGroup ?? 'root' }, 'control API listening');
    if (api.http !== undefined) {
      const { host, port } = api.http;
      const http = makeServer(apiHandler({ daemon: d, metrics, log, tcp: { ...(token === undefined ? {} : { token }), ...(readToken === undefined ? {} : { readToken }), openReads: api.http.openReads === true } }), { ...limits, name: 'http' });
      await listenTcp(http, host, port);
      servers.push(http);
      const auth =
        token === undefined
          ? readToken === undefined
            ? 'none: read-only (open_reads)'
            : 'read-only token for reads and /metrics; no changes'
          : api.http.openReads === true
            ? 'bearer token for changes, reads open'
            : readToken === undefined
              ? 'bearer token'
              : 'bearer token; read-only token for reads and /metrics';
      log.info({ listen: `${host}:${port}`, auth }, 'HTTP API and /metrics listening');
    }
  } catch (e) {
    for (const s of servers) s.close();
    d.stopRefusedStart();
    release();
    throw e;
  }

  const missing = missingDaemonNodeFlags();
  if (missing.length > 0) {
    log.warn({ missing, want: DAEMON_NODE_FLAGS }, `node was started without ${missing.join(' ')}: the young generation may grow to 32 MB and the resident memory with it (run \`node ${DAEMON_NODE_FLAGS.join(' ')} bin/mup.js daemon\`, or the installed mup)`);
  }

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
      // A failed sync's undo under way (a batch's, in slices) ends first, so that the pinned tables are not
      // left with part of it (the next start would put them right, from the state file); 10 s at most.
      await d.undone(UNDO_WAIT_ON_STOP_MS);
      d.stop();
      release();
    })();
    return stopping;
  };
  return { daemon: d, stop };
}

/** How long a stop waits for a failed sync's undo to end (Daemon.undone). */
const UNDO_WAIT_ON_STOP_MS = 10_000;

/** For `mup daemon`: run until a signal; the exit status. */
export async function daemonMain(o: RunOptions): Promise<number> {
  const { daemon, stop } = await runDaemon(o);
  notifyReady(o.log); // systemd (Type=notify): attached and serving
  const profile = startServingProfile(process.env['MUP_CPU_PROFILE']);
  return new Promise<number>((resolve) => {
    const onStop = (sig: string): void => {
      o.log.info({ signal: sig }, 'stopping');
      const profiled = profile?.stop().then((e) => {
        if (e !== undefined) o.log.warn({ error: e.message }, 'the CPU profile is lost; the daemon stops as usual');
      });
      Promise.all([profiled, stop()]).then(
        () => resolve(0),
        (e: unknown) => {
          o.log.error({ err: e }, 'error while stopping');
          resolve(1);
        },
      );
    };
    process.once('SIGTERM', () => onStop('SIGTERM'));
    process.once('SIGINT', () => onStop('SIGINT'));
    process.on('SIGHUP', () => {
      // Daemon.reload logs every reload, applied or refused. Counted as a request, as POST /v1/reload is:
      // the collection waiting for a quiet second does not run in its middle (the replaced rules still held).
      requestStarted();
      daemon
        .reload({ reason: 'SIGHUP' })
        .catch(() => undefined)
        .finally(requestEnded);
    });
  });
}
