// An element id has one spelling (docs/data-model.md#rga: "<counter>@<client_id>"):
// parseId takes exactly the strings the server takes (syncd/crdt/rga/ids.py),
// so "1@-0" is not client 0's "1@0" here either, as "07@1" is not "7@1".

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { formatId, parseId, SyncdClient } from '../src/index.js';
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

describe('parseId past 2^53', () => {
  // The server reads an id's decimals as Python ints, of any size within its
  // 48 characters: two ids there are two ids here, never rounded to one.
  test('is exact: a BigInt past Number.MAX_SAFE_INTEGER, a number below', () => {
    assert.deepEqual(parseId('9007199254740991@1'), [1, 9007199254740991]);
    assert.deepEqual(parseId('9007199254740992@1'), [1, 9007199254740992n]);
    assert.deepEqual(parseId('9007199254740993@1'), [1, 9007199254740993n]);
    assert.deepEqual(parseId('1@-9223372036854775809'), [-9223372036854775809n, 1]);
    assert.deepEqual(parseId('1@-9007199254740991'), [-9007199254740991, 1]);
    assert.deepEqual(parseId('1@-1234567890123456'), [-1234567890123456, 1]);
    assert.notDeepEqual(parseId('9007199254740993@1'), parseId('9007199254740992@1'));
  });

  test('formatId of what parseId gives is the same id', () => {
    const big = `${'9'.repeat(23)}@-${'8'.repeat(23)}`;
    assert.equal(big.length, 48);
    for (const id of ['1@0', '7@42', '12@-3', '9007199254740991@9007199254740991', '9007199254740993@1', '1@18446744073709551617', big]) {
      assert.equal(formatId(...parseId(id)), id);
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
