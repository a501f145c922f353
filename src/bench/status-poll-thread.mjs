/** status-poll.mjs on a worker thread of its own: 'ready' once polling, the result on any message (stop). */
import { parentPort, workerData } from 'node:worker_threads';
import { startStatusPoller } from './status-poll.mjs';

const poller = startStatusPoller(workerData);
parentPort.once('message', () => {
  poller.stop().then((r) => parentPort.postMessage(r));
});
parentPort.postMessage('ready');
