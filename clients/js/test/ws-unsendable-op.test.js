// An op the server cannot read (a string with an unpaired surrogate, which
// UTF-8 cannot carry) is answered by an error without `ref`: the server never
// learnt the ref. The op's promise then never settled and the op stayed
// pending for ever, sent again at every reconnect. Such an op, and one this
// socket's encoding cannot write at all (a BigInt in JSON), is refused here
// with a SyncdError `bad_request` (status 400, as HTTP answers it), unsent.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SyncdClient, SyncdError } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const within = (promise, ms, what) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms))]);

const badRequest = (err) => err instanceof SyncdError && err.code === 'bad_request' && err.status === 400;

describe('ops the server cannot read', { skip: serverMissing() ?? false }, () => {
  let server;
  let token;
  before(async () => {
    server = await startServer();
    token = await server.token({ clientId: 74 });
  });
  after(() => server?.close());

  for (const encoding of ['msgpack', 'json']) {
    test(`an unpaired surrogate is refused at once (${encoding})`, async () => {
      const c = new SyncdClient(
        { baseUrl: server.url, token, namespace: 'ns1' },
        { socket: { encoding, minReconnectMs: 20, maxReconnectMs: 200 } },
      );
      await within(assert.rejects(c.send('lw:sur', { op: 'set', value: 'a\ud800b' }), badRequest), 2000, 'value');
      await within(assert.rejects(c.send('lw:sur', { op: 'set', value: { ['k\udc00']: 1 } }), badRequest), 2000, 'key');
      await within(
        assert.rejects(c.send('pn:sur', [{ op: 'increment' }, { op: 'increment', origin: '\ud83d' }]), badRequest),
        2000,
        'batch',
      );
      assert.equal(c.socket.pendingOps, 0);
      // A pair is fine, and the socket goes on.
      await within(c.send('lw:sur', { op: 'set', value: 'a\ud83d\ude00b' }), 2000, 'a pair');
      assert.equal((await c.read('lw:sur')).value, 'a\ud83d\ude00b');
      assert.equal(await c.read('pn:sur'), null, 'nothing of the batch was applied');
      c.close();
    });
  }

  test('an op JSON cannot write (a BigInt) is refused and does not stop a reconnect', async () => {
    const c = new SyncdClient(
      { baseUrl: server.url, token, namespace: 'ns1' },
      { socket: { encoding: 'json', minReconnectMs: 20, maxReconnectMs: 200 } },
    );
    await c.send('gc:big', { op: 'increment' });
    await server.stop();
    await eventually(() => c.socket.state === 'connecting', 5000, 'disconnected');
    const refused = assert.rejects(c.send('gc:big', { op: 'increment', amount: 2n }), badRequest);
    const later = c.send('gc:big', { op: 'increment', amount: 3 });
    await server.start();
    await within(refused, 5000, 'the BigInt op');
    await within(later, 5000, 'the op after it');
    assert.equal((await c.read('gc:big')).value, 4);
    c.close();
  });
});
