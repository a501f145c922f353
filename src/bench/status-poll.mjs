/**
 * bench:daemon's status poller: GET /v1/status on one kept-alive connection
 * over a unix socket, one request every `periodMs` when answers come in
 * time, in plain JavaScript so that a worker thread can run it without a
 * TypeScript loader (status-poll-thread.mjs) and the main thread can
 * import it (status-poll.d.mts gives its types).
 *
 * Latency is counted from a request's send, and an answer slower than the
 * period also counts, for each period it took, a request that would have
 * been due meanwhile and answered with it: L - p, L - 2p, ... down to p
 * (HdrHistogram's expected-interval correction). So a stall counts for
 * every request due during it, where a closed loop (send, wait, pause,
 * send) put in one slow sample for a stall of any length. After a late
 * answer the next request goes at once, and the schedule starts again from
 * it: the missed requests are not sent back to back. On one connection
 * their wait would be this client's backlog, not the daemon's delay: an
 * answer taking 3 ms against a 2 ms schedule grew it without end (230 ms
 * p99 in a 283 ms batch, session 43), though no request waited for the
 * daemon more than a few ms.
 *
 * An answer other than 200, one cut off, a timeout or any other failure is
 * an error (a reset counted apart: ECONNRESET), and has no latency sample.
 * On stop(), a request in flight is still timed (its correction counts the
 * requests due during its wait).
 */
import { Agent, request } from 'node:http';

/** One GET: its status and body; rejects on a failure or an answer cut off. */
function get(agent, socket, path, timeoutMs) {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath: socket, agent, method: 'GET', path, timeout: timeoutMs }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
      res.on('close', () => {
        if (!res.complete) reject(new Error(`GET ${path}: answer cut off`));
      });
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`GET ${path}: no answer within ${timeoutMs / 1000} s`)));
    req.end();
  });
}

export function startStatusPoller(o) {
  const periodMs = o.periodMs ?? 2;
  const path = o.path ?? '/v1/status';
  const timeoutMs = o.timeoutMs ?? 60_000;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const ms = [];
  const sendMs = [];
  const errors = [];
  let resets = 0;
  let clientLateMs = 0;
  let stopAt = Infinity;
  let wake = () => {};
  const t0 = performance.now();
  const loop = (async () => {
    let prev = t0;
    for (let due = t0; due <= stopAt; ) {
      const wait = due - performance.now();
      if (wait > 0) {
        await new Promise((r) => {
          const t = setTimeout(r, wait);
          wake = () => {
            clearTimeout(t);
            r();
          };
        });
        if (due > stopAt) break;
      }
      const sent = performance.now();
      // What this client added: its timer's lateness, or its own thread held, after the previous answer.
      clientLateMs = Math.max(clientLateMs, sent - Math.max(due, prev));
      try {
        const r = await get(agent, o.socket, path, timeoutMs);
        const at = performance.now();
        prev = at;
        if (r.status !== 200) errors.push(`HTTP ${r.status}: ${r.body.slice(0, 100)}`);
        else {
          const l = at - sent;
          ms.push(l);
          sendMs.push(l);
          // The requests that would have been due while this one was out, each answered with it.
          for (let m = l - periodMs; m >= periodMs; m -= periodMs) ms.push(m);
          o.onBody?.(r.body, Date.now());
        }
      } catch (e) {
        prev = performance.now();
        if (e.code === 'ECONNRESET') resets++;
        else errors.push(e.message);
      }
      // The next one period after this one was due; after a late answer, at once (no catching up).
      due = Math.max(due + periodMs, prev);
    }
  })();
  return {
    stop: async () => {
      stopAt = performance.now();
      wake();
      await loop;
      agent.destroy();
      return { ms, sendMs, resets, errors, periodMs, clientLateMs };
    },
  };
}
