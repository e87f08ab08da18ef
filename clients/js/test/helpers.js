// Test helpers: a real syncd subprocess (from the repository's .venv) and
// tokens made locally (unsigned: for pre-validation only).

import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encode } from '@msgpack/msgpack';
import { base64urlEncode } from '../src/base64.js';

const REPO = fileURLToPath(new URL('../../..', import.meta.url));
export const PYTHON = process.env.SYNCD_PYTHON ?? join(REPO, '.venv', 'bin', 'python');
export const ADMIN = 'js-test-admin';
const SIGNING_KEY = '22'.repeat(32);
const START_TIMEOUT_MS = 20000;

/** Skip reason when no syncd can be started here, else null. */
export function serverMissing() {
  return existsSync(PYTHON) ? null : `no Python with syncd at ${PYTHON} (set SYNCD_PYTHON)`;
}

export function fakeToken(claims, signatureBytes = 64) {
  return `${base64urlEncode(encode(claims))}.${base64urlEncode(new Uint8Array(signatureBytes))}`;
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

/** Start syncd; `restart()` stops it and starts it again on the same port and data. */
export async function startServer(env = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'syncd-js-'));
  const port = await freePort();
  const server = {
    url: `http://127.0.0.1:${port}`,
    port,
    proc: null,
    log: '',
    async start() {
      const proc = spawn(PYTHON, ['-m', 'syncd'], {
        cwd: REPO,
        env: {
          ...process.env,
          SERVICE_BIND: `127.0.0.1:${port}`,
          SERVICE_DATA_DIR: dataDir,
          SERVICE_SIGNING_KEY: SIGNING_KEY,
          SERVICE_ADMIN_TOKEN: ADMIN,
          SERVICE_FSYNC: 'never',
          SERVICE_DEMO: 'true',
          SERVICE_LOG_LEVEL: 'warning',
          ...env,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      proc.stdout.on('data', (d) => (server.log += d));
      proc.stderr.on('data', (d) => (server.log += d));
      this.proc = proc;
      const deadline = Date.now() + START_TIMEOUT_MS;
      while (Date.now() < deadline) {
        if (proc.exitCode !== null) throw new Error(`syncd exited: ${server.log}`);
        try {
          const r = await fetch(`${server.url}/health/live`);
          if (r.ok) return;
        } catch {
          // not listening yet
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`syncd did not start: ${server.log}`);
    },
    async stop() {
      const proc = this.proc;
      if (!proc || proc.exitCode !== null) return;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
    },
    async restart() {
      await this.stop();
      await this.start();
    },
    async close() {
      await this.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
    /** A token from the admin endpoint. */
    async token({ namespace = 'ns1', clientId = 7, ttlMs, read = ['*'], write = ['*'] } = {}) {
      const r = await fetch(`${server.url}/v1/namespaces/${namespace}/tokens`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ client_id: clientId, ttl_ms: ttlMs, permissions: { read, write } }),
      });
      if (!r.ok) throw new Error(`token: ${r.status} ${await r.text()}`);
      return (await r.json()).token;
    },
  };
  await server.start();
  return server;
}

/** Poll until `check()` is truthy (or throw after `timeoutMs`). */
export async function eventually(check, timeoutMs = 5000, what = 'condition') {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await check();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${what} not reached within ${timeoutMs} ms (last: ${JSON.stringify(last)})`);
}

/** Stack frames name modules by URL. */
const SRC_URL = new URL('../src/', import.meta.url).href;

/**
 * Watch the timers the client's own code (src/) starts: `pending()` lists
 * those neither fired nor cleared, each as `{name, via, delay}` (`name`: the
 * src function that started it; `via`: every src function on the stack then).
 * Wraps the global timer functions, which the client calls; `restore()` puts
 * them back.
 */
export function trackClientTimers() {
  const real = { setTimeout, setInterval, clearTimeout, clearInterval };
  const live = new Map(); // timer -> {name, via, delay}
  const startedBy = () => {
    const frames = new Error().stack.split('\n').filter((line) => line.includes(SRC_URL));
    if (frames.length === 0) return null;
    // A named function, else (an arrow) the file and line.
    const names = frames.map(
      (frame) => frame.match(/at (?:async )?([\w.$<>]+) \(/)?.[1] ?? frame.slice(frame.indexOf(SRC_URL) + SRC_URL.length).trim(),
    );
    return { name: names[0], via: names };
  };
  globalThis.setTimeout = (fn, delay, ...args) => {
    const by = startedBy();
    const timer = real.setTimeout(
      (...a) => {
        live.delete(timer);
        fn(...a);
      },
      delay,
      ...args,
    );
    if (by !== null) live.set(timer, { ...by, delay });
    return timer;
  };
  globalThis.setInterval = (fn, delay, ...args) => {
    const by = startedBy();
    const timer = real.setInterval(fn, delay, ...args);
    if (by !== null) live.set(timer, { ...by, delay });
    return timer;
  };
  globalThis.clearTimeout = (timer) => {
    live.delete(timer);
    real.clearTimeout(timer);
  };
  globalThis.clearInterval = (timer) => {
    live.delete(timer);
    real.clearInterval(timer);
  };
  return {
    pending: () => [...live.values()],
    restore: () => Object.assign(globalThis, real),
  };
}
