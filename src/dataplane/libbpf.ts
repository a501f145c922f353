/**
 * Typed binding of libbpf.so.1 (libbpf 1.x) through koffi.
 *
 * Conventions of libbpf 1.x that this module turns into exceptions:
 * - functions returning a pointer return NULL and set errno;
 * - functions returning an int return -errno.
 * Every wrapper throws a {@link LibbpfError} naming what was being done, the
 * errno name and libbpf's own log lines emitted during the call (libbpf's
 * default printer to stderr is replaced: set MUP_LIBBPF_DEBUG=1 to see
 * everything, debug level included, on stderr).
 *
 * Pointers are koffi 3 BigInts, branded per libbpf type so they cannot be
 * mixed up. The `any` of koffi stops in {@link bind}.
 */
import koffi, { type LibraryHandle } from 'koffi';

// ---------------------------------------------------------------------------
// Handles

declare const handle: unique symbol;
export type BpfObject = bigint & { readonly [handle]: 'bpf_object' };
export type BpfProgram = bigint & { readonly [handle]: 'bpf_program' };
export type BpfMap = bigint & { readonly [handle]: 'bpf_map' };
export type Btf = bigint & { readonly [handle]: 'btf' };

// ---------------------------------------------------------------------------
// Library and the one place where koffi's `any` is typed

const lib = koffi.load('libbpf.so.1');
const libc = koffi.load('libc.so.6');

/** Declare a C function with a prototype string and give it a TypeScript signature. */
function bind<F extends (...args: never[]) => unknown>(from: LibraryHandle, decl: string): F {
  return from.func(decl) as unknown as F;
}

type Ptr = bigint | null;
type Mem = Buffer | Uint8Array | Uint32Array | null;

const c = {
  strerror: bind<(e: number) => string>(libc, 'const char *strerror(int errnum)'),
  vsnprintf: bind<(buf: Buffer, n: number, fmt: Ptr, ap: Ptr) => number>(
    libc,
    'int vsnprintf(void *buf, size_t n, const void *fmt, void *ap)',
  ),
  setPrint: bind<(fn: Ptr) => Ptr>(lib, 'void *libbpf_set_print(void *fn)'),
  getError: bind<(p: Ptr) => number>(lib, 'long libbpf_get_error(const void *ptr)'),
  numPossibleCpus: bind<() => number>(lib, 'int libbpf_num_possible_cpus(void)'),

  objOpenFile: bind<(path: string, opts: Ptr) => Ptr>(
    lib,
    'void *bpf_object__open_file(const char *path, const void *opts)',
  ),
  objLoad: bind<(obj: BpfObject) => number>(lib, 'int bpf_object__load(void *obj)'),
  objClose: bind<(obj: BpfObject) => void>(lib, 'void bpf_object__close(void *obj)'),
  objFindProg: bind<(obj: BpfObject, name: string) => Ptr>(
    lib,
    'void *bpf_object__find_program_by_name(const void *obj, const char *name)',
  ),
  objFindMap: bind<(obj: BpfObject, name: string) => Ptr>(
    lib,
    'void *bpf_object__find_map_by_name(const void *obj, const char *name)',
  ),
  objBtf: bind<(obj: BpfObject) => Ptr>(lib, 'void *bpf_object__btf(const void *obj)'),
  progFd: bind<(prog: BpfProgram) => number>(lib, 'int bpf_program__fd(const void *prog)'),

  mapFd: bind<(map: BpfMap) => number>(lib, 'int bpf_map__fd(const void *map)'),
  mapSetMaxEntries: bind<(map: BpfMap, n: number) => number>(
    lib,
    'int bpf_map__set_max_entries(void *map, uint32_t max_entries)',
  ),
  mapValueSize: bind<(map: BpfMap) => number>(lib, 'uint32_t bpf_map__value_size(const void *map)'),
  mapSetInitialValue: bind<(map: BpfMap, data: Buffer, size: number) => number>(
    lib,
    'int bpf_map__set_initial_value(void *map, const void *data, size_t size)',
  ),
  mapPin: bind<(map: BpfMap, path: string | null) => number>(
    lib,
    'int bpf_map__pin(void *map, const char *path)',
  ),
  mapUnpin: bind<(map: BpfMap, path: string | null) => number>(
    lib,
    'int bpf_map__unpin(void *map, const char *path)',
  ),

  update: bind<(fd: number, key: Mem, value: Mem, flags: bigint) => number>(
    lib,
    'int bpf_map_update_elem(int fd, const void *key, const void *value, uint64_t flags)',
  ),
  lookup: bind<(fd: number, key: Mem, value: Mem) => number>(
    lib,
    'int bpf_map_lookup_elem(int fd, const void *key, void *value)',
  ),
  delete: bind<(fd: number, key: Mem) => number>(lib, 'int bpf_map_delete_elem(int fd, const void *key)'),
  nextKey: bind<(fd: number, key: Mem, next: Mem) => number>(
    lib,
    'int bpf_map_get_next_key(int fd, const void *key, void *next_key)',
  ),
  lookupBatch: bind<
    (fd: number, inBatch: Mem, outBatch: Mem, keys: Mem, values: Mem, count: Mem, opts: Ptr) => number
  >(
    lib,
    'int bpf_map_lookup_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, void *count, const void *opts)',
  ),

  xdpAttach: bind<(ifindex: number, progFd: number, flags: number, opts: Ptr) => number>(
    lib,
    'int bpf_xdp_attach(int ifindex, int prog_fd, uint32_t flags, const void *opts)',
  ),

  btfFindByNameKind: bind<(btf: Btf, name: string, kind: number) => number>(
    lib,
    'int32_t btf__find_by_name_kind(const void *btf, const char *type_name, uint32_t kind)',
  ),
  btfTypeById: bind<(btf: Btf, id: number) => Ptr>(lib, 'const void *btf__type_by_id(const void *btf, uint32_t id)'),
  btfResolveSize: bind<(btf: Btf, id: number) => bigint | number>(
    lib,
    'int64_t btf__resolve_size(const void *btf, uint32_t type_id)',
  ),
  btfNameByOffset: bind<(btf: Btf, off: number) => string | null>(
    lib,
    'const char *btf__name_by_offset(const void *btf, uint32_t offset)',
  ),
};

