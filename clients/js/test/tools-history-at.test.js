// The history tool's `at` reads one value; `before`, `limit`, `client_id`
// and `origin` choose changes to list. Given both, the call is refused (as
// the Python tools refuse it) instead of answering the value at `at` and
// dropping the writer or page the model asked about.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

describe("the history tool's at with listing fields", { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  let tools;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 3 }), namespace: 'ns1' });
    tools = client.agentTools([['lw:title', 'lwwregister']]);
    await client.set('lw:title', 'one');
    await client.set('lw:title', 'two');
  });
  after(async () => {
    client?.close();
    await server?.close();
  });

  for (const extra of [{ client_id: 9 }, { origin: 'agent:x' }, { before: 2 }, { limit: 1 }]) {
    test(`at with ${JSON.stringify(extra)} is refused, naming it`, async () => {
      const [field] = Object.keys(extra);
      await assert.rejects(
        tools.execute('service_history_lw_title', { at: 1, ...extra }),
        (err) => err.code === 'invalid_op' && err.message.includes(field),
      );
    });
  }

  test('at alone, or with null listing fields, reads the value', async () => {
    assert.equal((await tools.execute('service_history_lw_title', { at: 1 })).value, 'one');
    assert.equal((await tools.execute('service_history_lw_title', { at: 2, client_id: null })).value, 'two');
  });
});
