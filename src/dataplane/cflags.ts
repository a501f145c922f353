/**
 * The clang flags every BPF object of this project is built with: bpf/cflags
 * (which the Makefile reads too) and the architecture's include directory.
 * For the benchmarks and tests that build variants of the data plane.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const BPF_CFLAGS_FILE = fileURLToPath(new URL('../../bpf/cflags', import.meta.url));

export function bpfCflags(): string[] {
  const arch = execFileSync('uname', ['-m']).toString().trim();
  return [...readFileSync(BPF_CFLAGS_FILE, 'utf8').trim().split(/\s+/), `-I/usr/include/${arch}-linux-gnu`];
}
