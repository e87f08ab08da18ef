// A subscription whose start the server could not read (its store away: a
// PostgreSQL outage, `unavailable`; or `internal`) was dropped by the server,
// which says so with an `error` for the id and keeps the connection. The
// subscription is asked for again, with backoff, until a start comes; it
// used to wait, not synced and getting nothing, until the socket happened
// to reconnect for some other reason. A real server on a real PostgreSQL
// (tests/pgserver.py, by pg-helper.py), stopped and started again.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { PYTHON, eventually, serverMissing, startServer } from './helpers.js';

const REPO = fileURLToPath(new URL('../../..', import.meta.url));
const HELPER = fileURLToPath(new URL('pg-helper.py', import.meta.url));
/** The server's store answers `unavailable` only once its pool gave up a connection (seconds). */
const OUTAGE_ANSWER_MS = 30_000;

let skip = serverMissing() ?? false;
let pg;
let server;

/** The helper: its first line, then `command(line)` answered `ok`. */
async function startPostgres() {
  const proc = spawn(PYTHON, [HELPER], { cwd: REPO, stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  const first = JSON.parse((await lines.next()).value ?? '{"missing": "no answer"}');
  const command = async (line) => {
    proc.stdin.write(`${line}\n`);
    assert.equal((await lines.next()).value, 'ok');
  };
  const stop = () =>
    new Promise((resolve) => {
      if (proc.exitCode !== null) return resolve();
      proc.once('exit', resolve);
      proc.stdin.end();
    });
  return { ...first, command, stop };
}

before(async () => {
  if (skip) return;
  pg = await startPostgres();
  if (pg.missing) {
    skip = pg.missing;
    return;
  }
  server = await startServer({ DATABASE_URL: pg.url });
});
after(async () => {
  await server?.close();
  await pg?.stop();
});

test('a subscribe refused unavailable is sent again until its start comes', { timeout: 120_000 }, async (t) => {
  if (skip) return t.skip(String(skip));
  const token = await server.token({ clientId: 44 });
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }, { socket: { minReconnectMs: 50, maxReconnectMs: 500 } });
  try {
    await c.increment('gc:stored', 5);
    await server.restart(); // so that it is in the database only
    const here = c.subscribe('gc:here');
    await eventually(() => here.synced, 5000, 'the socket is open');
    const opens = [];
    c.socket.on('open', () => opens.push(Date.now()));
    await pg.command('halt');
    let sub;
    const errors = [];
    try {
      // Not in the server's memory (a new start reads the store): its start fails.
      sub = c.subscribe('gc:stored', { replica: true });
      sub.on('error', (err) => errors.push(err));
      await eventually(() => errors.length > 0, OUTAGE_ANSWER_MS, 'the refusal');
      assert.equal(errors[0].code, 'unavailable');
      assert.equal(sub.closed, false, 'the subscription goes on');
    } finally {
      await pg.command('resume');
    }
    await eventually(() => sub.synced, OUTAGE_ANSWER_MS, 'the start, once the store is back');
    assert.equal(sub.value(), 5);
    assert.deepEqual(opens, [], 'on the same connection');
  } finally {
    c.close();
  }
});
