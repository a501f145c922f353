/**
 * npm run bench: `mup bench rfc2544` with the standard set (every RFC 2544
 * size, every case); arguments are passed on (`npm run bench -- --quick`).
 * `main.ts probe-loadgen SPEC` is the background load's child that the
 * latency steps start (latency.ts), which runs from the same sources.
 */
import { main } from '../../cli/main.js';

const args = process.argv.slice(2);
process.exitCode = await main([process.argv[0]!, 'mup', ...(args[0] === 'probe-loadgen' ? args : ['bench', 'rfc2544', ...args])]);
