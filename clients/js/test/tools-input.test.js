// Agent tools given input fields they do not take (a model's misspelling,
// or hostile input) refuse the call, as the read tool and the Python tools
// do, instead of dropping the field and running the call without it: an
// increment by 1 for `amout: 5`, a revert of everything for `sinse_seq`.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

describe('agent tools refuse input fields they do not take', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  let tools;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 3 }), namespace: 'ns1' });
    tools = client.agentTools([
      ['pn:score', 'pncounter'],
      ['lw:title', 'lwwregister'],
      ['or:tags', 'orset'],
      ['yd:notes', 'ydoc'],
    ]);
    await client.increment('pn:score', 10);
    await client.increment('pn:score', 20);
    await client.set('lw:title', 'kept');
    await client.add('or:tags', 'kept');
  });
  after(async () => {
    client?.close();
    await server?.close();
  });

  const CALLS = [
    ['service_increment_pn_score', { amout: 5 }, 'amout'],
    ['service_revert_pn_score', { client_id: 3, sinse_seq: 2 }, 'sinse_seq'],
    ['service_restore_pn_score', { seq: 1, at: 2 }, 'at'],
    ['service_history_pn_score', { limt: 5 }, 'limt'],
    ['service_history_pn_score', { at: 1, root: 'body' }, 'root'],
    ['service_set_lw_title', { value: 'new', clientid: 3 }, 'clientid'],
    ['service_add_or_tags', { element: 'new', elements: ['x'] }, 'elements'],
    ['service_history_yd_notes', { limit: 1, since: 2 }, 'since'],
  ];

  for (const [name, input, field] of CALLS) {
    test(`${name} ${JSON.stringify(input)} is refused, naming ${field}, and changes nothing`, async () => {
      const before = await Promise.all(['pn:score', 'lw:title', 'or:tags'].map((id) => client.read(id)));
      await assert.rejects(tools.execute(name, input), (err) => err.code === 'invalid_op' && err.message.includes(field));
      const after = await Promise.all(['pn:score', 'lw:title', 'or:tags'].map((id) => client.read(id)));
      assert.deepEqual(after, before);
    });
  }

  test('the fields a tool takes still work', async () => {
    assert.equal((await tools.execute('service_increment_pn_score', { amount: 5 })).ok, true);
    assert.equal((await tools.execute('service_history_pn_score', { limit: 1, client_id: 3 })).ops.length, 1);
    assert.equal((await tools.execute('service_revert_pn_score', { client_id: 3, since_seq: 3 })).matched, 1);
    assert.equal((await client.read('pn:score')).value, 30);
  });
});
