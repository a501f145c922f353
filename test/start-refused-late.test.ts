/**
 * A start refused after the data plane was loaded and attached (the HTTP
 * listener's address cannot be bound: it comes after the takeover): a first
 * start leaves nothing behind, as one refused at attach does; a takeover
 * refused the same way leaves running what ran. Before, the first start
 * left the program attached and pinned with no daemon to answer for it.
 * A bridge in a namespace the test makes, generic mode.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDaemon } from './helpers/daemon.js';
import { Lab } from './helpers/netns.js';

const isRoot = process.getuid?.() === 0;

describe.skipIf(!isRoot)('a start refused after the data plane was loaded', () => {
  let lab: Lab | undefined;
  let d: TestDaemon | undefined;
  beforeAll(async () => {
    lab = await Lab.create(['x']);
    await lab.ip('x', 'link', 'add', 'br0', 'type', 'bridge');
    await lab.ip('x', 'link', 'set', 'br0', 'up');
  });
  afterAll(async () => {
    await d?.cleanup();
    await lab?.destroy();
  });

  it('the HTTP address cannot be bound: a first start leaves no XDP and no pin; a takeover keeps what ran', async () => {
    d = new TestDaemon({ config: '', netns: lab!.ns('x') });
    const token = join(d.dir, 'token');
    writeFileSync(token, 'a'.repeat(32), { mode: 0o600 });
    const config = (http: boolean): string => `
settings: { max_policies: 8, max_localsids: 8 }
interfaces:
  - { name: br0, xdp: generic }
policies:
  - { match: 192.0.2.0/24, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }
${http ? `daemon:\n  http: { listen: "198.51.100.99:9180", token_file: ${token} }\n` : ''}`;
    const link = (): Promise<string> => lab!.ip('x', '-d', 'link', 'show', 'br0');
    const pins = async (): Promise<string> => (await execa('ls', ['-A', `${d!.bpffs}/mup`], { reject: false })).stdout.trim();

    // 198.51.100.99 is no address of the namespace: the listener's bind fails (EADDRNOTAVAIL), after the attach.
    d.writeConfig(config(true));
    const first = await d.startFailing();
    expect(first.exitCode, first.output).not.toBe(0);
    expect(first.output).toMatch(/198\.51\.100\.99/);
    expect(first.output).toMatch(/detached from every interface and removed the pins/);
    expect(await link()).not.toMatch(/xdp/);
    expect(await pins(), 'no pins left by a refused first start').toBe('');

    // A takeover refused the same way: what ran keeps running.
    d.writeConfig(config(false));
    await d.start();
    await d.stop();
    expect(await link()).toMatch(/xdpgeneric/);
    d.writeConfig(config(true));
    const again = await d.startFailing();
    expect(again.exitCode, again.output).not.toBe(0);
    expect(again.output).not.toMatch(/detached from every interface/);
    // (The takeover had swapped its own program onto the pinned link before the bind failed: the tables and link stay.)
    expect(await link()).toMatch(/xdpgeneric/);
    expect(await pins()).not.toBe('');
  }, 90_000);
});
