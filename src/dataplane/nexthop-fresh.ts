/**
 * Next-hop maps made new with their program's object (they are never taken
 * from pins): the kernel made them all zero, so the first next-hop cache on
 * them need not write every rule's entry to zero first (131,072 entries:
 * about 40 ms of the turn right after the API starts answering). A cache
 * made again on the same maps (the resolver stopped and started:
 * forwarding set to fib again) finds the pointers the one before wrote,
 * and clears them.
 */
const made = new WeakSet<object>();

/** `fds` are maps just created with their object, never written. */
export function markNewNextHopMaps(fds: object): void {
  made.add(fds);
}

/** True once for maps marked new: the caller is the first to write them. */
export function takeNewNextHopMaps(fds: object): boolean {
  return made.delete(fds);
}
