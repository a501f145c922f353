/**
 * Pins.attach when an interface's XDP mode changes and the kernel refuses
 * the new mode, with the kernel faked (libbpf.js, netns.js): pins are
 * files in a temporary directory, a link runs while it is not detached and
 * a descriptor or a pin of it exists, and an interface runs one link at a
 * time.
 *
 * - The old mode's link is detached before the new one is tried (the kernel
 *   takes one per interface), and made again, with the program it ran, when
 *   the new mode is refused: the interface keeps running what it ran.
 * - If the program pin is not the one the link ran, the program being
 *   attached is put back, and the error says which.
 * - If putting it back fails too, the error says loudly that the interface
 *   runs no XDP program.
 *
 * Before, the old link's pin was removed and nothing was put back: at a
 * takeover nothing else held the link, so the interface ran no program.
 * test/takeover-mode.test.ts checks the same with a real kernel and daemon.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Pins } from '../../src/daemon/pins.js';

interface Link {
  readonly id: number;
  readonly ifindex: number;
  readonly mode: 'native' | 'generic';
  progId: number;
  detached: boolean;
  readonly fds: Set<number>;
  readonly pins: Set<string>;
}

const fake = vi.hoisted(() => {
  class LibbpfError extends Error {
    constructor(
      msg: string,
      readonly code: string,
    ) {
      super(msg);
    }
  }
  return {
    LibbpfError,
    nextFd: 100,
    nextId: 1,
    /** fd -> what it refers to */
    fds: new Map<number, { link: Link } | { progId: number }>(),
    /** path -> what is pinned there (the file exists while it is pinned) */
    pinned: new Map<string, { link: Link } | { progId: number }>(),
    links: [] as Link[],
    /** Kernel calls, in order. */
    calls: [] as string[],
    /** Modes the device refuses. */
    refuse: new Set<string>(),
  };
});

function alive(l: Link): boolean {
  return !l.detached && (l.fds.size > 0 || [...l.pins].some((p) => existsSync(p)));
}

/** The program the fake kernel runs on ifindex 3, in which mode. */
function running(): { mode: string; progId: number } | undefined {
  const l = fake.links.find((x) => x.ifindex === 3 && alive(x));
  return l === undefined ? undefined : { mode: l.mode, progId: l.progId };
}

vi.mock('../../src/dataplane/netns.js', () => ({ ifIndex: (): number => 3 }));

vi.mock('../../src/dataplane/libbpf.js', () => {
  const open = (o: { link: Link } | { progId: number }): number => {
    const fd = fake.nextFd++;
    fake.fds.set(fd, o);
    if ('link' in o) o.link.fds.add(fd);
    return fd;
  };
  return {
    BPF_LINK_TYPE_XDP: 6,
    XDP_FLAGS_SKB_MODE: 2,
    XDP_FLAGS_DRV_MODE: 4,
    LibbpfError: fake.LibbpfError,
    check: (ret: number, op: string): number => {
      if (ret < 0) throw new fake.LibbpfError(`${op}: errno ${-ret}`, 'EBADF');
      return ret;
    },
    closeFd: (fd: number): void => {
      const o = fake.fds.get(fd);
      if (o !== undefined && 'link' in o) o.link.fds.delete(fd);
      fake.fds.delete(fd);
    },
    objGet: (path: string): number => {
      const o = fake.pinned.get(path);
      if (o === undefined || !existsSync(path)) throw new fake.LibbpfError(`opening ${path}: ENOENT`, 'ENOENT');
      return open(o);
    },
    objPin: (fd: number, path: string): void => {
      const o = fake.fds.get(fd)!;
      fake.pinned.set(path, o);
      if ('link' in o) o.link.pins.add(path);
      writeFileSync(path, '');
    },
    linkInfo: (fd: number) => {
      const l = (fake.fds.get(fd) as { link: Link }).link;
      return { type: 6, id: l.id, progId: l.progId, ifindex: l.detached ? 0 : l.ifindex };
    },
    linkDetach: (fd: number, what: string): void => {
      const o = fake.fds.get(fd);
      if (o === undefined || !('link' in o)) throw new fake.LibbpfError(`${what}: errno 9`, 'EBADF');
      fake.calls.push(`detach ${o.link.mode}`);
      o.link.detached = true;
    },
    linkUpdate: (fd: number, progFd: number): void => {
      (fake.fds.get(fd) as { link: Link }).link.progId = (fake.fds.get(progFd) as { progId: number }).progId;
    },
    progInfo: (fd: number) => ({ id: (fake.fds.get(fd) as { progId: number }).progId, tag: '00', name: 'p' }),
    xdpLinkCreate: (progFd: number, ifindex: number, flags: number, what: string): number => {
      const mode = flags === 4 ? 'native' : 'generic';
      fake.calls.push(`create ${mode}`);
      if (fake.links.some((l) => l.ifindex === ifindex && alive(l))) throw new fake.LibbpfError(`attaching XDP (link) to ${what}: busy (EBUSY)`, 'EBUSY');
      if (fake.refuse.has(mode)) throw new fake.LibbpfError(`attaching XDP (link) to ${what}: Operation not supported (EOPNOTSUPP)`, 'EOPNOTSUPP');
      const link: Link = { id: fake.nextId++, ifindex, mode, progId: (fake.fds.get(progFd) as { progId: number }).progId, detached: false, fds: new Set(), pins: new Set() };
      fake.links.push(link);
      return open({ link });
    },
    mountBpffs: (): void => undefined,
  };
});