// ---------------------------------------------------------------------------
// struct bpf_test_run_opts (libbpf 1.1: 80 bytes, `sz` = that)

const TestRunOpts = koffi.struct('bpf_test_run_opts', {
  sz: 'size_t',
  data_in: 'void *',
  data_out: 'void *',
  data_size_in: 'uint32_t',
  data_size_out: 'uint32_t',
  ctx_in: 'void *',
  ctx_out: 'void *',
  ctx_size_in: 'uint32_t',
  ctx_size_out: 'uint32_t',
  retval: 'uint32_t',
  repeat: 'int',
  duration: 'uint32_t',
  flags: 'uint32_t',
  cpu: 'uint32_t',
  batch_size: 'uint32_t',
});
const TEST_RUN_OPTS_SIZE = 80;
if (koffi.sizeof(TestRunOpts) !== TEST_RUN_OPTS_SIZE) {
  throw new Error(`struct bpf_test_run_opts is ${koffi.sizeof(TestRunOpts)} bytes in koffi, expected 80`);
}

interface TestRunOptsValue {
  sz: number;
  data_in: Ptr;
  data_out: Ptr;
  data_size_in: number;
  data_size_out: number;
  ctx_in: Ptr;
  ctx_out: Ptr;
  ctx_size_in: number;
  ctx_size_out: number;
  retval: number;
  repeat: number;
  duration: number;
  flags: number;
  cpu: number;
  batch_size: number;
}

const testRunFn = bind<(fd: number, opts: TestRunOptsValue) => number>(
  lib,
  'int bpf_prog_test_run_opts(int prog_fd, _Inout_ bpf_test_run_opts *opts)',
);

// ---------------------------------------------------------------------------
// Errors and libbpf's log

/** libbpf print levels (enum libbpf_print_level). */
const LIBBPF_WARN = 0;
const LIBBPF_INFO = 1;

const debug = process.env['MUP_LIBBPF_DEBUG'] === '1';
const printBuf = Buffer.alloc(64 * 1024);
let pending: string[] = [];

const PrintFn = koffi.proto('int mup_libbpf_print_fn(int level, const void *fmt, void *ap)');
const printer = koffi.register((level: number, fmt: Ptr, ap: Ptr): number => {
  if (!debug && level > LIBBPF_INFO) return 0;
  const n = c.vsnprintf(printBuf, printBuf.length, fmt, ap);
  const text = printBuf.subarray(0, Math.max(0, Math.min(n, printBuf.length - 1))).toString('utf8');
  if (debug) process.stderr.write(text);
  if (level <= LIBBPF_INFO) pending.push(...text.replace(/\n$/, '').split('\n'));
  if (pending.length > 2000) pending = pending.slice(-2000);
  return 0;
}, koffi.pointer(PrintFn));
c.setPrint(printer);

/** Lines libbpf logged since the last call, and forget them. */
function takeLog(): string[] {
  const lines = pending;
  pending = [];
  return lines;
}

const errnoNames = new Map<number, string>();
for (const [name, value] of Object.entries(koffi.os.errno)) {
  if (!errnoNames.has(value)) errnoNames.set(value, name);
}

/** A libbpf call failed. `message` is one line; `log` holds what libbpf printed meanwhile. */
export class LibbpfError extends Error {
  override readonly name = 'LibbpfError';
  /** errno name, e.g. "ENOENT". */
  readonly code: string;

  constructor(
    /** What was being done, e.g. "loading build/mup.bpf.o". */
    readonly op: string,
    readonly errno: number,
    /** libbpf's warnings and info lines (verifier log included) printed during the call. */
    readonly log: readonly string[] = [],
  ) {
    const code = errnoNames.get(errno) ?? `errno ${errno}`;
    // The kernel's extack reason (netlink calls) says more than errno.
    const kernel = log.map((l) => /Kernel error message: (.*)/.exec(l)?.[1]).find((m) => m !== undefined);
    const hint =
      code === 'EPERM' && typeof process.getuid === 'function' && process.getuid() !== 0
        ? ': BPF needs root (CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN); run it as root'
        : '';
    super(`${op}: ${c.strerror(errno)} (${code})${kernel === undefined ? '' : `: ${kernel}`}${hint}`);
    this.code = code;
  }

  /** The message followed by libbpf's log, for a developer. */
  detail(): string {
    return this.log.length === 0 ? this.message : `${this.message}\n${this.log.join('\n')}`;
  }
}

/** Throw for a negative (-errno) return value; return it otherwise. */
export function check(ret: number, op: string): number {
  if (ret < 0) throw new LibbpfError(op, -ret, takeLog());
  takeLog();
  return ret;
}

/** Throw for a NULL pointer (errno set by libbpf); return the pointer otherwise. */
function checkPtr(p: Ptr, op: string): bigint {
  if (p === null || p === 0n) {
    const e = koffi.errno();
    throw new LibbpfError(op, e > 0 ? e : 22 /* EINVAL */, takeLog());
  }
  takeLog();
  return p;
}

/** libbpf_get_error(): 0, or -errno for a NULL pointer (libbpf 1.x reads errno). */
export function libbpfGetError(p: bigint | null): number {
  return c.getError(p);
}

export function errnoName(errno: number): string {
  return errnoNames.get(errno) ?? `errno ${errno}`;
}

// ---------------------------------------------------------------------------
// Objects, programs, maps

export function numPossibleCpus(): number {
  return check(c.numPossibleCpus(), 'counting possible CPUs');
}

export function objectOpen(path: string): BpfObject {
  return checkPtr(c.objOpenFile(path, null), `opening ${path}`) as BpfObject;
}

export function objectLoad(obj: BpfObject, what: string): void {
  check(c.objLoad(obj), `loading ${what}`);
}

