/**
 * The running config's thread (runningConfigOffLoop, src/config/running-async.ts):
 * builds the YAML (splicedRunningYaml, else runningConfigYaml), and
 * posts its bytes (over a SharedArrayBuffer) or the error's message.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { expandSections, heldText, unwireSections, type FromRunning, type RunningJob } from './running-async.js';
import { runningConfigYaml } from './running.js';
import { splicedRunningYaml } from './running-splice.js';

const port = parentPort;
if (port !== null) {
  const job = workerData as RunningJob;
  try {
    const file = heldText(job.held);
    // Spliced from the file's text where the entries' places are known; else the `yaml` package's document.
    const sections = unwireSections(job.sections);
    const yaml = splicedRunningYaml(file, job.spans, sections, { origins: job.origins }) ?? runningConfigYaml(file, expandSections(sections), { origins: job.origins });
    const text = job.asJsonString ? JSON.stringify(yaml) : yaml;
    // Over a SharedArrayBuffer: shared with the main thread, and by it with the parser's thread of a save
    // (copied into the parser's thread as workerData, the 11.6 MB of bench:daemon's file took a 100 ms turn).
    const bytes = new Uint8Array(new SharedArrayBuffer(Buffer.byteLength(text)));
    Buffer.from(bytes.buffer).write(text);
    port.postMessage({ ok: true, bytes } satisfies FromRunning);
  } catch (e) {
    port.postMessage({ ok: false, message: (e as Error).message } satisfies FromRunning);
  }
}
