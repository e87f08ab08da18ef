// An element id has one spelling (docs/data-model.md#rga: "<counter>@<client_id>"):
// parseId takes exactly the strings the server takes (syncd/crdt/rga/ids.py),
// so "1@-0" is not client 0's "1@0" here either, as "07@1" is not "7@1".

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parseId, SyncdClient } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

// Every spelling but the first two names client 0's first element some other way.
const SPELLINGS = ['1@0', '2@0', '1@-0', '1@-00', '1@00', '01@0', '0@0', ' 1@0', '1@0\n', '1@+0', '1@0.0'];
const ONE_SPELLING = new Set(['1@0', '2@0']);

describe('parseId', () => {
  test('takes one spelling per id', () => {
    assert.deepEqual(parseId('1@0'), [0, 1]);
    assert.deepEqual(parseId('12@-3'), [-3, 12]);
    // Up to the server's 48 characters (MAX_ID_CHARS in syncd/crdt/rga/ids.py), not past them.
    assert.deepEqual(parseId(`1@-${'1'.repeat(45)}`)[1], 1);
    assert.throws(() => parseId(`1@-${'1'.repeat(46)}`), TypeError);
    for (const spelling of SPELLINGS.filter((s) => !ONE_SPELLING.has(s))) {
      assert.throws(() => parseId(spelling), TypeError, JSON.stringify(spelling));
    }
  });
});

describe('parseId against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 0 }), namespace: 'ns1' });
  });
  after(async () => {
    client?.close();
    await server?.close();
  });

  test('an id parses here exactly when the server takes it', async () => {
    const id = 'rg:spelling';
    const made = await client.apply(id, { op: 'insert', index: 0, text: 'ab' });
    assert.deepEqual(made.ids, ['1@0', '2@0']);
    for (const spelling of SPELLINGS) {
      let parsed = true;
      try {
        parseId(spelling);
      } catch {
        parsed = false;
      }
      const r = await fetch(`${server.url}/v1/namespaces/ns1/crdts/${id}/ops`, {
        method: 'POST',
        headers: { authorization: `Bearer ${client.config.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ op: 'insert', after: spelling, text: 'x' }),
      });
      const answer = await r.text();
      assert.equal(r.status === 200, parsed, `${JSON.stringify(spelling)}: ${r.status} ${answer}`);
      if (!parsed) assert.equal(JSON.parse(answer).error, 'invalid_op', answer);
    }
  });
});
