// Canonical JSON (docs/data-model.md#orset) must be the same text here and on
// the server, numbers included: a number's text is ECMAScript's (RFC 8785), so
// a value another client wrote as 1.0 is the element this client knows as 1.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { canonicalJson, SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

// [number as a JSON body writes it, its canonical text]: the server's
// (tests/crdt/test_canonical_numbers.py) has the same table.
const NUMBERS = [
  ['1.0', '1'],
  ['-0.0', '0'],
  ['1e-7', '1e-7'],
  ['0.000001', '0.000001'],
  ['1e16', '10000000000000000'],
  ['1e21', '1e+21'],
  ['123456789012345680000', '123456789012345680000'],
  ['1.5e300', '1.5e+300'],
  ['5e-324', '5e-324'],
  ['0.1', '0.1'],
  ['9007199254740993.0', '9007199254740992'],
];

describe('canonicalJson', () => {
  test('numbers are written as ECMAScript writes them', () => {
    for (const [written, canonical] of NUMBERS) {
      assert.equal(canonicalJson(JSON.parse(written)), canonical, written);
      assert.equal(canonicalJson({ v: [JSON.parse(written)] }), `{"v":[${canonical}]}`, written);
    }
    assert.throws(() => canonicalJson(Number.NaN), TypeError);
  });
});

describe('canonical JSON against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 12 }), namespace: 'ns1' });
  });
  after(async () => {
    client?.close();
    await server?.close();
  });

  test('an element another client wrote as 1.0 is removed as 1, here and on the server', async () => {
    const id = 'or:floats';
    const sub = client.subscribe(id);
    await eventually(() => sub.synced, 5000, 'snapshot');
    // What a Python client (or any JSON text) sends: a float that JS reads as 1.
    const body = '[{"op":"add","element":1.0},{"op":"add","element":{"x":2.50,"y":1e-7}}]';
    const r = await fetch(`${server.url}/v1/namespaces/ns1/crdts/${id}/ops`, {
      method: 'POST',
      headers: { authorization: `Bearer ${client.config.token}`, 'content-type': 'application/json' },
      body,
    });
    assert.equal(r.status, 200, await r.text());
    await client.apply(id, { op: 'add', element: 1 });
    await client.apply(id, { op: 'remove', element: { y: 1e-7, x: 2.5 } });
    const last = await client.apply(id, { op: 'remove', element: 1 });
    const read = await client.read(id);
    assert.deepEqual(read.value, []);
    await eventually(() => sub.seq === last.seq, 5000, 'deltas');
    assert.deepEqual(sub.view(), { value: [] });
  });
});
