/**
 * npm run bench: `mup bench rfc2544` with the standard set (every RFC 2544
 * size, every case); arguments are passed on (`npm run bench -- --quick`).
 */
import { main } from '../../cli/main.js';

process.exitCode = await main([process.argv[0]!, 'mup', 'bench', 'rfc2544', ...process.argv.slice(2)]);
