/**
 * What a daemon leaves in bpffs so that the data plane outlives it:
 *
 *   <bpffs>/mup/<instance>/
 *     policies  localsids  counters     the tables (maps), carried over
 *     sessions                          (pinned since session 8: an older
 *                                       daemon's pins have none, and the
 *                                       next start adds it)
 *     prog                              the program the links run now
 *     link_<mode>_<ifname>              one XDP link per interface
 *
 * bpffs refuses '.' in names (reserved for its own entries), so '.' and '%'
 * of an interface name (eth0.100) are written %2e and %25.
 *
 * A link stays attached as long as its pin exists, whatever happens to the
 * process that made it; bpf_link_update swaps its program in one step.
 */
import { existsSync, readdirSync, rmdirSync, statfsSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { XdpMode } from '../config/types.js';
import {
  BPF_LINK_TYPE_XDP,
  closeFd,
  LibbpfError,
  linkDetach,
  linkInfo,
  linkUpdate,
  mountBpffs,
  objGet,
  objPin,
  progInfo,
  XDP_FLAGS_DRV_MODE,
  XDP_FLAGS_SKB_MODE,
  xdpLinkCreate,
} from '../dataplane/libbpf.js';
import { ifIndex } from '../dataplane/netns.js';
import { pinDir } from '../host/paths.js';
import { makeDirs } from '../host/mkdirs.js';

export { DEFAULT_BPFFS } from '../host/paths.js';

const BPF_FS_MAGIC = 0xcafe4a11;
export const MAP_PINS = ['policies', 'localsids', 'counters', 'sessions'] as const;
export type MapPin = (typeof MAP_PINS)[number];
/** The pins an earlier run must have left for its tables to be taken over; 'sessions' may be missing (older daemons). */
const REQUIRED_MAP_PINS = ['policies', 'localsids', 'counters'] as const satisfies readonly MapPin[];
/** Open pinned maps: the required ones, and 'sessions' when it is pinned. */
export type PinnedMaps = Record<(typeof REQUIRED_MAP_PINS)[number], number> & { sessions?: number };

/** Instance names become paths: keep them plain. */
export function checkInstance(name: string): void {
  if (!/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/.test(name)) {
    throw new Error(`instance name ${JSON.stringify(name)}: use 1-64 letters, digits, '_' and '-' (starting with a letter or digit)`);
  }
}

export function isBpffs(dir: string): boolean {
  try {
    return statfsSync(dir).type === BPF_FS_MAGIC;
  } catch {
    return false;
  }
}

/** Make sure `dir` is a bpf filesystem, mounting one there if it is not. Returns true if it mounted. */
export function ensureBpffs(dir: string): boolean {
  if (isBpffs(dir)) return false;
  if (!existsSync(dir)) {
    try {
      makeDirs(dir, 0o700);
    } catch (e) {
      // /sys/fs/bpf/NAME before a bpffs is mounted on /sys/fs/bpf: nothing can be made there.
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      const err: NodeJS.ErrnoException = new Error(`${(e as Error).message}; give --bpffs a directory that can be made, or mount a bpf filesystem first (mount -t bpf bpf DIR)`, { cause: e });
      err.code = 'ENOENT';
      throw err;
    }
  }
  try {
    mountBpffs(dir);
  } catch (e) {
    throw new Error(
      `${dir} is not a bpf filesystem and mounting one failed (${(e as Error).message}); ` +
        `mount it yourself: mount -t bpf bpf ${dir}`,
    );
  }
  return true;
}

export interface PinnedLink {
  readonly ifname: string;
  readonly mode: XdpMode;
  readonly path: string;
}

export class Pins {
  readonly dir: string;

  constructor(
    readonly bpffs: string,
    readonly instance: string,
  ) {
    checkInstance(instance);
    this.dir = pinDir(bpffs, instance);
  }

  /** Create the instance directory (the bpffs must be mounted). */
  prepare(): void {
    makeDirs(this.dir, 0o700);
  }

  exists(): boolean {
    return existsSync(this.dir);
  }

  mapPath(m: MapPin): string {
    return join(this.dir, m);
  }

  get progPath(): string {
    return join(this.dir, 'prog');
  }

  linkPath(ifname: string, mode: XdpMode): string {
    return join(this.dir, `link_${mode}_${ifname.replace(/%/g, '%25').replace(/\./g, '%2e')}`);
  }

  /** Are the tables of an earlier run pinned here? */
  hasMaps(): boolean {
    return REQUIRED_MAP_PINS.every((m) => existsSync(this.mapPath(m)));
  }

  /**
   * Open the pinned maps, if the required three are there (fds the caller
   * closes); 'sessions' too when it is pinned.
   */
  openMaps(): PinnedMaps | undefined {
    if (!this.hasMaps()) return undefined;
    const fds: Partial<Record<MapPin, number>> = {};
    try {
      for (const m of MAP_PINS) {
        if (m === 'sessions' && !existsSync(this.mapPath(m))) continue;
        fds[m] = objGet(this.mapPath(m), `map ${m}`);
      }
    } catch (e) {
      for (const fd of Object.values(fds)) closeFd(fd);
      throw e;
    }
    return fds as PinnedMaps;
  }

  /** Pin map fds, replacing whatever is pinned under those names (only the names given). */
  pinMaps(fds: Partial<Record<MapPin, number>>): void {
    for (const m of MAP_PINS) {
      const fd = fds[m];
      if (fd === undefined) continue;
      rmPin(this.mapPath(m));
      objPin(fd, this.mapPath(m), `map ${m}`);
    }
  }

  /** Pin the program that now runs (the previous pin, if any, is replaced). */
  pinProg(progFd: number): void {
    rmPin(this.progPath);
    objPin(progFd, this.progPath, 'program');
  }

  /** Id and tag of the pinned program, if any. */
  pinnedProg(): { id: number; tag: string } | undefined {
    if (!existsSync(this.progPath)) return undefined;
    const fd = objGet(this.progPath, 'program');
    try {
      return progInfo(fd);
    } finally {
      closeFd(fd);
    }
  }

  links(): PinnedLink[] {
    if (!this.exists()) return [];
    const out: PinnedLink[] = [];
    for (const f of readdirSync(this.dir)) {
      const m = /^link_(native|generic)_(.+)$/.exec(f);
      if (m !== null) out.push({ mode: m[1] as XdpMode, ifname: m[2]!.replace(/%2e/g, '.').replace(/%25/g, '%'), path: join(this.dir, f) });
    }
    return out;
  }

  /**
   * Make `ifname` run `progFd` in `mode`: swap the program of the pinned
   * link when there is one for this very interface (atomic: every packet
   * sees the old program or the new), otherwise create and pin a link.
   * Returns what was done.
   *
   * A link of the other mode must go before the new one can be made (the
   * kernel runs one XDP program per interface, and cannot tell whether a
   * driver takes native XDP while another mode runs), so it is detached
   * first. If the kernel then refuses the new mode (a driver without native
   * XDP), a link of the old mode is made again, with the program it ran, so
   * that the interface keeps translating; the error says so, and says
   * loudly when even that failed.
   */
  attach(ifname: string, mode: XdpMode, progFd: number): 'updated' | 'attached' {
    const ifindex = ifIndex(ifname);
    // The live link of the other mode this call removes, and a descriptor of
    // the program it ran (taken while the link still holds the program).
    let previous: { mode: XdpMode; progId: number; progFd: number | undefined } | undefined;
    try {
      for (const l of this.links().filter((x) => x.ifname === ifname)) {
        const fd = objGet(l.path, `link ${l.path}`);
        try {
          const info = linkInfo(fd, `link ${l.path}`);
          const live = info.type === BPF_LINK_TYPE_XDP && info.ifindex === ifindex;
          if (live && l.mode === mode) {
            linkUpdate(fd, progFd, `${ifname} (${mode})`);
            return 'updated';
          }
          if (live) {
            previous = { mode: l.mode, progId: info.progId, progFd: this.#openProg(info.progId) };
            linkDetach(fd, `detaching the ${l.mode} XDP link of ${ifname}`);
          }
        } finally {
          closeFd(fd);
        }
        // Other mode, or the interface was deleted and made again: the old
        // link is defunct or must go before a link of the other mode can exist.
        rmPin(l.path);
      }
      try {
        this.#link(ifname, ifindex, mode, progFd);
      } catch (e) {
        if (previous === undefined) throw e;
        throw this.#putBack(ifname, ifindex, previous, progFd, e as Error);
      }
      return 'attached';
    } finally {
      if (previous?.progFd !== undefined) closeFd(previous.progFd);
    }
  }

  /** Create and pin a link; if the pin fails, the link goes with its descriptor. */
  #link(ifname: string, ifindex: number, mode: XdpMode, progFd: number): void {
    let fd: number;
    try {
      fd = xdpLinkCreate(progFd, ifindex, mode === 'native' ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE, `${ifname} (${mode})`);
    } catch (e) {
      throw attachError(e, ifname, mode);
    }
    try {
      objPin(fd, this.linkPath(ifname, mode), `XDP link of ${ifname}`);
    } finally {
      closeFd(fd);
    }
  }

  /**
   * A descriptor of the program `progId`, through the program pin when that
   * is the one (it is at a takeover and between reloads). The kernel's
   * get-by-id needs CAP_SYS_ADMIN, which the systemd unit does not give.
   */
  #openProg(progId: number): number | undefined {
    try {
      if (!existsSync(this.progPath)) return undefined;
      const fd = objGet(this.progPath, 'program');
      if (progInfo(fd).id === progId) return fd;
      closeFd(fd);
    } catch {
      // Not there: the program being attached is put back instead.
    }
    return undefined;
  }

  /**
   * The new mode was refused after the old mode's link went: make the old
   * one again, with the program it ran (else with the new one, on the same
   * tables at a takeover). Returns the error to throw.
   */
  #putBack(ifname: string, ifindex: number, previous: { mode: XdpMode; progId: number; progFd: number | undefined }, progFd: number, refused: Error): Error {
    const what = previous.progFd === undefined ? 'the program being attached' : `the program it ran (id ${previous.progId})`;
    try {
      this.#link(ifname, ifindex, previous.mode, previous.progFd ?? progFd);
    } catch (e) {
      return new Error(
        `${refused.message}. Putting back the ${previous.mode} link it had failed too (${(e as Error).message}): ` +
          `${ifname} NOW RUNS NO XDP PROGRAM and its GTP-U and SRv6 traffic is not translated; ` +
          `the mode that ran (xdp: ${previous.mode}) attaches it again`,
        { cause: refused },
      );
    }
    return new Error(`${refused.message}. ${ifname} is back in ${previous.mode} mode, running ${what} (its ${previous.mode} link was made again)`, {
      cause: refused,
    });
  }

  /** Remove a link pin: the link goes, and with it the program from the interface. */
  detach(l: PinnedLink): void {
    rmPin(l.path);
  }

  /** Program id running on a pinned link, and whether its interface still exists. */
  linkState(l: PinnedLink): { progId: number; ifindex: number } | undefined {
    try {
      const fd = objGet(l.path, `link ${l.path}`);
      try {
        const info = linkInfo(fd);
        return { progId: info.progId, ifindex: info.ifindex };
      } finally {
        closeFd(fd);
      }
    } catch {
      return undefined;
    }
  }

  /** Remove everything of this instance: links (detaching), program, maps, the directory. */
  removeAll(): string[] {
    const removed: string[] = [];
    if (!this.exists()) return removed;
    for (const f of readdirSync(this.dir)) {
      rmPin(join(this.dir, f));
      removed.push(f);
    }
    rmdirSync(this.dir);
    try {
      rmdirSync(join(this.bpffs, 'mup'));
    } catch {
      // Other instances remain.
    }
    return removed;
  }
}

