/**
 * The daemon's hold on its XDP links, and their repair.
 *
 * The daemon keeps a descriptor of every link it runs (besides the pin), so
 * a link whose pin is removed under it keeps running: the next check pins it
 * again. Every LINK_CHECK_MS (and before every reload) the daemon looks at
 * the link's own state and at the interface:
 *   - pins removed (links, program, tables, the whole directory): pinned again;
 *   - the interface gone: reported (status, metrics: not attached), logged once;
 *   - the interface back (a new ifindex; the old link died with the old
 *     device): a new link is made, pinned and held;
 *   - another program on our link: ours swapped back in.
 * Each event is one log line: what happened, what the daemon did.
 * Cost per check and interface: if_nametoindex, one BPF_OBJ_GET_INFO_BY_FD,
 * one stat.
 */
import { existsSync } from 'node:fs';
import type { InterfaceConfig as Interface, XdpMode } from '../config/types.js';
import { closeFd, linkInfo, linkUpdate, objGet, objPin } from '../dataplane/libbpf.js';
import { ifIndex } from '../dataplane/netns.js';
import type { Logger } from './log.js';
import { MAP_PINS, type MapPin, type Pins } from './pins.js';
import { makeDirs } from '../host/mkdirs.js';

/** How often the links and interfaces are checked (ms). */
export const LINK_CHECK_MS = 1000;

/** Problem key of the pins (not an interface name: those have no NUL). */
const PINS = '\0pins';

interface Held {
  readonly mode: XdpMode;
  readonly fd: number;
}

export interface LinkState {
  /** Current ifindex of the interface, null when there is none by that name. */
  readonly ifindex: number | null;
  /** The link we hold runs `progId` on this very interface (and it is ours). */
  readonly attached: boolean;
  /** Program id the interface's link runs (null: no live link). */
  readonly progId: number | null;
  /** The link's pin exists (a daemon after us takes it over). */
  readonly pinned: boolean;
}

export interface KeeperContext {
  readonly pins: Pins;
  readonly log: Logger;
  /** What the daemon runs now. */
  readonly progFd: () => number;
  readonly progId: () => number;
  readonly maps: () => Record<MapPin, number>;
  /** The pin directory was made again: take the instance lock on the new one. */
  readonly dirRecreated: () => void;
}

function currentIfindex(name: string): number | null {
  try {
    return ifIndex(name);
  } catch {
    return null;
  }
}

export class LinkKeeper {
  readonly #c: KeeperContext;
  readonly #held = new Map<string, Held>();
  /** Last problem logged per interface, so a lasting one is logged once. */
  readonly #problem = new Map<string, string>();

  constructor(c: KeeperContext) {
    this.#c = c;
  }

  /** Hold the pinned link of each interface (after an attach). */
  hold(ifaces: readonly Interface[]): void {
    for (const i of ifaces) {
      const path = this.#c.pins.linkPath(i.name, i.xdp);
      if (!existsSync(path)) continue;
      this.release(i.name);
      this.#held.set(i.name, { mode: i.xdp, fd: objGet(path, `link ${path}`) });
    }
  }

  /** Let go of an interface's link (before detaching it or making one of another mode). */
  release(ifname: string): void {
    const h = this.#held.get(ifname);
    if (h === undefined) return;
    closeFd(h.fd);
    this.#held.delete(ifname);
  }

  /** Let go of links of interfaces no longer wanted, or wanted in another mode. */
  releaseExcept(wanted: readonly Interface[]): void {
    for (const [name, h] of this.#held) {
      if (!wanted.some((i) => i.name === name && i.xdp === h.mode)) this.release(name);
    }
  }