/** objectLoadAsync calls not ended: libbpf's printer is back when none is left. */
let asyncLoads = 0;

/**
 * bpf_object__load on one of libuv's worker threads (koffi's .async): the
 * kernel's verifier runs there while this thread goes on. libbpf's printer
 * is a JS callback, which koffi runs on this thread only: called from the
 * worker it would wait for the event loop (a busy main thread stalls the
 * load). So nothing is printed during the call (libbpf_set_print(NULL)),
 * and a failure carries no libbpf log: the caller that needs the verifier's
 * words loads again with objectLoad. Touch nothing of `obj` until it settles.
 */
export function objectLoadAsync(obj: BpfObject, what: string): Promise<void> {
  takeLog();
  if (asyncLoads++ === 0) c.setPrint(null);
  const printAgain = (): void => {
    if (--asyncLoads === 0) c.setPrint(printer);
  };
  return new Promise<void>((resolve, reject) => {
    const done = (err: unknown, ret: number): void => {
      printAgain();
      if (err !== null && err !== undefined) reject(err instanceof Error ? err : new Error(String(err)));
      else if (ret < 0) reject(new LibbpfError(`loading ${what}`, -ret, takeLog()));
      else resolve();
    };
    try {
      (c.objLoad as unknown as { async: (o: BpfObject, cb: typeof done) => void }).async(obj, done);
    } catch (e) {
      printAgain();
      reject(e instanceof Error ? e : new Error(String(e)));
    }
  });
}

export function objectClose(obj: BpfObject): void {
  c.objClose(obj);
  takeLog();
}

export function findProgram(obj: BpfObject, name: string): BpfProgram {
  return checkPtr(c.objFindProg(obj, name), `finding program ${name}`) as BpfProgram;
}

export function programFd(prog: BpfProgram, name = 'program'): number {
  return check(c.progFd(prog), `getting the fd of ${name}`);
}

export function findMap(obj: BpfObject, name: string): BpfMap {
  return checkPtr(c.objFindMap(obj, name), `finding map ${name}`) as BpfMap;
}

export function mapFd(map: BpfMap, name = 'map'): number {
  return check(c.mapFd(map), `getting the fd of ${name}`);
}

export function mapSetMaxEntries(map: BpfMap, n: number, name = 'map'): void {
  check(c.mapSetMaxEntries(map, n), `setting max_entries of ${name} to ${n}`);
}

export function mapValueSize(map: BpfMap): number {
  return c.mapValueSize(map);
}

export function mapSetInitialValue(map: BpfMap, data: Buffer, name = 'map'): void {
  check(c.mapSetInitialValue(map, data, data.length), `setting the initial value of ${name} (${data.length} bytes)`);
}

export function mapPin(map: BpfMap, path: string, name = 'map'): void {
  check(c.mapPin(map, path), `pinning ${name} at ${path}`);
}

export function mapUnpin(map: BpfMap, path: string | null, name = 'map'): void {
  check(c.mapUnpin(map, path), `unpinning ${name}${path === null ? '' : ` from ${path}`}`);
}

// ---------------------------------------------------------------------------
// Map elements, by fd

export const BPF_ANY = 0n;
export const BPF_NOEXIST = 1n;
export const BPF_EXIST = 2n;

const ENOENT = koffi.os.errno['ENOENT'] ?? 2;

/** One element read from a map: a BPF_MAP_LOOKUP_ELEM or BPF_MAP_LOOKUP_BATCH syscall. */
export interface MapRead {
  readonly fd: number;
  /** mmap: elements copied from a mapping of the map (noteMappedRead). */
  readonly op: 'lookup' | 'lookup_batch' | 'mmap';
  /** Elements asked for (1 for a lookup). */
  readonly elements: number;
}

let mapReadLog: MapRead[] | undefined;

/** A read of `elements` elements of map `fd` from a mapping of it (mapMmap), for traceMapReads. */
export function noteMappedRead(fd: number, elements: number): void {
  mapReadLog?.push({ fd, op: 'mmap', elements });
}

/**
 * Record every element read (mapLookup, mapLookupArrayRange, mapDump) until
 * stop(): for tests that count what an operation reads, e.g. one counter
 * read per /metrics scrape. Off (one undefined check per call) otherwise.
 */
export function traceMapReads(): { readonly reads: readonly MapRead[]; stop(): void } {
  if (mapReadLog !== undefined) throw new Error('traceMapReads: already tracing');
  const reads: MapRead[] = [];
  mapReadLog = reads;
  return {
    reads,
    stop: () => {
      if (mapReadLog === reads) mapReadLog = undefined;
    },
  };
}

export function mapUpdate(fd: number, key: Buffer, value: Buffer, flags = BPF_ANY, what = 'map'): void {
  check(c.update(fd, key, value, flags), `updating an element of ${what}`);
}

/** The value, or undefined when the key is absent. */
export function mapLookup(fd: number, key: Buffer, valueSize: number, what = 'map'): Buffer | undefined {
  const value = Buffer.alloc(valueSize);
  mapReadLog?.push({ fd, op: 'lookup', elements: 1 });
  const ret = c.lookup(fd, key, value);
  if (ret === -ENOENT) {
    takeLog();
    return undefined;
  }
  check(ret, `looking up an element of ${what}`);
  return value;
}

/** True when the key was there. */
export function mapDelete(fd: number, key: Buffer, what = 'map'): boolean {
  const ret = c.delete(fd, key);
  if (ret === -ENOENT) {
    takeLog();
    return false;
  }
  check(ret, `deleting an element of ${what}`);
  return true;
}

/** The key after `key` (the first one for null), or undefined at the end. */
export function mapNextKey(fd: number, key: Buffer | null, keySize: number, what = 'map'): Buffer | undefined {
  const next = Buffer.alloc(keySize);
  const ret = c.nextKey(fd, key, next);
  if (ret === -ENOENT) {
    takeLog();
    return undefined;
  }
  check(ret, `iterating over ${what}`);
  return next;
}