describe('Pins.attach: a mode change the interface refuses', () => {
  let bpffs = '';
  let pins: Pins;
  /** The program the old daemon ran (id 41, pinned as prog) and the new one (id 42). */
  let newProg = 0;

  /** What an earlier daemon left: eth1 in generic mode running program 41, pinned. */
  const earlier = (pinProg: boolean): void => {
    const old = fake.nextFd++;
    fake.fds.set(old, { progId: 41 });
    if (pinProg) pins.pinProg(old);
    const link: Link = { id: fake.nextId++, ifindex: 3, mode: 'generic', progId: 41, detached: false, fds: new Set(), pins: new Set() };
    fake.links.push(link);
    const fd = fake.nextFd++;
    fake.fds.set(fd, { link });
    link.fds.add(fd);
    fake.pinned.set(pins.linkPath('eth1', 'generic'), { link });
    link.pins.add(pins.linkPath('eth1', 'generic'));
    writeFileSync(pins.linkPath('eth1', 'generic'), '');
    // The earlier daemon exits: only the pins hold the link and the program.
    link.fds.delete(fd);
    fake.fds.delete(fd);
    fake.fds.delete(old);
  };

  beforeEach(() => {
    bpffs = mkdtempSync(join(tmpdir(), 'mup-pins-mode-'));
    pins = new Pins(bpffs, 'x');
    pins.prepare();
    fake.links.length = 0;
    fake.fds.clear();
    fake.pinned.clear();
    fake.calls.length = 0;
    fake.refuse = new Set(['native']);
    newProg = fake.nextFd++;
    fake.fds.set(newProg, { progId: 42 });
  });

  afterEach(() => {
    rmSync(bpffs, { recursive: true, force: true });
  });

  const linkPins = (): string[] => readdirSync(pins.dir).filter((f) => f.startsWith('link_'));

  it('detaches the old link first, and makes it again with the program it ran when the new mode is refused', () => {
    earlier(true);
    expect(running()).toEqual({ mode: 'generic', progId: 41 });
    expect(() => pins.attach('eth1', 'native', newProg)).toThrow(
      /eth1 \(native\).*EOPNOTSUPP.*no native XDP support.*xdp: generic.*eth1 is back in generic mode, running the program it ran \(id 41\)/,
    );
    expect(fake.calls).toEqual(['detach generic', 'create native', 'create generic']);
    expect(running(), 'eth1 runs what it ran').toEqual({ mode: 'generic', progId: 41 });
    expect(linkPins()).toEqual(['link_generic_eth1']);
    expect(fake.fds.size, 'every descriptor the call opened is closed').toBe(1);
  });

  it('puts the program being attached back when the program pin is not the one the link ran', () => {
    earlier(false);
    expect(() => pins.attach('eth1', 'native', newProg)).toThrow(/eth1 is back in generic mode, running the program being attached/);
    expect(running()).toEqual({ mode: 'generic', progId: 42 });
    expect(linkPins()).toEqual(['link_generic_eth1']);
  });

  it('says loudly that the interface runs no XDP program when putting the old link back fails too', () => {
    earlier(true);
    fake.refuse.add('generic');
    expect(() => pins.attach('eth1', 'native', newProg)).toThrow(
      /no native XDP support.*Putting back the generic link it had failed too \(.*generic.*EOPNOTSUPP.*\): eth1 NOW RUNS NO XDP PROGRAM/,
    );
    expect(running()).toBeUndefined();
    expect(linkPins()).toEqual([]);
  });

  it('a mode the interface takes: the old link detached, the new one made and pinned', () => {
    earlier(true);
    fake.refuse.clear();
    expect(pins.attach('eth1', 'native', newProg)).toBe('attached');
    expect(fake.calls).toEqual(['detach generic', 'create native']);
    expect(running()).toEqual({ mode: 'native', progId: 42 });
    expect(linkPins()).toEqual(['link_native_eth1']);
  });
});