  releaseAll(): void {
    for (const name of [...this.#held.keys()]) this.release(name);
  }

  #info(name: string): { progId: number; ifindex: number } | undefined {
    const h = this.#held.get(name);
    if (h === undefined) return undefined;
    try {
      const i = linkInfo(h.fd);
      return { progId: i.progId, ifindex: i.ifindex };
    } catch {
      return undefined;
    }
  }

  state(i: Interface): LinkState {
    const ifindex = currentIfindex(i.name);
    const info = this.#info(i.name);
    const live = info !== undefined && info.ifindex !== 0 && info.ifindex === ifindex;
    return {
      ifindex,
      attached: live && info.progId === this.#c.progId(),
      progId: live ? info.progId : null,
      pinned: existsSync(this.#c.pins.linkPath(i.name, i.xdp)),
    };
  }

  /** Put back the pins of what runs: directory, tables, program, the links we hold. */
  repin(): void {
    const { pins, log } = this.#c;
    if (!pins.exists()) {
      makeDirs(pins.dir, 0o700);
      this.#c.dirRecreated();
      log.warn({ pins: pins.dir }, 'the pin directory was removed: made it again; pinning everything again');
    }
    const maps = this.#c.maps();
    for (const m of MAP_PINS) {
      if (existsSync(pins.mapPath(m))) continue;
      objPin(maps[m], pins.mapPath(m), `map ${m}`);
      log.warn({ pin: pins.mapPath(m) }, 'a table pin was removed: pinned it again (the table itself was never lost)');
    }
    if (!existsSync(pins.progPath)) {
      pins.pinProg(this.#c.progFd());
      log.warn({ pin: pins.progPath }, 'the program pin was removed: pinned it again');
    }
    this.repinLinks();
  }

  /** Put back the pins of the links we hold (before an attach, which looks for them). */
  repinLinks(): void {
    const { pins, log } = this.#c;
    for (const [name, h] of this.#held) {
      const path = pins.linkPath(name, h.mode);
      if (existsSync(path)) continue;
      const info = this.#info(name);
      if (info === undefined || info.ifindex === 0) continue; // defunct: check() makes a new one
      objPin(h.fd, path, `XDP link of ${name}`);
      log.warn({ interface: name, mode: h.mode, pin: path }, 'the link pin was removed: pinned it again (the daemon held the link: it never stopped forwarding)');
    }
  }

  /**
   * Bring every wanted interface to "our program runs on its current
   * device": re-pin, re-attach, swap back. Returns the interfaces that are
   * missing. Errors are logged (once per distinct error) and retried at the
   * next check.
   */
  check(wanted: readonly Interface[]): string[] {
    const { pins, log } = this.#c;
    try {
      this.repin();
      this.#problem.delete(PINS);
    } catch (e) {
      this.#once(PINS, (e as Error).message, () => log.error({ pins: pins.dir, error: (e as Error).message }, 'could not pin again; retrying'));
    }
    const missing: string[] = [];
    for (const i of wanted) {
      const ifindex = currentIfindex(i.name);
      if (ifindex === null) {
        missing.push(i.name);
        this.#once(i.name, 'missing', () =>
          log.warn({ interface: i.name, mode: i.xdp }, 'the interface is gone: not attached (no traffic through it); it is attached again when it comes back'),
        );
        continue;
      }
      const info = this.#info(i.name);
      try {
        if (info !== undefined && info.ifindex === ifindex) {
          if (info.progId !== this.#c.progId()) {
            linkUpdate(this.#held.get(i.name)!.fd, this.#c.progFd(), `${i.name} (${i.xdp})`);
            log.warn({ interface: i.name, found: info.progId, ours: this.#c.progId() }, 'the link ran another program: swapped ours back in');
          }
          this.#ok(i.name, ifindex);
          continue;
        }
        // No live link on this device: the interface was made again (the
        // old link died with the old device), or we never held one.
        this.release(i.name);
        const how = pins.attach(i.name, i.xdp, this.#c.progFd());
        this.hold([i]);
        const was = this.#problem.get(i.name);
        log.warn(
          { interface: i.name, mode: i.xdp, ifindex, previousIfindex: info?.ifindex ?? null, how },
          was === 'missing' || (info !== undefined && info.ifindex !== ifindex)
            ? 'the interface came back (a new device): attached our program again'
            : 'the interface had no live link of ours: attached our program again',
        );
        this.#problem.delete(i.name);
      } catch (e) {
        this.#once(i.name, (e as Error).message, () =>
          log.error({ interface: i.name, mode: i.xdp, error: (e as Error).message }, 'could not attach again; retrying'),
        );
      }
    }
    return missing;
  }

  #ok(name: string, ifindex: number): void {
    if (this.#problem.has(name)) {
      this.#problem.delete(name);
      this.#c.log.info({ interface: name, ifindex }, 'the interface runs our program again');
    }
  }

  #once(key: string, problem: string, logIt: () => void): void {
    if (this.#problem.get(key) === problem) return;
    this.#problem.set(key, problem);
    logIt();
  }
}