/** Every key of a map (snapshot; a concurrent writer may add or remove some). */
export function mapKeys(fd: number, keySize: number, what = 'map'): Buffer[] {
  const keys: Buffer[] = [];
  for (let k = mapNextKey(fd, null, keySize, what); k !== undefined; k = mapNextKey(fd, k, keySize, what)) {
    keys.push(k);
  }
  return keys;
}

/**
 * Values of keys start..start+count-1 of an array map (per-CPU arrays:
 * `valueSize` is round_up(value_size, 8) * possible CPUs) in one
 * BPF_MAP_LOOKUP_BATCH call, concatenated in key order. For array maps the
 * kernel's in_batch is the key *before* the first one returned. `into`:
 * read into these buffers (values at their start, the returned Buffer a
 * view of them) instead of new ones.
 */
export function mapLookupArrayRange(
  fd: number,
  start: number,
  count: number,
  valueSize: number,
  what = 'map',
  into?: { readonly values: Buffer; readonly keys: Buffer },
): Buffer {
  if (count === 0) return Buffer.alloc(0);
  if (into !== undefined && (into.values.length < valueSize * count || into.keys.length < 4 * count)) {
    throw new RangeError(`reading ${count} elements of ${what}: the buffers given hold ${into.values.length} value and ${into.keys.length} key bytes`);
  }
  const keys = into?.keys ?? Buffer.alloc(4 * count);
  const values = into === undefined ? Buffer.alloc(valueSize * count) : into.values.subarray(0, valueSize * count);
  const inBatch = start > 0 ? Buffer.from(new Uint32Array([start - 1]).buffer) : null;
  const outBatch = Buffer.alloc(4);
  const n = new Uint32Array([count]);
  mapReadLog?.push({ fd, op: 'lookup_batch', elements: count });
  const ret = c.lookupBatch(fd, inBatch, outBatch, keys, values, n, null);
  // ENOENT: the end of the map was reached; n says how many were read.
  if (ret < 0 && ret !== -ENOENT) check(ret, `reading elements ${start}..${start + count - 1} of ${what}`);
  takeLog();
  if (n[0] !== count || keys.readUInt32LE(0) !== start) {
    throw new LibbpfError(`reading elements ${start}..${start + count - 1} of ${what}: got ${n[0]}`, 34 /* ERANGE */);
  }
  return values;
}

// ---------------------------------------------------------------------------
// BPF_PROG_TEST_RUN

export const BPF_F_TEST_RUN_ON_CPU = 1 << 0;
export const BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1;

export interface TestRunOptions {
  readonly dataIn?: Buffer;
  /** Capacity of data_out; 0 or absent: no data_out. */
  readonly dataOutSize?: number;
  readonly ctxIn?: Buffer;
  readonly ctxOutSize?: number;
  readonly repeat?: number;
  readonly flags?: number;
  readonly cpu?: number;
  readonly batchSize?: number;
}

export interface TestRunResult {
  readonly retval: number;
  /** Average ns per repetition. */
  readonly duration: number;
  /** data_out truncated to data_size_out (undefined without dataOutSize). */
  readonly dataOut?: Buffer;
  readonly ctxOut?: Buffer;
}

/**
 * Memory outside the V8 heap, so its address stays valid while koffi
 * marshals the call (small typed arrays can live on the moving heap).
 */
function nativeBuffer(size: number): Buffer {
  return Buffer.from(new ArrayBuffer(Math.max(size, 1)), 0, size);
}

function nativeCopy(src: Buffer): Buffer {
  const b = nativeBuffer(src.length);
  src.copy(b);
  return b;
}

export function testRun(progFd: number, o: TestRunOptions, what = 'program'): TestRunResult {
  const dataIn = o.dataIn === undefined ? undefined : nativeCopy(o.dataIn);
  const dataOut = o.dataOutSize ? nativeBuffer(o.dataOutSize) : undefined;
  const ctxIn = o.ctxIn === undefined ? undefined : nativeCopy(o.ctxIn);
  const ctxOut = o.ctxOutSize ? nativeBuffer(o.ctxOutSize) : undefined;
  const opts: TestRunOptsValue = {
    sz: TEST_RUN_OPTS_SIZE,
    data_in: dataIn ? koffi.address(dataIn) : null,
    data_out: dataOut ? koffi.address(dataOut) : null,
    data_size_in: dataIn?.length ?? 0,
    data_size_out: dataOut?.length ?? 0,
    ctx_in: ctxIn ? koffi.address(ctxIn) : null,
    ctx_out: ctxOut ? koffi.address(ctxOut) : null,
    ctx_size_in: ctxIn?.length ?? 0,
    ctx_size_out: ctxOut?.length ?? 0,
    retval: 0,
    repeat: o.repeat ?? 1,
    duration: 0,
    flags: o.flags ?? 0,
    cpu: o.cpu ?? 0,
    batch_size: o.batchSize ?? 0,
  };
  check(testRunFn(progFd, opts), `running ${what} (BPF_PROG_TEST_RUN, ${dataIn?.length ?? 0} bytes)`);
  // Keep the native buffers alive until here.
  void dataIn;
  void ctxIn;
  return {
    retval: opts.retval,
    duration: opts.duration,
    dataOut: dataOut ? Buffer.from(dataOut.subarray(0, opts.data_size_out)) : undefined,
    ctxOut: ctxOut ? Buffer.from(ctxOut.subarray(0, opts.ctx_size_out)) : undefined,
  };
}

// ---------------------------------------------------------------------------
// XDP attachment

export const XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0;
export const XDP_FLAGS_SKB_MODE = 1 << 1;
export const XDP_FLAGS_DRV_MODE = 1 << 2;
export const XDP_FLAGS_HW_MODE = 1 << 3;
export const XDP_FLAGS_REPLACE = 1 << 4;

export function xdpAttach(ifindex: number, progFd: number, flags: number, what = `ifindex ${ifindex}`): void {
  check(c.xdpAttach(ifindex, progFd, flags, null), `attaching XDP to ${what}`);
}

