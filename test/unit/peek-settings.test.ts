/**
 * peekSettings (src/config/load.ts): the settings read ahead of a config's
 * rules, so that the daemon starts loading the program (sized by them)
 * while the rules are read. A guess: the parse's own settings decide. A
 * JSON config read nothing ahead before: its program began loading once
 * every rule was read.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig, peekSettings } from '../../src/config/load.js';

const settings = { max_policies: 2000, max_sessions: 3000, max_localsids: 70 };
const policy = { match: '10.0.0.0/24', sr_prefix: '2001:db8:1::/48', src_prefix: '2001:db8:ff::/64' };

describe('peekSettings', () => {
  it.each([
    ['JSON, settings first', JSON.stringify({ settings, policies: [policy] })],
    ['JSON, after interfaces and daemon', JSON.stringify({ interfaces: [{ name: 'mup0' }], daemon: { reload_max_delete_share: 0.5 }, settings, sessions: [] })],
    ['JSON, indented', JSON.stringify({ interfaces: [{ name: 'mup0' }], settings, policies: [policy] }, null, 2)],
    ['YAML, block', `interfaces:\n  - name: mup0\nsettings:\n  max_policies: 2000\n  max_sessions: 3000\n  max_localsids: 70\npolicies: []\n`],
  ])('%s: the file\'s settings', (_what, text) => {
    const s = peekSettings(text);
    expect(s).toBeDefined();
    expect(s).toEqual(parseConfig(text, 'x.json').settings);
  });

  it.each([
    ['JSON, settings after a rule list (not read past)', JSON.stringify({ policies: [policy], settings })],
    ['JSON, no settings', JSON.stringify({ policies: [policy] })],
    ['JSON, settings refused', JSON.stringify({ settings: { max_policies: 'many' } })],
    ['JSON, cut short', '{"interfaces": [{"name": "mup0"}], "settings": {"max_policies": 20'],
    ['JSON, not an object member', '{"interfaces" 1, "settings": {}}'],
    ['JSON, a member past the first megabyte', `{"interfaces": [${Array.from({ length: 70_000 }, () => '{"name": "mup0"}').join(',')}], "settings": ${JSON.stringify(settings)}}`],
    ['YAML, no settings', 'policies: []\n'],
  ])('%s: nothing', (_what, text) => {
    expect(peekSettings(text)).toBeUndefined();
  });

  describe('from a large file\'s first lines only (whole false)', () => {
    const block = 'settings:\n  max_policies: 2000\n  max_sessions: 3000\n  max_localsids: 70\n';
    it.each([
      ['YAML, the block ended by the next key', `interfaces:\n  - name: mup0\n${block}policies:\n  - { match: 10.0.0.0/24 }\n`],
      ['JSON, settings first', `${JSON.stringify({ settings, policies: [policy] }).slice(0, 120)}\n`],
    ])('%s: the settings', (_what, head) => {
      expect(peekSettings(head, false)).toEqual(settings && parseConfig(`${block}`, 'x.yaml').settings);
    });

    it.each([
      // Cut after "max_sessions: 3000": the rest of the block (max_localsids) may be past the head.
      ['YAML, the block running to the end of the head', `interfaces:\n  - name: mup0\nsettings:\n  max_policies: 2000\n  max_sessions: 3000\n`],
      ['YAML, the block and blank lines to the end', `${block}\n\n`],
      ['JSON, the settings cut short', '{"settings": {"max_policies": 2000, "max_sessions": 30\n'],
    ])('%s: nothing (the whole file is read for them)', (_what, head) => {
      expect(peekSettings(head, false)).toBeUndefined();
      // Whole, the same text is read as it is.
      if (!head.startsWith('{')) expect(peekSettings(head)).toBeDefined();
    });
  });
});
