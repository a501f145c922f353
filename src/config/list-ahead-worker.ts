/**
 * The thread of src/config/list-ahead.ts: given a large JSON config's
 * bytes (shared, not copied), it finds its `"sessions": [` and reads that
 * list as parseConfig would (readListAhead), while the daemon's main
 * thread reads the rest of the file. The answer goes on the port it was
 * given; the shared state says where it is (see list-ahead.ts).
 */
import { workerData, type MessagePort } from 'node:worker_threads';
import { readListAhead } from './load.js';
import { AT, BEAT, CANCELLED, COUNT, INDEXED, NO_INDEX, LOCATING, locateList, NONE, ANSWERED, READING, STATE } from './list-ahead-state.js';

const { state, port } = workerData as { state: Int32Array; port: MessagePort };

/** Tests: the thread stops dead once it reads (as a thread that crashed there would look from the main thread). */
const HANG_WHEN_READING = process.env['MUP_TEST_LIST_AHEAD_HANG'] === '1';

function end(how: number): void {
  Atomics.store(state, STATE, how);
  Atomics.notify(state, STATE);
}

port.once('message', (m: { bytes: Uint8Array }) => {
  try {
    const at = locateList(m.bytes, 'sessions');
    if (at < 0) {
      Atomics.compareExchange(state, STATE, LOCATING, NONE);
      Atomics.notify(state, STATE);
      return;
    }
    Atomics.store(state, AT, at);
    // The main thread may have reached the list first: then it reads it, and this thread stops here.
    if (Atomics.compareExchange(state, STATE, LOCATING, READING) !== LOCATING) return;
    if (HANG_WHEN_READING) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
    let got;
    try {
      got = readListAhead(m.bytes, at, (n) => {
        Atomics.store(state, COUNT, n);
        Atomics.add(state, BEAT, 1);
        // Wakes the main thread if it waits: it makes the rules of the rows read so far meanwhile.
        Atomics.notify(state, STATE);
      });
    } catch {
      got = undefined;
    }
    if (got === undefined) return end(NONE);
    const { read, index } = got;
    // The rows' columns are copied, not transferred: the index is made from them after (22 MB at a million, about 10 ms).
    port.postMessage(read, [read.spans.buffer]);
    end(ANSWERED);
    // Then the index of their keys, while the main thread checks the policies.
    let filled;
    try {
      filled = index(() => Atomics.add(state, BEAT, 1));
    } catch {
      filled = undefined;
    }
    if (filled === undefined) return end(NO_INDEX);
    port.postMessage(filled, filled.table.buffer instanceof ArrayBuffer ? [filled.table.buffer] : []);
    end(INDEXED);
  } catch {
    // Never a wait for ever on the main thread: whatever failed, it reads the list (or makes the index) itself.
    const st = Atomics.load(state, STATE);
    if (st === ANSWERED) end(NO_INDEX);
    else if (st !== CANCELLED && st !== INDEXED) end(NONE);
  }
});
