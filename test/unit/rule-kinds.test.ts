/**
 * The CLI keeps its own entry per kind of rule (it does not load the
 * daemon's modules): its API names must be the daemon's.
 */
import { describe, expect, it } from 'vitest';
import { RULE_COMMANDS } from '../../src/cli/ops.js';
import { RULE_KINDS } from '../../src/daemon/rules.js';

describe('kinds of rule', () => {
  it('the CLI has an entry for every kind the daemon has, with the same API names', () => {
    expect(Object.keys(RULE_COMMANDS)).toEqual(Object.keys(RULE_KINDS));
    for (const k of Object.values(RULE_KINDS)) {
      const c = RULE_COMMANDS[k.kind];
      expect({ kind: c.kind, verb: c.verb, path: c.path, listKey: c.listKey, keyName: c.keyName, label: c.label }).toEqual({
        kind: k.kind,
        verb: k.cliVerb,
        path: k.apiPath,
        listKey: k.section,
        keyName: k.keyName,
        label: k.label,
      });
    }
  });
});
