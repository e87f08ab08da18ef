// Agent tools given an optional field as null (as models do: OpenAI's strict
// mode sends every field, null for those not wanted) take it as not given,
// as the Python tools do: null was sent on to the server (an increment of
// `amount: null`, a revert of `since_seq: null`) and refused there, or
// refused here as a field that does not go with the others.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

describe('agent tools take null optional fields as not given', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  let tools;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 3 }), namespace: 'ns1' });
    tools = client.agentTools([
      ['pn:score', 'pncounter'],
      ['lw:title', 'lwwregister'],
    ]);
  });
  after(async () => {
    client?.close();
    await server?.close();
  });

  test('increment, set, read, history and revert with nulls', async () => {
    const inc = await tools.execute('service_increment_pn_score', { amount: null });
    assert.equal(inc.ok, true);
    const set = await tools.execute('service_set_lw_title', { value: 'new', client_id: null });
    assert.equal(set.ok, true);
    const read = await tools.execute('service_read_pn_score', { offset: null });
    assert.equal(read.value, 1);
    const listing = await tools.execute('service_history_pn_score', {
      at: null, before: null, limit: null, client_id: null, origin: null, offset: null,
    });
    assert.deepEqual(listing.ops.map((change) => change.seq), [1]);
    const at = await tools.execute('service_history_pn_score', {
      at: 1, before: null, limit: null, client_id: null, origin: null, offset: null,
    });
    assert.equal(at.value, 1);
    const reverted = await tools.execute('service_revert_pn_score', {
      client_id: 3, origin: null, since_seq: null, until_seq: null,
    });
    assert.equal(reverted.ok, true);
    assert.equal(reverted.matched, 1);
    assert.equal((await tools.execute('service_read_pn_score', {})).value, 0);
    await assert.rejects(
      tools.execute('service_revert_pn_score', { client_id: null, origin: null }),
      (err) => err.code === 'invalid_op' && /client_id/.test(err.message),
    );
  });
});
