/** Latency probe: timestamped packet I/O (native addon), statistics, report writers. */
export * from './native.js';
export * from './stats.js';
export { HdrHistogram, type HdrBucket } from './hdr.js';
export * from './output.js';
export * from './report.js';