// struct bpf_xdp_attach_opts (libbpf 1.x): sz, old_prog_fd; 16 bytes with padding.
const XdpAttachOpts = koffi.struct('bpf_xdp_attach_opts', { sz: 'size_t', old_prog_fd: 'int' });
const XDP_ATTACH_OPTS_SIZE = koffi.sizeof(XdpAttachOpts);
const xdpDetachIfFn = bind<(ifindex: number, flags: number, opts: { sz: number; old_prog_fd: number }) => number>(
  lib,
  'int bpf_xdp_detach(int ifindex, uint32_t flags, const bpf_xdp_attach_opts *opts)',
);

/**
 * Detach only if `progFd`'s program is the one attached (XDP_FLAGS_REPLACE
 * with old_prog_fd): another program attached meanwhile fails with EEXIST
 * instead of being removed.
 */
export function xdpDetachProgram(ifindex: number, progFd: number, flags: number, what = `ifindex ${ifindex}`): void {
  check(
    xdpDetachIfFn(ifindex, flags | XDP_FLAGS_REPLACE, { sz: XDP_ATTACH_OPTS_SIZE, old_prog_fd: progFd }),
    `detaching XDP from ${what}`,
  );
}

// ---------------------------------------------------------------------------
// BTF (layouts per linux/btf.h)

export const BTF_KIND = {
  INT: 1,
  PTR: 2,
  ARRAY: 3,
  STRUCT: 4,
  UNION: 5,
  ENUM: 6,
  FWD: 7,
  TYPEDEF: 8,
  VOLATILE: 9,
  CONST: 10,
  RESTRICT: 11,
  FUNC: 12,
  FUNC_PROTO: 13,
  VAR: 14,
  DATASEC: 15,
  FLOAT: 16,
  DECL_TAG: 17,
  TYPE_TAG: 18,
  ENUM64: 19,
} as const;

/** struct btf_type: name_off, info (vlen 0..15, kind 24..28, kind_flag 31), size/type. */
const BTF_TYPE_SIZE = 12;
/** struct btf_member / btf_enum64 / btf_var_secinfo: three __u32. struct btf_enum: two. */
const BTF_ENTRY12 = 12;
const BTF_ENUM_SIZE = 8;

export interface BtfTypeHeader {
  readonly id: number;
  readonly name: string;
  readonly kind: number;
  readonly vlen: number;
  readonly kflag: boolean;
  /** size for STRUCT/UNION/ENUM/DATASEC/INT, type id for PTR/TYPEDEF/VAR/... */
  readonly sizeOrType: number;
  /** The btf_type followed by its vlen entries, copied out of libbpf. */
  readonly raw: Buffer;
}

export interface BtfMember {
  readonly name: string;
  readonly typeId: number;
  /** Offset in bits from the start of the struct. */
  readonly bitOffset: number;
  /** Bitfield size in bits, 0 for a plain member. */
  readonly bitfieldSize: number;
  /** bitOffset / 8 (meaningful for plain members). */
  readonly offset: number;
  /** Size in bytes of the member's type. */
  readonly size: number;
}

export interface BtfStruct {
  readonly id: number;
  readonly name: string;
  readonly size: number;
  readonly members: readonly BtfMember[];
}

export function objectBtf(obj: BpfObject): Btf {
  const p = c.objBtf(obj);
  if (p === null || p === 0n) throw new LibbpfError('reading the object BTF (compile with clang -g)', 61 /* ENODATA */);
  return p as Btf;
}

/** Type id of a named type of that kind, or undefined. */
export function btfFindByNameKind(btf: Btf, name: string, kind: number): number | undefined {
  const id = c.btfFindByNameKind(btf, name, kind);
  takeLog();
  return id < 0 ? undefined : id;
}

export function btfNameByOffset(btf: Btf, off: number): string {
  return c.btfNameByOffset(btf, off) ?? '';
}

export function btfResolveSize(btf: Btf, id: number): number {
  return check(Number(c.btfResolveSize(btf, id)), `resolving the size of BTF type ${id}`);
}

/** The btf_type of `id` and the entries after it (members, enumerators, ...). */
export function btfTypeById(btf: Btf, id: number): BtfTypeHeader {
  const p = checkPtr(c.btfTypeById(btf, id), `reading BTF type ${id}`);
  const head = Buffer.from(koffi.view(p, BTF_TYPE_SIZE));
  const info = head.readUInt32LE(4);
  const kind = (info >>> 24) & 0x1f;
  const vlen = info & 0xffff;
  const entry =
    kind === BTF_KIND.ENUM
      ? BTF_ENUM_SIZE
      : kind === BTF_KIND.STRUCT || kind === BTF_KIND.UNION || kind === BTF_KIND.ENUM64 || kind === BTF_KIND.DATASEC
        ? BTF_ENTRY12
        : 0;
  const raw = Buffer.from(koffi.view(p, BTF_TYPE_SIZE + entry * vlen));
  return {
    id,
    name: btfNameByOffset(btf, head.readUInt32LE(0)),
    kind,
    vlen,
    kflag: (info & 0x80000000) !== 0,
    sizeOrType: head.readUInt32LE(8),
    raw,
  };
}

/** A struct's size and members, or undefined when the BTF has no such struct. */
export function btfStruct(btf: Btf, name: string): BtfStruct | undefined {
  const id = btfFindByNameKind(btf, name, BTF_KIND.STRUCT);
  if (id === undefined) return undefined;
  const t = btfTypeById(btf, id);
  const members: BtfMember[] = [];
  for (let i = 0; i < t.vlen; i++) {
    const at = BTF_TYPE_SIZE + i * BTF_ENTRY12;
    const typeId = t.raw.readUInt32LE(at + 4);
    const off = t.raw.readUInt32LE(at + 8);
    const bitOffset = t.kflag ? off & 0xffffff : off;
    members.push({
      name: btfNameByOffset(btf, t.raw.readUInt32LE(at)),
      typeId,
      bitOffset,
      bitfieldSize: t.kflag ? off >>> 24 : 0,
      offset: bitOffset / 8,
      size: btfResolveSize(btf, typeId),
    });
  }
  return { id, name, size: t.sizeOrType, members };
}

