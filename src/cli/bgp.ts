/**
 * `mup bgp`: the BGP MUP control plane (docs/bgp.md).
 *   mup bgp config --config FILE [--toml-path P]   the sidecar gobgpd's TOML
 *   mup bgp status [--json]                        sessions and routes (GET /v1/bgp)
 * (`mup bgp session add|del`, the controller helper, is added by src/cli/bgp-session.ts.)
 */
import type { Command } from 'commander';
import { DEFAULT_GOBGPD_TOML, gobgpdToml } from '../bgp/config.js';
import { loadConfigFile } from '../config/load.js';
import type { BgpStatus } from '../daemon/bgp.js';
import { call } from './client.js';
import { target, withTarget, type Io, type TargetOpts } from './ops.js';

export function registerBgp(program: Command, io: Io): Command {
  const bgp = program
    .command('bgp')
    .summary('BGP MUP: the sidecar gobgpd\'s config, what the daemon learns and advertises')
    .description(
      'BGP MUP (SAFI 85) through a sidecar gobgpd: the daemon learns T2ST+DSD (gw) and T1ST+ISD (pe) routes from it and ' +
        'installs them as rules with origin "bgp", and advertises ISDs for its local SIDs and DSDs for its PE SIDs (docs/bgp.md)',
    );
  bgp
    .command('config')
    .summary('print the sidecar gobgpd\'s TOML for the bgp section of a config file')
    .description(
      'print the gobgpd TOML for the bgp: section of FILE (graceful restart on, both MUP families, listen, neighbors); its first ' +
        'line is a comment with the exact gobgpd command that runs it (gobgpd 3.10 has no TOML key for the API address)',
    )
    .requiredOption('--config <file>', 'the daemon\'s YAML config (with a bgp section)')
    .option('--toml-path <path>', 'where the TOML will be written (for the command line in its first comment)', DEFAULT_GOBGPD_TOML)
    .addHelpText('after', '\nExamples:\n  mup bgp config --config /etc/mup/mup.yaml > /etc/mup/gobgpd.toml\n  head -1 /etc/mup/gobgpd.toml   # the gobgpd command\n')
    .action(async (o: { config: string; tomlPath: string }) => {
      const c = await loadConfigFile(o.config);
      if (c.bgp === undefined) throw new Error(`${o.config} has no bgp section; add one (docs/bgp.md) to run a sidecar`);
      io.out(gobgpdToml(c.bgp, o.tomlPath));
    });
  withTarget(bgp.command('status'))
    .summary('BGP sessions of the sidecar and the routes the daemon received, installed, rejected, holds')
    .option('--json', 'print the API answer (GET /v1/bgp) as JSON')
    .addHelpText('after', '\nExamples:\n  mup bgp status\n  mup bgp status --json | jq .routes\n')
    .action(async (o: TargetOpts & { json?: boolean }) => {
      const s = await call<BgpStatus>(target(o), 'GET', '/v1/bgp');
      if (o.json === true) {
        io.out(`${JSON.stringify(s, null, 2)}\n`);
        return;
      }
      const lines: string[] = [];
      const kept = s.monitor.keptForPeers > 0 ? `, ${s.monitor.keptForPeers} routes it lacks kept until its peers have sent their tables` : '';
      lines.push(`sidecar ${s.api}: table ${s.monitor.up ? `being read${kept}` : `not read (${s.monitor.lastError ?? 'starting'})`}; hold-down ${s.holdDownSeconds} s; roles ${s.roles.join(', ')}`);
      if ('error' in s.sessions) lines.push(`sessions: ${s.sessions.error}`);
      else for (const n of s.sessions) lines.push(`neighbor ${String(n['address'])} AS ${String(n['asn'])}: ${String(n['state'])}`);
      lines.push('type   received  installed  rejected  held  unresolved  filtered');
      for (const [t, c] of Object.entries(s.routes)) {
        lines.push(`${t.padEnd(6)} ${String(c.received).padStart(8)}  ${String(c.installed).padStart(9)}  ${String(c.rejected).padStart(8)}  ${String(c.held).padStart(4)}  ${String(c.unresolved).padStart(10)}  ${String(c.filtered).padStart(8)}`);
      }
      const rej = Object.entries(s.rejected).filter(([, n]) => n > 0);
      if (rej.length > 0) lines.push(`rejected by reason: ${rej.map(([r, n]) => `${r} ${n}`).join(', ')}`);
      lines.push(`advertised: ${s.advertised.routes} routes${s.advertised.errors.length > 0 ? ` (errors: ${s.advertised.errors.join('; ')})` : ''}`);
      lines.push(`last change: ${s.lastChange ?? 'never'}`);
      io.out(`${lines.join('\n')}\n`);
    });
  return bgp;
}
