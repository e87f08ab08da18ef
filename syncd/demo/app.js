// The syncd demo page: a shared counter (pncounter), a todo list (orset), a
// text area (rga, through CollabText) and presence with cursors, all on one
// WebSocket of the bundled JS client. For trying syncd out, not production.

import { CollabText, SyncSocket, codePointIndex, utf16Offset, validateToken } from './syncd-client.js';
import { mountEditor } from './editor.js';

const params = new URLSearchParams(location.search);
// `?room=NAME` gives a separate set of CRDTs (tests use one per test).
const room = /^[A-Za-z0-9-]{1,40}$/.test(params.get('room') ?? '') ? `-${params.get('room')}` : '';
const IDS = {
  counter: `pn:demo-counter${room}`,
  todos: `or:demo-todos${room}`,
  text: `rg:demo-text${room}`,
  doc: `yd:demo-doc${room}`,
  room: `pr:demo-room${room}`,
};
const PRESENCE_TTL_MS = 30000; // an entry outlives a missed heartbeat or two ...
const HEARTBEAT_MS = 10000; // ... at this rhythm
const CURSOR_THROTTLE_MS = 120; // cursor moves shared at most this often
const PRESENCE_REFRESH_MS = 2000; // re-check expiry of entries whose owner vanished
const TOKEN_MARGIN_MS = 60000; // fetch a new demo token this long before the old one ends
// The token endpoint gives an address 20 tokens a minute: visitors behind one
// NAT can run out. Its 429 says when to ask again (Retry-After, in seconds).
const TOKEN_RETRY_DEFAULT_S = 5; // without a usable Retry-After
const TOKEN_RETRY_MAX_S = 120; // a longer one is waited in steps of this

const ANIMALS = ['Otter', 'Heron', 'Lynx', 'Badger', 'Falcon', 'Marten', 'Ibex', 'Puffin', 'Gecko', 'Bison', 'Wombat', 'Orca'];

const $ = (id) => document.getElementById(id);

// -- identity and token --------------------------------------------------------

let tokenInfo = null;
// The client ids of this page's tokens: presence entries are kept under the
// writer's, and every demo token has a new one (the socket reconnects with a
// renewed token every quarter of an hour), so this page's entry is under any.
const mine = new Set();
// One fetch at a time: the socket and the rich-text editor may both ask.
let fetching = null;
// `fresh`: a new token even if the one held has time left (the server ended it: revoked).
async function token({ fresh = false } = {}) {
  if (fresh || !tokenInfo || tokenInfo.expires_at - Date.now() < TOKEN_MARGIN_MS) {
    fetching ??= fetchToken().finally(() => {
      fetching = null;
    });
    await fetching;
  }
  return tokenInfo.token;
}

// A 429 is waited out, with a visible message, then asked again: the page
// threw on it and never loaded.
async function fetchToken() {
  for (;;) {
    const response = await fetch('token', { cache: 'no-store' });
    if (response.status === 429) {
      await waitToRetry(retryAfterSeconds(response));
      continue;
    }
    if (!response.ok) throw new Error(`demo token: HTTP ${response.status}`);
    tokenInfo = await response.json();
    mine.add(tokenInfo.client_id);
    $('wait').hidden = true;
    return;
  }
}

function retryAfterSeconds(response) {
  const value = Number.parseInt(response.headers.get('Retry-After') ?? '', 10);
  if (!Number.isFinite(value) || value < 1) return TOKEN_RETRY_DEFAULT_S;
  return Math.min(value, TOKEN_RETRY_MAX_S);
}

