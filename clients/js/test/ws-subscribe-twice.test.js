// subscribe() of an id the socket already follows threw a plain Error, the
// only failure of the client without a `code` to branch on. It throws a
// SyncdError `already_subscribed` (status 0: the client refuses it, the
// server would have started the id afresh), and the subscription it has
// goes on as before; after unsubscribe() the id can be followed again.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, SyncdError } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

test('a second subscribe of an id throws a SyncdError already_subscribed', { skip }, async () => {
  const token = await server.token({ clientId: 91 });
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  try {
    const id = 'gc:subscribe-twice';
    const sub = c.subscribe(id);
    assert.throws(
      () => c.subscribe(id),
      (err) =>
        err instanceof SyncdError &&
        err.code === 'already_subscribed' &&
        err.status === 0 &&
        err.message === `already subscribed to ${id}: unsubscribe() it first, or use the subscription you have`,
    );
    // The refusal changed nothing: the first subscription syncs and follows ops.
    await eventually(() => sub.synced, 5000, 'synced');
    await c.send(id, { op: 'increment', amount: 3 });
    await eventually(() => sub.value() === 3, 5000, 'the op seen');
    assert.equal(sub.closed, false);

    sub.unsubscribe();
    const again = c.subscribe(id);
    await eventually(() => again.synced && again.value() === 3, 5000, 'followed again');
  } finally {
    c.close();
  }
});
