/**
 * The daemon process: start the Daemon, serve the API on the unix socket
 * (and HTTP if configured), handle signals. SIGHUP reloads; SIGTERM and
 * SIGINT stop (leaving the data plane forwarding unless --detach-on-exit).
 */
import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { apiHandler, isLoopback, listenTcp, listenUnix, makeServer } from './api.js';
import { Daemon, defaultSocket, type DaemonOptions } from './daemon.js';
import type { Logger } from './log.js';
import { createMetrics, DEFAULT_RULE_SERIES_LIMIT } from './metrics.js';

export interface RunOptions extends Omit<DaemonOptions, 'log'> {
  readonly socket?: string;
  readonly metricsRuleLimit?: number;
  readonly log: Logger;
}

/** Start everything; resolves once serving, with a function that stops it all. */
export async function runDaemon(o: RunOptions): Promise<{ daemon: Daemon; stop: () => Promise<void> }> {
  const log = o.log;
  const d = new Daemon(o);
  await d.start();
  const api = d.config.daemon ?? {};
  const socket = o.socket ?? api.socket ?? defaultSocket(o.instance);
  const metrics = createMetrics(d, o.metricsRuleLimit ?? DEFAULT_RULE_SERIES_LIMIT);
  const servers: Server[] = [];
  try {
    const unix = makeServer(apiHandler({ daemon: d, metrics, log }));
    await listenUnix(unix, socket, api.socketGroup);
    servers.push(unix);
    log.info({ socket, group: api.socketGroup ?? 'root' }, 'control API listening');
    if (api.http !== undefined) {
      const { host, port, tokenFile } = api.http;
      let token: string | undefined;
      if (tokenFile !== undefined) {
        token = readFileSync(tokenFile, 'utf8').trim();
        if (token.length < 16) throw new Error(`${tokenFile}: the token is ${token.length} characters; use at least 16 (e.g. openssl rand -hex 16 > ${tokenFile})`);
      } else if (!isLoopback(host)) {
        throw new Error(
          `daemon.http.listen is ${host}:${port}, not loopback, and there is no daemon.http.token_file: refusing to serve the API unauthenticated; add a token file or listen on 127.0.0.1`,
        );
      }
      const http = makeServer(apiHandler({ daemon: d, metrics, log, ...(token === undefined ? {} : { token }) }));
      await listenTcp(http, host, port);
      servers.push(http);
      log.info({ listen: `${host}:${port}`, auth: token === undefined ? 'none (loopback)' : 'bearer token' }, 'HTTP API and /metrics listening');
    }
  } catch (e) {
    for (const s of servers) s.close();
    d.stop();
    throw e;
  }

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
      d.stop();
    })();
    return stopping;
  };
  return { daemon: d, stop };
}

/** For `mup daemon`: run until a signal; the exit status. */
export async function daemonMain(o: RunOptions): Promise<number> {
  const { daemon, stop } = await runDaemon(o);
  return new Promise<number>((resolve) => {
    const onStop = (sig: string): void => {
      o.log.info({ signal: sig }, 'stopping');
      stop().then(
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
      daemon.reload().catch((e: unknown) => o.log.error({ error: (e as Error).message }, 'reload failed; the tables are unchanged'));
    });
  });
}