function rmPin(path: string): void {
  try {
    unlinkSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
}

/** The kernel's reason for a failed attach, and what to do about it. */
function attachError(e: unknown, ifname: string, mode: XdpMode): Error {
  if (!(e instanceof LibbpfError)) return e as Error;
  const hints: Record<string, string> = {
    EBUSY: `another XDP program is attached to ${ifname} (see \`ip link show ${ifname}\` or \`bpftool net\`); detach it first (ip link set ${ifname} xdp off)`,
    EEXIST: `another XDP program is attached to ${ifname} (see \`ip link show ${ifname}\` or \`bpftool net\`); detach it first (ip link set ${ifname} xdp off)`,
    EOPNOTSUPP:
      mode === 'native'
        ? `the driver of ${ifname} has no native XDP support; set \`xdp: generic\` for ${ifname} under interfaces (slower, but works on any interface)`
        : `${ifname} cannot run XDP`,
    EINVAL:
      mode === 'native'
        ? `the kernel refused native XDP on ${ifname} (MTU too large for XDP, or no driver support); try \`xdp: generic\` for ${ifname}`
        : `the kernel refused XDP on ${ifname}`,
  };
  // errno 95 is both EOPNOTSUPP and ENOTSUP on Linux; the binding names it either way.
  const hint = hints[e.code === 'ENOTSUP' ? 'EOPNOTSUPP' : e.code];
  // The kernel's error as the cause: a reload answers a kernel refusal 409 (Daemon.#attachOrPutBack).
  return new Error(hint === undefined ? e.message : `${e.message}; ${hint}`, { cause: e });
}
