/**
 * The daemon's health verdict, for `GET /v1/health` and `mup status`
 * (docs/api.md, "Health"): healthy only when every configured interface
 * runs our program and the tables hold the running rule set.
 *
 * What "the tables hold the running rule set" compares (no value is looked
 * at; one batch read of each kernel table, 4,096 elements a call):
 *   - per kind (policies, local SIDs, sessions): every rule of the rule set
 *     (config file + API changes, and the rules learned from BGP) has a rule
 *     id in the tables' mirror, and the mirror holds no more rules than that;
 *   - the kernel's policy and local SID maps hold exactly as many keys as
 *     the mirror says (policies: plus the address-only entries), counted by
 *     batch reads (mapCount; a walk of the keys was a system call and a
 *     Buffer per key, seconds at a million): an entry removed or added
 *     behind the daemon's back shows here.
 */
import { LAYOUTS } from '../dataplane/codec.js';
import { mapCount } from '../dataplane/libbpf.js';
import type { Daemon } from './daemon.js';
import { RULE_KIND_LIST } from './rules.js';

export interface HealthProblem {
  /** Machine-readable: interface_missing, interface_detached, link_unpinned, tables_mismatch, program_missing. */
  readonly code: string;
  readonly message: string;
}

export interface Health {
  /** ok: everything as configured; degraded: running, but see problems. */
  readonly status: 'ok' | 'degraded';
  readonly instance: string;
  readonly pid: number;
  readonly problems: readonly HealthProblem[];
  readonly checked: {
    readonly interfaces: number;
    readonly rules: Record<string, { readonly wanted: number; readonly inTables: number }>;
    readonly kernelKeys: { readonly policies: number; readonly localsids: number };
    /** Present while a batch is being written in slices: the table checks wait for its end. */
    readonly tables?: string;
  };
}

export function health(d: Daemon): Health {
  const problems: HealthProblem[] = [];
  const st = d.status();
  if (st.program === null) problems.push({ code: 'program_missing', message: 'no program is loaded' });
  for (const i of st.interfaces) {
    if (i.ifindex === null) {
      problems.push({ code: 'interface_missing', message: `interface ${i.name} does not exist (attached when it appears)` });
    } else if (!i.attached) {
      problems.push({ code: 'interface_detached', message: `interface ${i.name} does not run the program (NOT ATTACHED${i.progId === null ? '' : `; it runs program ${i.progId}`})` });
    } else if (!i.pinned) {
      problems.push({ code: 'link_unpinned', message: `interface ${i.name}: the XDP link's pin is missing (being restored)` });
    }
  }
  const t = d.dataplane.rules;
  // A batch being written in slices: the tables and the rule set meet only when it ends (its table write,
  // then its rule set's update, each giving the loop turns); so do they while a failed sync's batch is undone.
  const changing = t.changing || d.batchUnderWay || d.undoing;
  const rules: Record<string, { wanted: number; inTables: number }> = {};
  const inTables = { policy: t.policyCount, localsid: t.localsidCount, session: t.sessionCount };
  for (const k of RULE_KIND_LIST) {
    // The config's and API's rules, and those learned from BGP (installed: a refused one is not in the set).
    const set = d.rules.rules(k.kind);
    const learned = d.rules.learned(k.kind);
    const wanted = set.size + learned.size;
    let missing = 0;
    let first: string | undefined;
    for (const m of [set, learned]) {
      for (const [key, r] of m) {
        if (k.ruleId(t, r) === undefined) {
          missing++;
          first ??= key;
        }
      }
    }
    rules[k.section] = { wanted, inTables: inTables[k.kind] };
    if (changing) continue;
    const of = learned.size === 0 ? `${wanted}` : `${wanted} (${learned.size} learned from BGP)`;
    if (missing > 0) problems.push({ code: 'tables_mismatch', message: `${missing} of ${of} ${k.section} are not in the tables (first: ${first})` });
    if (inTables[k.kind] > wanted) problems.push({ code: 'tables_mismatch', message: `the ${k.section} table holds ${inTables[k.kind]} rules, the running rules are ${of}` });
  }
  if (d.tablesOutOfStep) {
    problems.push({ code: 'tables_mismatch', message: 'a table write failed and could not be put back: the tables may not hold the running rules; a reload (mup reload) writes them whole' });
  }
  const maps = d.dataplane.maps;
  const kernelKeys = {
    policies: mapCount(maps.policies, LAYOUTS.mup_policy_key.size, LAYOUTS.mup_policy.size, 'mup_policies'),
    localsids: mapCount(maps.localsids, LAYOUTS.mup_localsid_key.size, LAYOUTS.mup_localsid.size, 'mup_localsids'),
  };
  const mirrorPolicies = t.policyCount + t.addrOnlyCount;
  // Mid-batch the mirror holds the keys planned, the kernel's maps those written so far.
  if (!changing && kernelKeys.policies !== mirrorPolicies) {
    problems.push({ code: 'tables_mismatch', message: `the kernel's policy map holds ${kernelKeys.policies} entries, the daemon wrote ${mirrorPolicies}` });
  }
  if (!changing && kernelKeys.localsids !== t.localsidCount) {
    problems.push({ code: 'tables_mismatch', message: `the kernel's local SID map holds ${kernelKeys.localsids} entries, the daemon wrote ${t.localsidCount}` });
  }
  return {
    status: problems.length === 0 ? 'ok' : 'degraded',
    instance: st.instance,
    pid: st.pid,
    problems,
    checked: { interfaces: st.interfaces.length, rules, kernelKeys, ...(changing ? { tables: 'not compared: a batch is being written' } : {}) },
  };
}
