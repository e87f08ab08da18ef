// HTTP refusals and failures as SyncdError (docs/http-api.md#status-codes):
// every status the real server answers keeps its code and status, and a
// service that cannot be reached is a SyncdError too, not fetch's TypeError.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { HttpApi, SyncdClient, SyncdError, TokenRevokedError } from '../src/index.js';
import { retryAfterSeconds } from '../src/http.js';
import { ADMIN, fakeToken, serverMissing, startServer } from './helpers.js';

test('Retry-After: seconds, an HTTP date, or nothing usable', () => {
  assert.equal(retryAfterSeconds('3'), 3);
  assert.equal(retryAfterSeconds('0.5'), 0.5);
  const now = Date.parse('2030-01-01T00:00:00Z');
  assert.equal(retryAfterSeconds('Tue, 01 Jan 2030 00:00:10 GMT', now), 10);
  assert.equal(retryAfterSeconds('Tue, 01 Jan 2030 00:00:00 GMT', now + 5000), 0);
  assert.equal(retryAfterSeconds('soon'), undefined);
  assert.equal(retryAfterSeconds(null), undefined);
  assert.equal(retryAfterSeconds(''), undefined);
});

test('a service that cannot be reached is SyncdError unavailable, status 0', async () => {
  const token = fakeToken({ namespace: 'ns1', client_id: 1, expires_at: Date.now() + 60000, permissions: {} });
  const http = new HttpApi({ baseUrl: 'http://127.0.0.1:9', token, namespace: 'ns1' });
  const refused = await http.request('GET', '/health/live').catch((err) => err);
  assert.ok(refused instanceof SyncdError, String(refused));
  assert.equal(refused.code, 'unavailable');
  assert.equal(refused.status, 0);
  assert.ok(refused.cause instanceof Error);
});

describe('every refusal of a real server keeps its code and status', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer({ SERVICE_MAX_BODY_BYTES: '4096' });
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 5, read: ['*'], write: ['gc:*', 'or:*', 'tr:*'] }), namespace: 'ns1' });
  });
  after(() => server?.close());

  const refusal = (promise) => promise.then(() => assert.fail('not refused'), (err) => err);

  test('400, 401, 403, 404, 405, 409 and 413', async () => {
    const cases = [
      [() => client.apply('gc:a', { op: 'increment', amount: -1 }), 400, 'invalid_op'],
      [() => client.apply('lw:a', { op: 'set', value: 1 }), 403, 'forbidden'],
      [() => client.deleteCrdt('gc:none'), 403, 'forbidden'],
      [() => client.http.request('GET', '/v1/nope'), 404, 'not_found'],
      [() => client.http.request('PUT', '/v1/namespaces/ns1/crdts/gc:a'), 405, 'method_not_allowed'],
      [() => client.apply('gc:a', { op: 'add', type: 'orset', element: 1 }), 409, 'type_mismatch'],
      [() => client.apply('or:a', { op: 'add', element: 'x'.repeat(5000) }), 413, 'payload_too_large'],
    ];
    for (const [call, status, code] of cases) {
      const err = await refusal(call());
      assert.ok(err instanceof SyncdError, String(err));
      assert.deepEqual([err.status, err.code], [status, code], `${err.status} ${err.code}: ${err.message}`);
      assert.ok(err.message.length > 0);
    }
    await client.apply('tr:t', [{ op: 'add', id: 'a', parent: 'root' }, { op: 'add', id: 'b', parent: 'a' }]);
    const cycle = await refusal(client.apply('tr:t', { op: 'move', id: 'a', parent: 'b' }));
    assert.deepEqual([cycle.status, cycle.code], [409, 'cycle']);
    await client.increment('gc:a', 1);
    const unrestorable = await refusal(client.restore('gc:a', 0));
    assert.deepEqual([unrestorable.status, unrestorable.code], [409, 'not_restorable']);
    const bad = new SyncdClient({ baseUrl: server.url, token: `${(await server.token()).slice(0, -4)}AAAA`, namespace: 'ns1' });
    const invalid = await refusal(bad.read('gc:a'));
    assert.deepEqual([invalid.status, invalid.code], [401, 'invalid_token']);
    const r = await fetch(`${server.url}/v1/namespaces/ns1/revocations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ client_id: 5 }),
    });
    assert.equal(r.status, 200);
    const revoked = await refusal(client.read('gc:a'));
    assert.ok(revoked instanceof TokenRevokedError);
    assert.equal(revoked.status, 401);
  });
});
