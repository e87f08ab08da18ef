// A WebSocket subscription whose read the server ends or refuses
// (docs/permissions.md#when-access-ends: the rule that granted it expired,
// `forbidden`) gets no delta after it, and the server has dropped it: the
// subscription ends (`closed`, not `synced`, `close` with the error), as an
// SSE stream does on its `end` event, instead of staying `synced` for ever
// and being sent again at every reconnect. The other subscriptions and the
// socket go on; the id can be subscribed again.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const FAST = { minReconnectMs: 20, maxReconnectMs: 100 };
const RULE_MS = 1500;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

/** A token reading `gc:ends-*` until `until` (ms), `gc:stays` for good. */
async function ruleToken(clientId, until) {
  const r = await fetch(`${server.url}/v1/namespaces/ns1/tokens`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      client_id: clientId,
      rules: { r: [{ p: 'gc:ends-*', e: until }, { p: 'gc:stays' }], w: [{ p: '*' }] },
    }),
  });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  return JSON.parse(text).token;
}

test('a subscription whose rule expires ends with forbidden; the rest go on', { skip }, async () => {
  const token = await ruleToken(71, Date.now() + RULE_MS);
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }, { socket: FAST });
  try {
    const ends = c.subscribe('gc:ends-1');
    const stays = c.subscribe('gc:stays');
    const closes = [];
    const errors = [];
    ends.on('close', (why) => closes.push(why));
    ends.on('error', (err) => errors.push(err));
    await eventually(() => ends.synced && stays.synced, 5000, 'both synced');
    await eventually(() => closes.length > 0, RULE_MS + 5000, 'the subscription ended');
    assert.equal(closes.length, 1);
    assert.equal(closes[0].code, 'forbidden');
    assert.equal(closes[0].status, 403);
    assert.equal(errors[0]?.code, 'forbidden', 'still reported as an error');
    assert.equal(ends.closed, true);
    assert.equal(ends.synced, false);
    // The socket and the other subscription go on.
    assert.equal(c.socket.state, 'open');
    await c.send('gc:stays', { op: 'increment' });
    await eventually(() => stays.value() === 1, 5000, 'the other subscription still follows');
    // The id is free again: a new subscription is refused and ends the same way.
    const again = c.subscribe('gc:ends-1');
    const againCloses = [];
    again.on('close', (why) => againCloses.push(why));
    await eventually(() => againCloses.length > 0, 5000, 'the new subscription ended');
    assert.equal(againCloses[0].code, 'forbidden');
  } finally {
    c.close();
  }
});