/** An enum's enumerators (ENUM or ENUM64) in declaration order, or undefined. */
export function btfEnum(btf: Btf, name: string): Map<string, number> | undefined {
  const id = btfFindByNameKind(btf, name, BTF_KIND.ENUM) ?? btfFindByNameKind(btf, name, BTF_KIND.ENUM64);
  if (id === undefined) return undefined;
  const t = btfTypeById(btf, id);
  const values = new Map<string, number>();
  for (let i = 0; i < t.vlen; i++) {
    if (t.kind === BTF_KIND.ENUM) {
      const at = BTF_TYPE_SIZE + i * BTF_ENUM_SIZE;
      const v = t.kflag ? t.raw.readInt32LE(at + 4) : t.raw.readUInt32LE(at + 4);
      values.set(btfNameByOffset(btf, t.raw.readUInt32LE(at)), v);
    } else {
      const at = BTF_TYPE_SIZE + i * BTF_ENTRY12;
      const v = t.raw.readUInt32LE(at + 4) + t.raw.readUInt32LE(at + 8) * 2 ** 32;
      values.set(btfNameByOffset(btf, t.raw.readUInt32LE(at)), v);
    }
  }
  return values;
}

/** Offset and size of variable `varName` inside data section `sec` (e.g. ".data.cfg"). */
export function btfDatasecVar(btf: Btf, sec: string, varName: string): { offset: number; size: number } | undefined {
  const id = btfFindByNameKind(btf, sec, BTF_KIND.DATASEC);
  if (id === undefined) return undefined;
  const t = btfTypeById(btf, id);
  for (let i = 0; i < t.vlen; i++) {
    const at = BTF_TYPE_SIZE + i * BTF_ENTRY12;
    const v = btfTypeById(btf, t.raw.readUInt32LE(at));
    if (v.name === varName) return { offset: t.raw.readUInt32LE(at + 4), size: t.raw.readUInt32LE(at + 8) };
  }
  return undefined;
}

// ---------------------------------------------------------------------------
// Pinned objects, map reuse and BPF links (the daemon's survival kit)

const pins = {
  objPin: bind<(fd: number, path: string) => number>(lib, 'int bpf_obj_pin(int fd, const char *pathname)'),
  objGet: bind<(path: string) => number>(lib, 'int bpf_obj_get(const char *pathname)'),
  mapReuseFd: bind<(map: BpfMap, fd: number) => number>(lib, 'int bpf_map__reuse_fd(void *map, int fd)'),
  linkCreate: bind<(progFd: number, targetFd: number, type: number, opts: Buffer | null) => number>(
    lib,
    'int bpf_link_create(int prog_fd, int target_fd, int attach_type, const void *opts)',
  ),
  linkUpdate: bind<(linkFd: number, progFd: number, opts: Ptr) => number>(
    lib,
    'int bpf_link_update(int link_fd, int new_prog_fd, const void *opts)',
  ),
  linkDetach: bind<(linkFd: number) => number>(lib, 'int bpf_link_detach(int link_fd)'),
  infoByFd: bind<(fd: number, info: Buffer, len: Uint32Array) => number>(
    lib,
    'int bpf_obj_get_info_by_fd(int bpf_fd, void *info, uint32_t *info_len)',
  ),
  close: bind<(fd: number) => number>(libc, 'int close(int fd)'),
  mount: bind<(src: string, target: string, fstype: string, flags: number, data: string | null) => number>(
    libc,
    'int mount(const char *source, const char *target, const char *filesystemtype, unsigned long flags, const char *data)',
  ),
  syscall3: libc.func('long syscall(long number, ...)'),
};

/** Throw for a -1 return of a libc call, with errno. */
function checkLibc(ret: number, op: string): number {
  if (ret < 0) throw new LibbpfError(op, koffi.errno(), takeLog());
  return ret;
}

/** Pin any BPF fd (program, map, link) at a path on a bpffs. */
export function objPin(fd: number, path: string, what = 'object'): void {
  check(pins.objPin(fd, path), `pinning ${what} at ${path}`);
}

/** Open a pinned object; returns a new fd the caller must close. */
export function objGet(path: string, what = 'object'): number {
  return check(pins.objGet(path), `opening pinned ${what} ${path}`);
}

export function closeFd(fd: number): void {
  pins.close(fd);
}

/** Use an existing map (e.g. a pinned one) instead of creating one at load. Before objectLoad. */
export function mapReuseFd(map: BpfMap, fd: number, name = 'map'): void {
  check(pins.mapReuseFd(map, fd), `reusing the existing ${name} (fd ${fd})`);
}

export const BPF_XDP_ATTACH_TYPE = 37;

/**
 * A BPF link attaching an XDP program to an interface (in the caller's
 * network namespace), in the mode `xdpFlags` names (XDP_FLAGS_DRV_MODE or
 * XDP_FLAGS_SKB_MODE: no silent fallback). The link lives as long as an fd
 * or a pin refers to it; bpf_link_update swaps its program atomically.
 */
export function xdpLinkCreate(progFd: number, ifindex: number, xdpFlags: number, what: string): number {
  // struct bpf_link_create_opts up to `flags`: sz (size_t), flags (u32), pad.
  const opts = Buffer.alloc(16);
  opts.writeBigUInt64LE(16n, 0);
  opts.writeUInt32LE(xdpFlags, 8);
  return check(pins.linkCreate(progFd, ifindex, BPF_XDP_ATTACH_TYPE, opts), `attaching XDP (link) to ${what}`);
}

/** Replace the program of a link, atomically for the packets. */
export function linkUpdate(linkFd: number, progFd: number, what: string): void {
  check(pins.linkUpdate(linkFd, progFd, null), `replacing the program of the XDP link on ${what}`);
}

