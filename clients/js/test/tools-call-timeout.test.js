// Agent tool calls are bounded by `callTimeoutMs` (as the Python tools' call_timeout_s):
// a call the service keeps waiting (here a real server stopped with SIGSTOP)
// throws a SyncdError `timeout` at the limit, saying whether the CRDT may
// have changed and when to try again (`retryAfter`); it held a model's turn
// for the client's whole `timeoutMs` of silence per request, and for ever
// with an answer trickling in.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { DEFAULT_CALL_TIMEOUT_MS, SyncdClient, createAgentTools, executeTool } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const LIMIT_MS = 500;
const SLACK_MS = 1000; // scheduling on a loaded machine
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

async function timed(promise) {
  const started = Date.now();
  try {
    await promise;
  } catch (err) {
    return { err, took: Date.now() - started };
  }
  assert.fail('the call did not fail');
}

test('a stalled call throws a timeout at the limit', { skip }, async () => {
  const token = await server.token({ clientId: 61 });
  const client = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }); // timeoutMs: 10 s
  const crdts = [['gc:slow', 'gcounter']];
  const tools = client.agentTools(crdts, { callTimeoutMs: LIMIT_MS });
  assert.equal(tools.callTimeoutMs, LIMIT_MS);
  await tools.execute('service_increment_gc_slow', {});
  process.kill(server.proc.pid, 'SIGSTOP');
  try {
    const read = await timed(tools.execute('service_read_gc_slow', {}));
    assert.ok(read.took >= LIMIT_MS - 5 && read.took < LIMIT_MS + SLACK_MS, `${read.took} ms`);
    assert.equal(read.err.code, 'timeout');
    assert.equal(read.err.status, 0);
    assert.ok(read.err.retryAfter > 0);
    assert.match(read.err.message, /0\.5 s .*nothing was changed/);
    const write = await timed(tools.execute('service_increment_gc_slow', { amount: 2 }));
    assert.ok(write.took < LIMIT_MS + SLACK_MS, `${write.took} ms`);
    assert.equal(write.err.code, 'timeout');
    assert.match(write.err.message, /may have been applied/);
    const history = await timed(executeTool(client.http, crdts, 'service_history_gc_slow', {}, { callTimeoutMs: LIMIT_MS }));
    assert.ok(history.took < LIMIT_MS + SLACK_MS, `${history.took} ms`);
    assert.equal(history.err.code, 'timeout');
  } finally {
    process.kill(server.proc.pid, 'SIGCONT');
  }
  // The tools work again once the service answers.
  assert.ok([1, 3].includes((await tools.execute('service_read_gc_slow', {})).value));
  client.close();
});

test('the limit is checked', () => {
  assert.equal(DEFAULT_CALL_TIMEOUT_MS, 30_000);
  for (const bad of [0, -1, Number.NaN, Infinity, '5', true, null]) {
    assert.throws(() => createAgentTools({}, [['gc:x', 'gcounter']]/* http unused */, { callTimeoutMs: bad }), /callTimeoutMs/);
  }
});
