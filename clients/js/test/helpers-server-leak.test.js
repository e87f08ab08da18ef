// The test helper's startServer leaves no syncd running on any path: a start
// that is not ready in time or fails stops what it started (and removes its
// data directory) before it throws; a test file that exits without closing
// its server has it killed at its exit; and one killed outright (as the test
// runner kills a file on a timeout, or a crash) has it stop on its own, as
// its stdin pipe closes with the file's process.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { eventually, launched, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const HELPERS = new URL('./helpers.js', import.meta.url).href;
/** Bound on a server's exit once its start failed or its parent went (generous: a loaded machine). */
const GONE_WITHIN_MS = 30_000;

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code !== 'ESRCH';
  }
}

/** Kill what a failing test left behind, so it leaks nothing either. */
function reap(pids) {
  for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
}

test('a start not ready in time leaves no process and no data directory', { skip }, async () => {
  const before = launched.length;
  let started;
  try {
    await assert.rejects(
      startServer({}, { startTimeoutMs: 1 }).then((server) => {
        started = server;
      }),
      /did not start in 1 ms/,
    );
    const mine = launched.slice(before);
    assert.equal(mine.length, 1);
    assert.equal(alive(mine[0].pid), false, 'the server still runs');
    assert.equal(existsSync(mine[0].dataDir), false, 'its data directory is left');
  } finally {
    await started?.close();
    reap(launched.slice(before).map((l) => l.pid));
  }
});

test('a start whose server exits leaves no data directory', { skip }, async () => {
  const before = launched.length;
  await assert.rejects(startServer({ SERVICE_RATE_LIMIT: 'lots' }), /syncd exited/);
  const mine = launched.slice(before);
  assert.equal(mine.length, 1);
  assert.equal(existsSync(mine[0].dataDir), false);
});

/**
 * A node process that starts a server with the helper, prints its pid and
 * data directory, then ends as `how` says: `exit` (process.exit, the server
 * never closed) or `kill` (SIGKILL to itself: no handler runs).
 */
async function orphan(how) {
  const script = `
    import { launched, startServer } from ${JSON.stringify(HELPERS)};
    await startServer();
    console.log(JSON.stringify(launched[0]));
    if (${JSON.stringify(how)} === 'kill') process.kill(process.pid, 'SIGKILL');
    else process.exit(0);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('.', import.meta.url)),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((r) => child.once('exit', r));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const first = (await lines.next()).value;
  await exited;
  assert.ok(first, 'the child started no server');
  return JSON.parse(first);
}

for (const how of ['exit', 'kill']) {
  test(`a test process that ends (${how}) without closing its server takes it along`, { skip, timeout: 120_000 }, async () => {
    const { pid, dataDir } = await orphan(how);
    try {
      await eventually(() => !alive(pid), GONE_WITHIN_MS, `the orphaned server ${pid} gone`);
      if (how === 'exit') assert.equal(existsSync(dataDir), false, 'its data directory is left');
    } finally {
      reap([pid]);
      // A killed process removes nothing: its server stops, its directory stays.
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
}
