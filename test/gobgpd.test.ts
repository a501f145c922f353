/**
 * src/bgp/gobgpd.ts against the real gobgpd 3.10: started on loopback with
 * its API on a free port, answers `gobgp global`, stops; a bad config makes
 * startGobgpd throw with the reason, and no gobgpd is left behind.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { gobgp, parseApi, startGobgpd, type GobgpdProcess } from '../src/bgp/gobgpd.js';
import { pidAlive } from '../src/host/process.js';
import { freeTcpPort } from '../src/host/net.js';

const freePort = freeTcpPort;

const dir = mkdtempSync(join(tmpdir(), 'mup-gobgpd-'));
const started: GobgpdProcess[] = [];
afterAll(async () => {
  for (const p of started) await p.kill();
  rmSync(dir, { recursive: true, force: true });
});

describe('gobgpd process', () => {
  it('parses HOST:PORT and refuses anything else', () => {
    expect(parseApi('127.0.0.1:50072')).toEqual({ host: '127.0.0.1', port: 50072 });
    expect(() => parseApi('127.0.0.1')).toThrow(/HOST:PORT/);
    expect(() => parseApi('127.0.0.1:70000')).toThrow(/HOST:PORT/);
  });

  it('starts, answers on its API, stops', async () => {
    const bgpPort = await freePort();
    const api = { host: '127.0.0.1', port: await freePort() };
    const cfg = join(dir, 'ok.toml');
    writeFileSync(cfg, `[global.config]\n  as = 65000\n  router-id = "10.255.0.1"\n  port = ${bgpPort}\n  local-address-list = ["127.0.0.1"]\n`);
    const p = await startGobgpd({ configFile: cfg, api, logFile: join(dir, 'ok.log') });
    started.push(p);
    const out = await gobgp(api, ['global', '-j']);
    expect(JSON.parse(out)).toMatchObject({ asn: 65000, router_id: '10.255.0.1' });
    await p.stop();
    expect(pidAlive(p.pid)).toBe(false);
  });

  it('a config gobgpd refuses: throws, nothing left running', async () => {
    const api = { host: '127.0.0.1', port: await freePort() };
    const cfg = join(dir, 'bad.toml');
    writeFileSync(cfg, '[global.config]\n  as = "not a number"\n');
    let pid = -1;
    await expect(
      startGobgpd({ configFile: cfg, api, logFile: join(dir, 'bad.log'), readyTimeoutMs: 5000 }).then((p) => {
        pid = p.pid;
        started.push(p);
      }),
    ).rejects.toThrow(/gobgpd .*(exited|did not answer)/);
    expect(pid).toBe(-1);
  });
});
