/**
 * A start whose config file was edited while the daemon was down, so that
 * it and the state file's API changes give one name to two rules of
 * different keys. The checks worded it as a file's error ("the config with
 * the state file applied: name ... is already used by policies[1]"),
 * naming neither the state file nor a way out; it is a 409 naming both
 * files and what to do now. The real Daemon's prepare() (the config and
 * the state file read; no program is loaded, nothing spawned).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { Daemon } from '../../src/daemon/daemon.js';
import { createLogger } from '../../src/daemon/log.js';
import { emptyOverlay, RULE_KINDS, RuleError, sha256, StateStore } from '../../src/daemon/rules.js';

const HEAD = 'settings: { max_policies: 16, max_localsids: 16 }\npolicies:\n  - { name: p1, match: 10.1.0.0/16, sr_prefix: "2001:db8:1::/48", src_prefix: "2001:db8:ff::/64" }\n';
const EDGE = '  - { name: edge, match: 10.3.0.0/16, sr_prefix: "2001:db8:3::/48", src_prefix: "2001:db8:ff::/64" }\n';

describe('a start whose edited file and API changes give one name to two rules', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('is refused with 409, naming the config file, the state file and the way out', async () => {
    dir = mkdtempSync(join(tmpdir(), 'mup-name-clash-'));
    const configPath = join(dir, 'mup.yaml');
    const stateFile = join(dir, 'state.json');
    // The API added policy "edge" at 10.2/16 on top of the file as it was; the file then gained its own "edge" at 10.3/16.
    const api = RULE_KINDS.policy.parse({ name: 'edge', match: '10.2.0.0/16', sr_prefix: '2001:db8:2::/48', src_prefix: '2001:db8:ff::/64' }, 'api');
    const overlay = emptyOverlay();
    overlay.policies.set(RULE_KINDS.policy.key(api), api);
    new StateStore(stateFile).rewrite('t', configPath, sha256(Buffer.from(HEAD)), overlay, () => null);
    writeFileSync(configPath, HEAD + EDGE);
    const d = new Daemon({
      configPath,
      stateFile,
      instance: `clash${process.pid}`,
      bpffs: join(dir, 'bpffs'),
      earlyLoad: false,
      spawnEarly: false,
      log: createLogger({ instance: 'test', level: 'error', json: true, stream: new Writable({ write: (_c, _e, cb) => cb() }) }),
    });
    const e = await d.prepare().then(
      () => undefined,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(RuleError);
    expect((e as RuleError).status).toBe(409);
    const m = (e as Error).message;
    expect(m).toContain(`${configPath} and the API changes in ${stateFile} do not hold together`);
    expect(m).toMatch(/"edge" is already used/);
    expect(m).toMatch(/move the state file aside to let the file win/);
  });
});
