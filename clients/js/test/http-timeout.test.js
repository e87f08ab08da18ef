// An HTTP call to a server that takes the connection and never answers (a
// stuck or overloaded process: here a real one, stopped with SIGSTOP) fails
// after `timeoutMs` (config; default 10 s, the Python client's
// DEFAULT_TIMEOUT_S) with a SyncdError `timeout`, status 0, rather than wait
// for ever (a browser's fetch has no timeout of its own; Node's waits 5 min).
// The wait is for silence: it starts again at every chunk of the answer.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { HTTP_TIMEOUT_MS, SyncdClient } from '../src/index.js';
import { serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

test('a server that never answers: timeout after timeoutMs', { skip }, async () => {
  assert.equal(HTTP_TIMEOUT_MS, 10_000);
  const token = await server.token({ clientId: 52 });
  const client = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1', timeoutMs: 500 });
  await client.increment('gc:stuck');
  const timers = trackClientTimers();
  process.kill(server.proc.pid, 'SIGSTOP');
  try {
    const started = Date.now();
    await assert.rejects(client.read('gc:stuck'), (err) => err.code === 'timeout' && err.status === 0);
    await assert.rejects(client.increment('gc:stuck'), (err) => err.code === 'timeout');
    assert.ok(Date.now() - started < 5000, `${Date.now() - started} ms`);
  } finally {
    process.kill(server.proc.pid, 'SIGCONT');
    timers.restore();
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
  assert.equal((await client.read('gc:stuck')).type, 'gcounter');
  client.close();
});
