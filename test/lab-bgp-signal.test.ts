/**
 * Ctrl-C during `mup lab up --bgp` removes what it built so far (namespaces,
 * processes in them, the bpffs mount, /run/mup-lab/<prefix>) and exits 130,
 * as `mup lab up` does. The signal comes while the namespaces are being
 * made (a progress line says so), long before the lab is up.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { listNamespaces } from '../src/host/netns-sweep.js';
import { bgpLabDown } from '../src/lab/bgp-lab.js';
import { LAB_RUN_DIR } from '../src/lab/lab.js';

const MUP = fileURLToPath(new URL('../bin/mup.js', import.meta.url));
const PREFIX = `mbs${process.pid % 100000}`;
const isRoot = process.getuid?.() === 0;

afterAll(async () => {
  await bgpLabDown(PREFIX);
}, 60_000);

describe.runIf(isRoot)('mup lab up --bgp and Ctrl-C', () => {
  it('SIGINT while it builds: everything it made is removed, exit 130', async () => {
    const child = spawn(process.execPath, [MUP, 'lab', 'up', '--bgp', '--prefix', PREFIX, '--sessions', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    const exited = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
    const building = new Promise<void>((res, rej) => {
      child.stderr.on('data', (d: Buffer) => {
        err += d.toString();
        // The namespaces exist once the next step is announced.
        if (err.includes('[lab] veths')) res();
      });
      void exited.then(() => rej(new Error(`mup lab up --bgp exited before it built anything: ${err}`)));
    });
    await building;
    expect((await listNamespaces()).some((n) => n.startsWith(`${PREFIX}-`))).toBe(true);
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(err).toContain(`SIGINT: removing lab "${PREFIX}"`);
    expect((await listNamespaces()).filter((n) => n.startsWith(`${PREFIX}-`))).toEqual([]);
    expect(existsSync(join(LAB_RUN_DIR, PREFIX))).toBe(false);
  }, 120_000);
});
