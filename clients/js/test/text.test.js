import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { codePointIndex, CollabText, diffText, SyncdClient, utf16Offset } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

describe('text helpers', () => {
  test('diffText finds the one edit', () => {
    assert.equal(diffText('abc', 'abc'), null);
    assert.deepEqual(diffText('abc', 'abXc'), { index: 2, deleteCount: 0, text: 'X' });
    assert.deepEqual(diffText('abc', 'ac'), { index: 1, deleteCount: 1, text: '' });
    assert.deepEqual(diffText('hello world', 'hello there'), { index: 6, deleteCount: 5, text: 'there' });
    // Typing "a" into "aa": the caret says where.
    assert.deepEqual(diffText('aa', 'aaa', 1), { index: 0, deleteCount: 0, text: 'a' });
    assert.deepEqual(diffText('aa', 'aaa', 3), { index: 2, deleteCount: 0, text: 'a' });
    // Code points, not UTF-16 units.
    assert.deepEqual(diffText('a😀b', 'a😀😀b', 3), { index: 2, deleteCount: 0, text: '😀' });
    assert.deepEqual(diffText('a😀b', 'a😀😀b'), { index: 1, deleteCount: 0, text: '😀' });
  });

  test('lone surrogates (which UTF-8 cannot carry) become U+FFFD', () => {
    const sent = [];
    const text = new CollabText({ send: (op) => (sent.push(op), new Promise(() => {})) });
    text.edit(0, 0, 'a\ud83d');
    assert.equal(text.value, 'a\ufffd');
    assert.equal(sent[0].text, 'a\ufffd');
  });

  test('code point and UTF-16 offsets', () => {
    const s = 'x😀y😀';
    assert.equal(codePointIndex(s, 3), 2);
    assert.equal(utf16Offset(s, 2), 3);
    for (let i = 0; i <= 4; i++) assert.equal(codePointIndex(s, utf16Offset(s, i)), i);
  });

  test('local edits show at once and go out one op at a time, by element id', async () => {
    const sent = [];
    const answers = [];
    const text = new CollabText({
      send: (op) => {
        sent.push(op);
        return new Promise((resolve) => answers.push(resolve));
      },
    });
    text.receive({ kind: 'snapshot', seq: 0, epoch: null, state: null }, 'snapshot');
    text.edit(0, 0, 'h');
    text.edit(1, 0, 'i');
    text.edit(2, 0, '!');
    assert.equal(text.value, 'hi!');
    assert.equal(sent.length, 1, 'one op in flight');
    assert.deepEqual(sent[0], { op: 'insert', type: 'rga', after: null, text: 'h', op_id: sent[0].op_id });
    // The server applies it (delta) and acks it.
    text.receive(
      { kind: 'op', seq: 1, epoch: 'e', op_id: sent[0].op_id, op: { op: 'insert', after: null, client: 4, counter: 1, text: 'h' } },
      'first',
    );
    answers[0]({ seq: 1, ids: ['1@4'] });
    await new Promise((r) => setTimeout(r, 0));
    // The queued keystrokes went as one op after the real id.
    assert.equal(sent.length, 2);
    assert.equal(sent[1].after, '1@4');
    assert.equal(sent[1].text, 'i!');
    assert.equal(text.value, 'hi!');
    // A remote insert at the start moves our caret along.
    const caret = text.refAt(2);
    text.receive(
      { kind: 'op', seq: 2, epoch: 'e', op: { op: 'insert', after: null, client: 9, counter: 2, text: '>' } },
      'apply',
    );
    assert.equal(text.value, '>hi!');
    assert.equal(text.indexOfRef(caret), 3);
  });
});

describe('two editors against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(() => server?.close());

  async function editor(clientId, id) {
    const token = await server.token({ clientId });
    const client = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
    const sub = client.subscribe(id, { replica: false });
    const text = new CollabText({ send: (op) => client.send(id, op), clientId });
    text.attach(sub);
    await eventually(() => sub.synced);
    return { client, text };
  }

  test('concurrent typing and deleting converge, intentions kept', async () => {
    const id = 'rg:pair';
    const a = await editor(1, id);
    const b = await editor(2, id);
    for (const ch of 'hello world') a.text.edit(a.text.length, 0, ch);
    await eventually(() => b.text.value === 'hello world' && a.text.pendingEdits === 0);
    // At the same time: b inserts after "hello", a deletes "world".
    b.text.edit(5, 0, ' big');
    a.text.edit(6, 5);
    a.text.edit(6, 0, 'there');
    await eventually(() => a.text.pendingEdits + b.text.pendingEdits === 0 && a.text.value === b.text.value);
    const read = await a.client.read(id);
    assert.equal(a.text.value, read.text);
    assert.equal(read.text, 'hello big there');
    a.client.close();
    b.client.close();
  });

  test('random concurrent edits converge to the server text', async () => {
    const id = 'rg:fuzz';
    const eds = [await editor(3, id), await editor(4, id), await editor(5, id)];
    let seed = 12345;
    const rand = (n) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const rounds = Number(process.env.SYNCD_FUZZ_ROUNDS ?? 150);
    for (let i = 0; i < rounds; i++) {
      const e = eds[rand(eds.length)];
      const len = e.text.length;
      if (len > 0 && rand(3) === 0) {
        const at = rand(len);
        e.text.edit(at, 1 + rand(Math.min(3, len - at)));
      } else {
        e.text.edit(rand(len + 1), 0, Array.from('abcdé😀')[rand(6)].repeat(1 + rand(2)));
      }
      if (rand(4) === 0) await new Promise((r) => setTimeout(r, rand(3)));
    }
    await eventually(() => eds.every((e) => e.text.pendingEdits === 0), 10000, 'all confirmed');
    const read = await eds[0].client.read(id);
    await eventually(() => eds.every((e) => e.text.seq === read.seq && e.text.value === (read.text ?? '')), 10000, 'converged');
    for (const e of eds) e.client.close();
  });
});
