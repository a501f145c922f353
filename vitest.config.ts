import { defineConfig } from 'vitest/config';

/**
 * Files that share nothing with another file at the kernel or on the host: in-process
 * code (test/unit/), and programs loaded unpinned and driven through BPF_PROG_TEST_RUN,
 * with at most a child process of their own (scapy, tshark, clang). No namespace, no
 * XDP attachment, no pin, no daemon, no port, no latency or event-loop figure.
 */
const PARALLEL = [
  'test/unit/**/*.test.ts',
  ...[
    'badrule', 'counters-cpu', 'dataplane', 'function-totals', 'fuzz', 'fuzz6', 'generation-after-failure', 'grace',
    'layering', 'map-count', 'micro-floor', 'nexthop-cache-start', 'packets', 'pcap', 'sessions',
    'sessions-config', 'teid-tables', 'testrun-limits', 'tshark',
  ].map((f) => `test/${f}.test.ts`),
];

export default defineConfig({
  test: {
    // The rest make namespaces, attach XDP, pin, run daemons and gobgpd, and measure
    // latencies and event-loop delays: one file at a time keeps kernel state and
    // timings predictable on a 2-core machine. `make test` runs the parallel project
    // first, two files at a time (--fileParallelism --maxWorkers 2), then the serial one.
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    globalSetup: ['test/setup/bpffs.ts', 'test/setup/checkout-access.ts'],
    setupFiles: ['test/setup/rows-equal.ts'],
    projects: [
      { extends: true, test: { name: 'parallel', include: PARALLEL } },
      { extends: true, test: { name: 'serial', include: ['test/**/*.test.ts'], exclude: [...PARALLEL, '**/node_modules/**'] } },
    ],
  },
});