async function waitToRetry(seconds) {
  const wait = $('wait');
  wait.hidden = false;
  for (let left = seconds; left > 0; left -= 1) {
    wait.textContent =
      `Too many demo visitors from your network right now (${left} s until the next try); ` +
      'the page goes on by itself.';
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  wait.textContent = 'Trying again…';
}

const first = await token();
const clientId = validateToken(first).client_id;
const name = params.get('name') || `${ANIMALS[clientId % ANIMALS.length]} ${clientId % 100}`;
const color = hslHex((clientId * 137) % 360, 0.65, 0.45);
const me = $('me');
me.replaceChildren(dot(color), document.createTextNode(`You are ${name}`));

function dot(c) {
  const span = document.createElement('span');
  span.className = 'dot';
  span.style.setProperty('--c', c);
  return span;
}

// -- connection ------------------------------------------------------------------

const socket = new SyncSocket({ baseUrl: location.origin, token, namespace: 'demo' });
const statusEl = $('status');
socket.on('status', (state) => {
  statusEl.dataset.state = state;
  statusEl.textContent = state === 'open' ? 'live' : state;
});
// The client announces our presence again itself after a reconnect (its last
// data): only what changed while the socket was away goes out from here.
socket.on('open', () => sharePresence(false));
socket.on('error', (err) => console.warn('syncd:', err.message));

// -- counter ---------------------------------------------------------------------

const counter = socket.subscribe(IDS.counter);
counter.on('change', () => {
  $('count').textContent = String(counter.value() ?? 0);
});
$('inc').addEventListener('click', () => socket.op(IDS.counter, { op: 'increment' }).catch(report));
$('dec').addEventListener('click', () => socket.op(IDS.counter, { op: 'decrement' }).catch(report));

// -- todos -----------------------------------------------------------------------

const todos = socket.subscribe(IDS.todos);
todos.on('change', renderTodos);

function renderTodos() {
  const items = [...(todos.value() ?? [])].sort((a, b) => a.at - b.at || (a.id < b.id ? -1 : 1));
  $('todos').replaceChildren(
    ...items.map((item) => {
      const li = document.createElement('li');
      li.className = item.done ? 'done' : '';
      const box = document.createElement('input');
      box.type = 'checkbox';
      box.checked = Boolean(item.done);
      box.setAttribute('aria-label', 'done');
      // An orset element cannot change: "done" is remove-old plus add-new, in one batch.
      box.addEventListener('change', () =>
        socket
          .op(IDS.todos, [
            { op: 'remove', element: item },
            { op: 'add', element: { ...item, done: box.checked } },
          ])
          .catch(report),
      );
      const text = document.createElement('span');
      text.textContent = item.text;
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.textContent = '×';
      remove.setAttribute('aria-label', `remove ${item.text}`);
      remove.addEventListener('click', () => socket.op(IDS.todos, { op: 'remove', element: item }).catch(report));
      li.append(box, text, remove);
      return li;
    }),
  );
}

$('todo-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = $('todo-input');
  const text = input.value.trim();
  if (!text) return;
  input.value = '';
  const element = { at: Date.now(), id: Math.random().toString(36).slice(2, 10), text, by: name };
  socket.op(IDS.todos, { op: 'add', element }).catch(report);
});

// -- text ------------------------------------------------------------------------

const area = $('text');
const textSub = socket.subscribe(IDS.text, { replica: false });
const text = new CollabText({ send: (op) => socket.op(IDS.text, op), clientId });
text.attach(textSub);
text.on('error', report);
let composing = false;
let renderDeferred = null;

area.addEventListener('compositionstart', () => {
  composing = true;
});
area.addEventListener('compositionend', () => {
  composing = false;
  onInput();
  if (renderDeferred) renderText(renderDeferred);
});
area.addEventListener('input', () => {
  if (!composing) onInput();
});

function onInput() {
  renderDeferred = null;
  const value = area.value;
  text.replace(value, codePointIndex(value, area.selectionEnd));
}

text.on('change', (event) => {
  if (!event.local) renderText(event);
  else renderCarets();
});

function renderText(event) {
  if (composing) {
    // Rewriting the text under an IME composition would break it: later.
    renderDeferred = { mapIndex: (i) => i };
    return;
  }
  const value = text.value;
  if (area.value !== value) {
    const old = area.value;
    const start = event.mapIndex(codePointIndex(old, area.selectionStart));
    const end = event.mapIndex(codePointIndex(old, area.selectionEnd));
    const scroll = area.scrollTop;
    area.value = value;
    area.setSelectionRange(utf16Offset(value, start), utf16Offset(value, end));
    area.scrollTop = scroll;
  }
  renderCarets();
  shareCursor();
}

// -- presence ----------------------------------------------------------------------

const here = socket.subscribe(IDS.room);
here.on('change', renderPresence);
setInterval(renderPresence, PRESENCE_REFRESH_MS);
setInterval(() => sharePresence(), HEARTBEAT_MS);

let lastShared = '';
function presenceData() {
  const data = { name, color };
  // No cursor while the text area is not focused (and no key at all: msgpack
  // would carry an undefined as null, which reads as "at the start").
  if (document.activeElement === area) data.cursor = text.sharedRefAt(codePointIndex(area.value, area.selectionEnd));
  return data;
}

function sharePresence(force = true) {
  const data = presenceData();
  const key = JSON.stringify(data);
  if (!force && key === lastShared) return;
  lastShared = key;
  socket.op(IDS.room, { op: 'update', data, ttl_ms: PRESENCE_TTL_MS }).catch(report);
}

