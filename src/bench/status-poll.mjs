/**
 * bench:daemon's status poller: GET /v1/status on one kept-alive connection
 * over a unix socket, on a fixed schedule of one request every `periodMs`
 * (as wrk2 does), in plain JavaScript so that a worker thread can run it
 * without a TypeScript loader (status-poll-thread.mjs) and the main thread
 * can import it (status-poll.d.mts gives its types).
 *
 * Latency is counted from the time a request was due, not from when it
 * went out: the connection carries one request at a time, so requests due
 * while an answer is late wait and go out back to back when it comes, and
 * each of them counts the wait. A closed loop (send, wait, pause, send)
 * puts one slow sample in for a stall of any length. A request sent
 * before its time (a timer that fired early) counts from its send.
 *
 * An answer other than 200, one cut off, a timeout or any other failure is
 * an error (a reset counted apart: ECONNRESET), and has no latency sample.
 * On stop(), every request due before it is still sent and timed.
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
    for (let k = 0; ; k++) {
      const due = t0 + k * periodMs;
      if (due > stopAt) break;
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
          ms.push(at - Math.min(due, sent));
          sendMs.push(at - sent);
          o.onBody?.(r.body, Date.now());
        }
      } catch (e) {
        prev = performance.now();
        if (e.code === 'ECONNRESET') resets++;
        else errors.push(e.message);
      }
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
