// Drives headless Chromium (Debian's /usr/bin/chromium, through playwright-core:
// no browser download) for the pytest browser tests. One JSON command per
// line on stdin, one JSON answer per line on stdout:
//   {"cmd": "open", "page": "a", "url": "..."}         new window (own context), waits for the demo
//       ("wait": false: not for the demo; "init": JS run in the page before its own scripts)
//   {"cmd": "eval", "page": "a", "js": "expr"}          value of an expression (awaited)
//   {"cmd": "wait", "page": "a", "js": "expr", "timeout": ms}   until the expression is truthy
//   {"cmd": "click" | "focus", "page", "selector"}
//   {"cmd": "type", "page", "text", "delay"}            keyboard typing into the focused element
//   {"cmd": "press", "page", "key", "count"}
//   {"cmd": "screenshot", "page", "path"}
//   {"cmd": "close", "page"}                            closes the window
//   {"cmd": "parallel", "steps": [command, ...]}        runs commands at the same time
//   {"cmd": "exit"}
// Answers: {"ok": true, "value": ...} or {"ok": false, "error": "..."}.

import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';

const require = createRequire(new URL('../../clients/js/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const CHROMIUM = process.env.SYNCD_CHROMIUM ?? '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const DEFAULT_TIMEOUT_MS = 15000;

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
const pages = new Map();
const logs = [];

function page(name) {
  const p = pages.get(name);
  if (!p) throw new Error(`no page ${name}`);
  return p;
}

async function run(c) {
  switch (c.cmd) {
    case 'open': {
      // bypassCSP: the demo's CSP forbids eval, which waitForFunction with a string uses.
      const context = await browser.newContext({ viewport: { width: 1000, height: 860 }, bypassCSP: true });
      // init: runs at the page's creation, before its scripts (a recorder of
      // what the page shows only briefly, say).
      if (c.init) await context.addInitScript({ content: c.init });
      const p = await context.newPage();
      p.on('console', (m) => logs.push(`${c.page}: ${m.text()}`));
      p.on('pageerror', (e) => logs.push(`${c.page}: pageerror ${e.message}`));
      pages.set(c.page, p);
      await p.goto(c.url);
      // wait: false: the page may not connect at once (a test of its waiting).
      if (c.wait === false) return null;
      await p.waitForFunction(() => window.syncdDemo?.state().status === 'open', null, { timeout: DEFAULT_TIMEOUT_MS });
      return null;
    }
    case 'eval':
      return page(c.page).evaluate(c.js);
    case 'wait':
      await page(c.page).waitForFunction(c.js, null, { timeout: c.timeout_ms ?? c.timeout ?? DEFAULT_TIMEOUT_MS, polling: 50 });
      return null;
    case 'click':
      await page(c.page).click(c.selector);
      return null;
    case 'focus':
      await page(c.page).focus(c.selector);
      return null;
    case 'type':
      await page(c.page).keyboard.type(c.text, { delay: c.delay ?? 0 });
      return null;
    case 'press':
      for (let i = 0; i < (c.count ?? 1); i++) await page(c.page).keyboard.press(c.key);
      return null;
    case 'screenshot':
      await page(c.page).screenshot({ path: c.path, fullPage: true });
      return null;
    case 'close': {
      const p = page(c.page);
      pages.delete(c.page);
      await p.context().close();
      return null;
    }
    case 'parallel':
      return Promise.all(c.steps.map(run));
    case 'logs':
      return logs.splice(0);
    default:
      throw new Error(`unknown command ${c.cmd}`);
  }
}

const input = createInterface({ input: process.stdin });
for await (const line of input) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  if (command.cmd === 'exit') break;
  let answer;
  try {
    answer = { ok: true, value: (await run(command)) ?? null };
  } catch (err) {
    answer = { ok: false, error: String(err?.message ?? err), logs: logs.splice(0) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
input.close();
await browser.close();
process.exit(0);