let cursorTimer = null;
function shareCursor() {
  if (cursorTimer) return;
  cursorTimer = setTimeout(() => {
    cursorTimer = null;
    sharePresence(false);
  }, CURSOR_THROTTLE_MS);
}
for (const type of ['keyup', 'mouseup', 'focus', 'blur', 'select']) area.addEventListener(type, shareCursor);
document.addEventListener('selectionchange', () => {
  if (document.activeElement === area) shareCursor();
});

function others() {
  const value = here.value() ?? {};
  return Object.entries(value).map(([cid, data]) => ({ cid: Number(cid), ...data, self: mine.has(Number(cid)) }));
}

function renderPresence() {
  const people = others().sort((a, b) => (a.self ? -1 : b.self ? 1 : String(a.name).localeCompare(String(b.name))));
  $('presence').replaceChildren(
    ...people.map((p) => {
      const li = document.createElement('li');
      li.dataset.clientId = String(p.cid);
      if (p.self) li.className = 'self';
      li.style.setProperty('--c', safeColor(p.color));
      li.append(dot(safeColor(p.color)), document.createTextNode(p.self ? `${p.name} (you)` : String(p.name)));
      return li;
    }),
  );
  renderCarets();
}

// Colours are #rrggbb: the rich-text editor's caret extension takes no other
// form (it draws anything else as transparent, with a console warning).
function safeColor(c) {
  return typeof c === 'string' && /^#[0-9a-f]{6}$/i.test(c) ? c : '#888888';
}

// `hsl(h s l)` as #rrggbb (h in degrees, s and l from 0 to 1).
function hslHex(h, s, l) {
  const a = s * Math.min(l, 1 - l);
  const channel = (n) => {
    const k = (n + h / 30) % 12;
    const v = l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1));
    return Math.round(v * 255).toString(16).padStart(2, '0');
  };
  return `#${channel(0)}${channel(8)}${channel(4)}`;
}

// Remote carets: a layer over the textarea with the same text (transparent)
// and a marker at each other visitor's cursor, kept at their element id.
const carets = $('carets');
area.addEventListener('scroll', () => {
  carets.scrollTop = area.scrollTop;
});
new ResizeObserver(() => renderCarets()).observe(area);

function renderCarets() {
  const value = text.value;
  const chars = Array.from(value);
  const marks = others()
    .filter((p) => !p.self && 'cursor' in p)
    .map((p) => ({ at: Math.min(text.indexOfRef(p.cursor), chars.length), p }))
    .sort((a, b) => a.at - b.at);
  const nodes = [];
  let from = 0;
  for (const { at, p } of marks) {
    nodes.push(document.createTextNode(chars.slice(from, at).join('')));
    const caret = document.createElement('span');
    caret.className = 'caret';
    caret.dataset.name = String(p.name);
    caret.style.setProperty('--c', safeColor(p.color));
    nodes.push(caret);
    from = at;
  }
  nodes.push(document.createTextNode(`${chars.slice(from).join('')}\u200b`));
  carets.replaceChildren(...nodes);
  carets.style.width = `${area.offsetWidth}px`;
  carets.style.height = `${area.offsetHeight}px`;
  carets.style.paddingRight = `${12 + area.offsetWidth - area.clientWidth - 2}px`; // the scrollbar
  carets.scrollTop = area.scrollTop;
}

// Leave at once when the page goes (the server also drops the entry when
// the connection closes).
addEventListener('pagehide', () => {
  socket.op(IDS.room, { op: 'leave' }).catch(() => {});
  setTimeout(() => socket.close(), 0);
});

function report(err) {
  console.warn('syncd demo:', err?.message ?? err);
}

// -- a handle for tests and the curious ----------------------------------------------

// -- rich text (Yjs, through y-websocket) ------------------------------------------

const rich = await mountEditor({
  element: $('rich'),
  namespace: 'demo',
  room: IDS.doc,
  token,
  user: { name, color },
  placeholder: 'Write here; others see it as you type.',
  status: $('rich-status'),
});

window.syncdDemo = {
  socket,
  text,
  clientId,
  name,
  state: () => ({
    status: socket.state,
    counter: counter.value(),
    todos: (todos.value() ?? []).map((t) => t.text),
    text: text.value,
    shownText: area.value,
    pending: text.pendingEdits + socket.pendingOps,
    presence: others().map((p) => p.name),
    rich: rich.state(),
  }),
  rich,
};
document.documentElement.dataset.ready = 'true';
