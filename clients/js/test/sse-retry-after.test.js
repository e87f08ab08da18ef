// A stream reconnect refused 429 `rate_limited` (fetch transport) waits the
// answer's `Retry-After` (at most RETRY_AFTER_MAX_MS) instead of knocking again
// at its backoff while the token's window is still full. A real server, a
// token limited to one request a second (`rl`, docs/permissions.md), and a
// fetch that notes every /events answer.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { HttpApi } from '../src/http.js';
import { EventStream, RETRY_AFTER_MAX_MS } from '../src/sse.js';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

describe('SSE (fetch) honours Retry-After', { skip: serverMissing() ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server?.close();
  });

  test('the reconnect after a 429 comes no sooner than Retry-After', async () => {
    const r = await fetch(`${server.url}/v1/namespaces/ns1/tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ client_id: 41, rules: { r: [{ p: '*' }], w: [{ p: '*' }], rl: 1 } }),
    });
    const body = await r.text();
    assert.equal(r.status, 200, body);
    const { token } = JSON.parse(body);
    const config = { baseUrl: server.url, namespace: 'ns1', token };
    await new HttpApi(config).apply('gc:rl', { op: 'increment', amount: 1 }); // the one request of this second

    const answers = [];
    const noting = async (url, init) => {
      const response = await fetch(url, init);
      answers.push({ at: performance.now(), status: response.status, retryAfter: response.headers.get('retry-after') });
      return response;
    };
    const stream = new EventStream({ ...config, fetch: noting }, 'gc:rl', { transport: 'fetch', minReconnectMs: 20, maxReconnectMs: 100 });
    const disconnects = [];
    stream.on('disconnect', (err) => disconnects.push(err));
    try {
      await eventually(() => stream.subscription.synced, 2 * RETRY_AFTER_MAX_MS, 'synced');
    } finally {
      stream.close();
    }
    assert.deepEqual(
      answers.map((a) => a.status),
      [429, 200],
    );
    const [refused, served] = answers;
    assert.ok(Number(refused.retryAfter) >= 1, `Retry-After: ${refused.retryAfter}`);
    assert.ok(served.at - refused.at >= Number(refused.retryAfter) * 1000 * 0.99, `${served.at - refused.at} ms`);
    assert.equal(disconnects[0].status, 429);
    assert.equal(disconnects[0].retryAfter, Number(refused.retryAfter));
    assert.equal(stream.subscription.value(), 1);
  });
});
