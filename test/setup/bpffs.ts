/**
 * vitest global setup: iproute2 mounts a bpf filesystem on /sys/fs/bpf when
 * it loads an object (`ip link set DEV xdpdrv obj FILE`, the namespace
 * tests' XDP_PASS peers). If none was mounted before the run, the mount it
 * made is taken down again at the end, when nothing is pinned in it: the
 * tests leave the machine as they found it. The daemon tests pin in their
 * own temporary bpf filesystems.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, statfsSync } from 'node:fs';

const BPFFS = '/sys/fs/bpf';
const BPF_FS_MAGIC = 0xcafe4a11;

function mounted(): boolean {
  try {
    return statfsSync(BPFFS).type === BPF_FS_MAGIC;
  } catch {
    return false;
  }
}

export default function setup(): () => void {
  const before = mounted();
  return () => {
    if (before || !mounted()) return;
    // The kernel's own entries (maps.debug, progs.debug) only: nothing of anyone's is pinned.
    const pinned = readdirSync(BPFFS).filter((f) => !f.endsWith('.debug'));
    if (pinned.length > 0) return;
    try {
      execFileSync('umount', [BPFFS]);
    } catch {
      // busy or gone: leave it
    }
  };
}
