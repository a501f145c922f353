/** The data plane seen from user space: load, configure, run, count. */
export * from './dataplane.js';
export { checkLayouts, eventNames, LayoutError } from './btf.js';
export * as codec from './codec.js';
export type { CounterValue } from './codec.js';
export * as libbpf from './libbpf.js';
export { LibbpfError } from './libbpf.js';
export { ifIndex, inNetns, NetnsError, NETNS_DIR } from './netns.js';
