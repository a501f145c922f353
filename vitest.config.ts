import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Packet tests load BPF objects and (later) create namespaces: one file at a time
    // keeps kernel state predictable on a 2-core machine.
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    globalSetup: ['test/setup/bpffs.ts', 'test/setup/checkout-access.ts'],
  },
});
