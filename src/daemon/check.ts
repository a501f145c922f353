/**
 * `mup daemon --check --config F`: what a daemon started on F would load,
 * checked without starting one (no root, no BPF): the file (errors name
 * file:line and the key path), the state file's API changes on top of it
 * (moved onto an edited file as a start would, refused on the same
 * conflicts), and the interfaces it names. Docs: docs/cli.md, docs/config.md.
 */
import { readFileSync } from 'node:fs';
import { parseConfig } from '../config/load.js';
import { ConfigError } from '../config/errors.js';
import { defaultStateFile } from '../host/paths.js';
import { emptyOverlay, overlaySize, rebaseOverlay, RuleSet, ruleSetDiff, sha256, StateStore } from './rules.js';

export interface CheckResult {
  /** Lines for the operator: the summary, warnings, then the diff the state file applies on top of the file. */
  readonly lines: string[];
}

export class CheckError extends Error {
  override readonly name = 'CheckError';
}

export function checkDaemonConfig(o: { configPath: string; instance: string; stateFile?: string }): CheckResult {
  let text: Buffer;
  try {
    text = readFileSync(o.configPath);
  } catch (e) {
    throw new ConfigError(o.configPath, '', `cannot read the config file: ${(e as Error).message}`);
  }
  const config = parseConfig(text.toString('utf8'), o.configPath, undefined, text); // throws ConfigError: FILE:LINE: KEYPATH: REASON
  const lines: string[] = [];
  const n = (x: readonly unknown[] | undefined): number => (x ?? []).length;
  lines.push(
    `config ${o.configPath}: valid (${n(config.policies)} policies, ${n(config.localsids)} local SIDs, ${n(config.sessions)} sessions, ${n(config.interfaces)} interfaces)`,
  );
  for (const w of config.warnings ?? []) lines.push(`warning: ${w.message}`);
  const stateFile = o.stateFile ?? config.daemon?.stateFile ?? defaultStateFile(o.instance);
  const fileOnly = new RuleSet(config, emptyOverlay());
  let got: ReturnType<StateStore['read']>;
  try {
    got = new StateStore(stateFile).read();
  } catch (e) {
    if (/EACCES|EPERM/.test((e as Error).message)) {
      lines.push(`warning: state file ${stateFile}: cannot read it (${(e as Error).message}); its API changes were not checked (run as the daemon's user)`);
      return { lines };
    }
    throw new CheckError(`${(e as Error).message}`);
  }
  if (got === undefined) {
    lines.push(`state file ${stateFile}: none; the file alone is loaded`);
    return { lines };
  }
  let overlay = got.overlay;
  const edited = got.header.config.sha256 !== sha256(text);
  if (edited) {
    const r = rebaseOverlay(got.overlay, (kind, key) => got.bases.get(`${kind} ${key}`), config);
    if (r.conflicts.length > 0) {
      throw new CheckError(
        `${o.configPath} was edited since the API changes in ${stateFile} were made, and both change the same rules: ${r.conflicts.join(', ')}; ` +
          'a daemon would refuse to start: make the file say what you want for these rules, or move the state file aside to let the file win',
      );
    }
    overlay = r.overlay;
    lines.push(
      `state file ${stateFile}: made on an earlier version of the file; ${overlaySize(r.overlay)} API changes apply on top of this one` +
        `${r.absorbed.length > 0 ? `, ${r.absorbed.length} are in the file already` : ''}`,
    );
  }
  let rules: RuleSet;
  try {
    rules = new RuleSet(config, overlay);
  } catch (e) {
    throw new CheckError(`the config file with the API changes of ${stateFile} on top does not hold together: ${(e as Error).message}`);
  }
  // Counted in the set: a rule the API put back as the file has it is not an API change (RuleSet).
  if (!edited) lines.push(`state file ${stateFile}: ${overlaySize(rules.overlay)} API changes apply on top of the file`);
  if (got.torn) lines.push(`warning: state file ${stateFile}: its last line was cut short (never acknowledged); a daemon drops it`);
  lines.push(...ruleSetDiff(fileOnly, rules));
  return { lines };
}