/**
 * BPF_LINK_DETACH: the link's program off the interface now. Removing the
 * last pin of a link does it too, but the kernel may do it later (the pin's
 * inode is freed after an RCU grace period), and a link made at once in the
 * other mode, or again in the same one, is then refused (EEXIST, EBUSY).
 */
export function linkDetach(linkFd: number, what: string): void {
  check(pins.linkDetach(linkFd), what);
}

function objInfo(fd: number, size: number, what: string): Buffer {
  const info = Buffer.alloc(size);
  const len = new Uint32Array([size]);
  check(pins.infoByFd(fd, info, len), `reading the info of ${what}`);
  return info;
}

export interface LinkInfo {
  readonly type: number;
  readonly id: number;
  readonly progId: number;
  /** For XDP links; 0 once the interface is gone (the link is then defunct). */
  readonly ifindex: number;
}
export const BPF_LINK_TYPE_XDP = 6;

export function linkInfo(fd: number, what = 'link'): LinkInfo {
  const b = objInfo(fd, 48, what);
  return { type: b.readUInt32LE(0), id: b.readUInt32LE(4), progId: b.readUInt32LE(8), ifindex: b.readUInt32LE(16) };
}

export interface ProgInfo {
  readonly id: number;
  /** 8-byte program tag (hash of the instructions), hex. */
  readonly tag: string;
  readonly name: string;
}

/** A NUL-terminated name of at most 16 bytes (BPF_OBJ_NAME_LEN) at `at`. */
function objName(b: Buffer, at: number): string {
  const name = b.subarray(at, at + 16);
  const end = name.indexOf(0);
  return name.subarray(0, end < 0 ? 16 : end).toString();
}

export function progInfo(fd: number, what = 'program'): ProgInfo {
  const b = objInfo(fd, 232, what);
  return { id: b.readUInt32LE(4), tag: b.subarray(8, 16).toString('hex'), name: objName(b, 64) };
}

export interface MapInfo {
  readonly type: number;
  readonly id: number;
  readonly keySize: number;
  readonly valueSize: number;
  readonly maxEntries: number;
  readonly flags: number;
  readonly name: string;
}

export function mapInfo(fd: number, what = 'map'): MapInfo {
  const b = objInfo(fd, 88, what);
  return {
    type: b.readUInt32LE(0),
    id: b.readUInt32LE(4),
    keySize: b.readUInt32LE(8),
    valueSize: b.readUInt32LE(12),
    maxEntries: b.readUInt32LE(16),
    flags: b.readUInt32LE(20),
    name: objName(b, 24),
  };
}

/** mount -t bpf bpf TARGET (mode 0700). */
export function mountBpffs(target: string): void {
  checkLibc(pins.mount('bpf', target, 'bpf', 0, 'mode=0700'), `mounting a bpf filesystem on ${target}`);
}

/** membarrier(2)'s syscall number per architecture (also for the grace clock's thread, src/dataplane/grace.ts). */
export const NR_MEMBARRIER: Partial<Record<string, number>> = { x64: 324, arm64: 283 };
const MEMBARRIER_CMD_GLOBAL = 1;

/**
 * Wait until every CPU has left any RCU read-side section it was in:
 * membarrier(MEMBARRIER_CMD_GLOBAL), which the kernel implements with
 * synchronize_rcu(). XDP programs run inside such sections, so afterwards no
 * program run still holds a pointer to a hash element deleted or replaced
 * before the call (or to a config copy retired before it).
 */
export function synchronizeRcu(): void {
  const nr = NR_MEMBARRIER[process.arch];
  if (nr === undefined) throw new Error(`membarrier: syscall number unknown for ${process.arch}`);
  const ret = Number(pins.syscall3(nr, 'int', MEMBARRIER_CMD_GLOBAL, 'unsigned int', 0, 'int', -1));
  checkLibc(ret, 'membarrier(MEMBARRIER_CMD_GLOBAL)');
}

const batchFns = {
  updateBatch: bind<(fd: number, keys: Buffer, values: Buffer, count: Uint32Array, opts: Ptr) => number>(
    lib,
    'int bpf_map_update_batch(int fd, const void *keys, const void *values, uint32_t *count, const void *opts)',
  ),
};

/**
 * Write `count` elements in one syscall: keys and values packed back to
 * back. Returns how many the kernel wrote before an error (it throws then).
 */
export function mapUpdateBatch(fd: number, keys: Buffer, values: Buffer, count: number, what = 'map'): void {
  if (count === 0) return;
  const n = new Uint32Array([count]);
  const ret = batchFns.updateBatch(fd, keys, values, n, null);
  if (ret < 0) throw updateBatchError(ret, n[0]!, count, what, takeLog());
  takeLog();
}

/**
 * The error of a BPF_MAP_UPDATE_BATCH of `count` elements that returned
 * `ret` (< 0) and wrote back `reported` (here, or on the fill's write
 * thread: src/dataplane/write-thread.ts).
 */
export function updateBatchError(ret: number, reported: number, count: number, what: string, log: readonly string[] = []): BatchWriteError {
  const written = wentThrough(reported, count);
  return new BatchWriteError(`writing ${count} elements of ${what} (${written} written)`, -ret, log, written);
}

/**
 * How many elements a batch call that failed went through, from the count
 * it gave back. The kernel reports the elements done before the one that
 * failed (fewer than asked); a call it refuses before it starts (EINVAL,
 * EPERM, EBADF...) leaves the count as it was asked, which is not "all of
 * them": then none.
 */
function wentThrough(reported: number, asked: number): number {
  return reported >= asked ? 0 : reported;
}

/** A batch write (BPF_MAP_UPDATE_BATCH or BPF_MAP_DELETE_BATCH) that failed part way: the first `written` elements went through. */
export class BatchWriteError extends LibbpfError {
  constructor(op: string, errno: number, log: readonly string[], readonly written: number) {
    super(op, errno, log);
  }
}

const deleteBatchFn = bind<(fd: number, keys: Buffer, count: Uint32Array, opts: Ptr) => number>(
  lib,
  'int bpf_map_delete_batch(int fd, const void *keys, uint32_t *count, const void *opts)',
);

