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
/** A stop's wait for the server to exit after SIGTERM (its graceful stop) before SIGKILL. */
const STOP_TIMEOUT_MS = 10000;

/**
 * How syncd is run: `python -m syncd`, with a thread that ends it (SIGTERM,
 * its graceful stop) once its stdin ends. Its stdin is a pipe from this
 * process, which closes when this process is gone, however it went: a test
 * file killed by the runner, a crash, a signal. The 'exit' handler below
 * covers a process that exits; a killed one runs no handler at all.
 */
const LAUNCH = `
import os, runpy, signal, sys, threading

def _orphaned():
    sys.stdin.buffer.read()
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=_orphaned, name="stdin-watch", daemon=True).start()
runpy.run_module("syncd", run_name="__main__", alter_sys=True)
`;

/**
 * The server processes started here and not yet exited, and the data
 * directories not yet removed: at this process's exit the processes are
 * killed and the directories removed, whatever path left them (a start that
 * failed or timed out, a test that threw before its teardown was registered,
 * a test timeout).
 */
const running = new Set();
const dataDirs = new Set();

/** Pids and data directories of every server this process started (for the helper's own tests). */
export const launched = [];

process.on('exit', () => {
  for (const proc of running) {
    try {
      proc.kill('SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

function removeDataDir(dir) {
  rmSync(dir, { recursive: true, force: true });
  dataDirs.delete(dir);
}

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

/**
 * Start syncd; `restart()` stops it and starts it again on the same port and
 * data. A start that fails (the server exits, or is not ready within
 * `startTimeoutMs`) stops what it started and removes the data directory
 * before it throws: nobody holds the server to close it.
 */
export async function startServer(env = {}, { startTimeoutMs = START_TIMEOUT_MS } = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'syncd-js-'));
  dataDirs.add(dataDir);
  let port;
  try {
    port = await freePort();
  } catch (err) {
    removeDataDir(dataDir);
    throw err;
  }
  const server = {
    url: `http://127.0.0.1:${port}`,
    port,
    proc: null,
    log: '',
    async start() {
      try {
        await this._start();
      } catch (err) {
        await this.stop();
        throw err;
      }
    },
    async _start() {
      const proc = spawn(PYTHON, ['-c', LAUNCH], {
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
        // stdin: the pipe whose end stops the server (LAUNCH).
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      running.add(proc);
      proc.once('exit', () => running.delete(proc));
      launched.push({ pid: proc.pid, dataDir });
      proc.stdout.on('data', (d) => (server.log += d));
      proc.stderr.on('data', (d) => (server.log += d));
      // An error of the pipe (the server gone first) is not this process's.
      proc.stdin.on('error', () => {});
      this.proc = proc;
      const deadline = Date.now() + startTimeoutMs;
      while (Date.now() < deadline) {
        if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`syncd exited: ${server.log}`);
        try {
          // Bounded: a server that accepts and never answers does not outlast the deadline.
          const r = await fetch(`${server.url}/health/live`, { signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())) });
          if (r.ok) return;
        } catch {
          // not listening yet
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`syncd did not start in ${startTimeoutMs} ms: ${server.log}`);
    },
    /** SIGTERM (its graceful stop), then SIGKILL after STOP_TIMEOUT_MS; resolves once it has exited. */
    async stop() {
      const proc = this.proc;
      if (!proc) return;
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        let timer;
        const late = new Promise((r) => {
          timer = setTimeout(r, STOP_TIMEOUT_MS, 'late');
        });
        if ((await Promise.race([exited, late])) === 'late') {
          proc.kill('SIGKILL');
          await exited;
        }
        clearTimeout(timer);
      }
    },
    async restart() {
      await this.stop();
      await this.start();
    },
    async close() {
      await this.stop();
      removeDataDir(dataDir);
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
  try {
    await server.start();
  } catch (err) {
    removeDataDir(dataDir);
    throw err;
  }
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