/**
 * Delete `count` keys (packed back to back) in as few syscalls as the
 * kernel allows; a key that is not there (ENOENT stops the kernel's batch)
 * is skipped and the rest deleted. Returns how many were there. Any other
 * error throws a BatchWriteError whose `written` is how many of the keys,
 * from the first, the kernel went through (deleted, or found missing):
 * those are gone from the map, the rest are as they were.
 */
export function mapDeleteBatch(fd: number, keys: Buffer, keySize: number, count: number, what = 'map'): number {
  let at = 0;
  let deleted = 0;
  while (at < count) {
    const n = new Uint32Array([count - at]);
    const ret = deleteBatchFn(fd, keys.subarray(at * keySize, count * keySize), n, null);
    const done = ret === 0 ? n[0]! : wentThrough(n[0]!, count - at);
    deleted += done;
    at += done;
    if (ret === 0) break;
    const log = takeLog();
    if (-ret !== ENOENT) throw new BatchWriteError(`deleting ${count} elements of ${what} (${deleted} deleted)`, -ret, log, at);
    at++; // the key the kernel did not find
  }
  takeLog();
  return deleted;
}

const ENOSPC = koffi.os.errno['ENOSPC'] ?? 28;

/**
 * Every key and value of a hash map, BPF_MAP_LOOKUP_BATCH a bucket range at
 * a time (the batch token is a bucket index, u32). Returns them packed.
 */
export function mapDump(fd: number, keySize: number, valueSize: number, what = 'map'): { keys: Buffer; values: Buffer; count: number } {
  const keyParts: Buffer[] = [];
  const valueParts: Buffer[] = [];
  let total = 0;
  lookupBatches(fd, keySize, valueSize, `reading the elements of ${what}`, false, (keys, values, got) => {
    keyParts.push(keys.subarray(0, got * keySize));
    valueParts.push(values.subarray(0, got * valueSize));
    total += got;
  });
  return { keys: Buffer.concat(keyParts), values: Buffer.concat(valueParts), count: total };
}

/**
 * How many elements the map holds, by batch reads of 4,096 elements into
 * buffers used again each time (nothing kept): a million elements in about
 * 250 system calls, where a key walk (BPF_MAP_GET_NEXT_KEY) makes one call
 * and one Buffer per key (about 1.5 s of the event loop per million keys
 * here, for `mup status`'s health check).
 */
export function mapCount(fd: number, keySize: number, valueSize: number, what = 'map'): number {
  let total = 0;
  lookupBatches(fd, keySize, valueSize, `counting the elements of ${what}`, true, (_k, _v, got) => {
    total += got;
  });
  return total;
}

/**
 * BPF_MAP_LOOKUP_BATCH from the map's start to its end, 4,096 elements a
 * call (more when one bucket holds more: ENOSPC), `each` given every
 * call's key and value buffers and how many it filled. The buffers are new
 * for each call (a caller may keep them) unless `reuse`.
 */
function lookupBatches(fd: number, keySize: number, valueSize: number, op: string, reuse: boolean, each: (keys: Buffer, values: Buffer, got: number) => void): void {
  let chunk = 4096;
  let keys: Buffer | undefined;
  let values = Buffer.alloc(0);
  let inBatch: Buffer | null = null;
  for (;;) {
    if (keys === undefined || !reuse) {
      keys = Buffer.alloc(keySize * chunk);
      values = Buffer.alloc(valueSize * chunk);
    }
    const outBatch = Buffer.alloc(4);
    const n = new Uint32Array([chunk]);
    mapReadLog?.push({ fd, op: 'lookup_batch', elements: chunk });
    const ret = c.lookupBatch(fd, inBatch, outBatch, keys, values, n, null);
    if (ret === -ENOSPC && (n[0] ?? 0) === 0) {
      // One bucket holds more entries than fit: ask for more at once (the same position: inBatch kept).
      takeLog();
      chunk *= 4;
      keys = undefined;
      continue;
    }
    if (ret < 0 && ret !== -ENOENT) check(ret, op);
    takeLog();
    each(keys, values, n[0] ?? 0);
    if (ret === -ENOENT) return;
    inBatch = outBatch;
  }
}

// ---------------------------------------------------------------------------
// Shared mappings of BPF_F_MMAPABLE array maps

/** map_flags bit of an array map whose values user space may mmap. */
export const BPF_F_MMAPABLE = 0x400;

const mm = {
  mmap: bind<(addr: Ptr, len: number, prot: number, flags: number, fd: number, off: number) => bigint>(
    libc,
    'void *mmap(void *addr, size_t len, int prot, int flags, int fd, long off)',
  ),
  munmap: bind<(addr: bigint, len: number) => number>(libc, 'int munmap(void *addr, size_t len)'),
};

const PROT_READ = 1;
const PROT_WRITE = 2;
const MAP_SHARED = 1;

/** A read-write shared mapping of a map's values (an mmapable array map: value i at i * value size). */
export interface MapMapping {
  readonly memory: ArrayBuffer;
  readonly addr: bigint;
  readonly length: number;
}

/**
 * Map `length` bytes of an mmapable array map's values from byte `offset`
 * (a multiple of the page size); `o.readOnly`: PROT_READ only.
 */
export function mapMmap(fd: number, length: number, what = 'map', offset = 0, o: { readonly readOnly?: boolean } = {}): MapMapping {
  const page = 4096;
  if (offset % page !== 0) throw new RangeError(`mmap of ${what}: offset ${offset} is not a multiple of the page size`);
  const len = Math.ceil(length / page) * page;
  const addr = mm.mmap(null, len, o.readOnly === true ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);
  // MAP_FAILED is (void *)-1.
  if (addr === 0n || addr === 0xffffffffffffffffn || addr === -1n) {
    throw new LibbpfError(`mmap of ${what}`, koffi.errno(), takeLog());
  }
  return { memory: koffi.view(addr, len), addr, length: len };
}

export function mapMunmap(m: MapMapping): void {
  mm.munmap(m.addr, m.length);
}
