// The WebSocket transport (docs/protocol.md#the-websocket): subscriptions that survive
// reconnects (resubscribe with `since` + `epoch`), ops with acks, keep-alive.
//
// Reconnect: any close that we did not ask for schedules a new connection
// with exponential backoff and jitter. On open every subscription is sent
// again with its position, so the server replays what was missed (or sends a
// snapshot), and every op not yet acknowledged is sent again. Ops carry an
// `op_id` (made here when the caller gave none), so a resent op that had
// already been applied is answered with its first answer, never applied twice.
// The server ends each subscription's start (snapshot, replay, or nothing when
// it was up to date) with a `synced` message, which sets `synced`. The last
// presence `update` acked per id (the server left it when the old connection
// closed) is sent again, unless left or run out. A subscription whose start
// the server could not read (`unavailable`: its store away) is asked for
// again on the same connection, with backoff; one it ends or refuses for
// good (`forbidden`: the rule granting the read expired) ends with that error.
//
// A token that ends on an open connection (docs/permissions.md#when-access-ends):
// each subscription gets an `error` and the server closes with 4401. With a
// token function, we reconnect with a fresh token; with a fixed token, the
// socket stops at once: with a TokenRevokedError for a revoked one, with the
// server's `token_expired` for an expired one (even when this machine's clock
// says it has not expired yet: reconnecting with it would be refused for ever).

import { decode, encode } from '@msgpack/msgpack';
import { currentToken, checkId, normalizeConfig, nsPath } from './config.js';
import { Emitter } from './emitter.js';
import { SyncdError, TokenExpiredError, TokenParseError, TokenRevokedError, serviceError } from './errors.js';
import { typeForId } from './replicas.js';
import { Subscription } from './subscription.js';

/** The close code of a token that expired or was revoked while the socket was open. */
export const CLOSE_TOKEN_ENDED = 4401;
/** The close code of a message over the server's SERVICE_MAX_BODY_BYTES. */
const CLOSE_TOO_BIG = 1009;

export const DEFAULTS = Object.freeze({
  encoding: 'msgpack',
  /** First reconnect delay; doubles per failed attempt up to maxReconnectMs. */
  minReconnectMs: 100,
  maxReconnectMs: 5000,
  /** A ping this often keeps idle connections open through proxies ... (Infinity: no pings, nor the check below) */
  pingIntervalMs: 15000,
  /** ... and a connection silent for this long after a ping is taken as dead. (Infinity: never) */
  pongTimeoutMs: 10000,
  /** A gap's resubscribe that brings nothing within this long is sent again. (Infinity: never) */
  resyncTimeoutMs: 5000,
  /** A connection attempt not open after this long is abandoned and retried. (Infinity: never) */
  connectTimeoutMs: 10000,
});

/**
 * The longest delay a timer holds (ms): setTimeout and setInterval take a
 * longer one, and Infinity, NaN or undefined, as 1 ms. A period or timeout
 * past it starts no timer: what it bounds is off.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** The options that are a period or timeout (ms): Infinity (or past MAX_TIMER_MS) turns each off. */
const TIMEOUT_OPTIONS = ['pingIntervalMs', 'pongTimeoutMs', 'resyncTimeoutMs', 'connectTimeoutMs'];
/** The options that are a reconnect delay (ms): never off, so from 0 to MAX_TIMER_MS. */
const DELAY_OPTIONS = ['minReconnectMs', 'maxReconnectMs'];

/**
 * The socket's options, each timer's checked where the socket is made:
 * `undefined` (not given, or passed on by a wrapper that was not given it) is
 * the default; a period or timeout is a positive number, Infinity for off; a
 * reconnect delay a number from 0 to MAX_TIMER_MS; anything else a
 * RangeError. Taken as they came, each became a 1 ms timer: a ping every
 * millisecond (pingIntervalMs Infinity or undefined), every connection
 * abandoned at once (connectTimeoutMs), a NaN reconnect delay (undefined)
 * asking again at once, for ever.
 */
export function socketOptions(options) {
  const checked = { ...DEFAULTS, ...options };
  for (const name of TIMEOUT_OPTIONS) {
    const value = options[name];
    if (value === undefined) checked[name] = DEFAULTS[name];
    else if (typeof value !== 'number' || !(value > 0)) {
      throw new RangeError(`${name} must be a positive number of ms (Infinity for off), not ${String(value)}`);
    }
  }
  for (const name of DELAY_OPTIONS) {
    const value = options[name];
    if (value === undefined) checked[name] = DEFAULTS[name];
    else if (typeof value !== 'number' || !(value >= 0 && value <= MAX_TIMER_MS)) {
      throw new RangeError(`${name} must be a number of ms from 0 to ${MAX_TIMER_MS}, not ${String(value)}`);
    }
  }
  return checked;
}

/** setTimeout(fn, ms), or no timer (null) when `ms` is past what a timer holds: off. */
function timerUnlessOff(fn, ms) {
  return ms > MAX_TIMER_MS ? null : setTimeout(fn, ms);
}

function randomId() {
  const bytes = new Uint8Array(8);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function wsUrl(baseUrl, namespace, token) {
  const url = new URL(`${baseUrl}${nsPath({ namespace })}/ws`);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  // Browsers cannot set headers on a WebSocket: the token travels in the query.
  url.searchParams.set('token', token);
  return url.toString();
}

/**
 * Error codes of a subscription's start the server could not read (its store
 * away): the server dropped the subscription, and asking again may work.
 */
const START_FAILED = new Set(['unavailable', 'internal']);

/**
 * Error codes about a subscription after which it goes on: a subscribe over
 * the rate limit (sent again after `retry_after`), and a start that failed
 * (sent again with backoff).
 */
const SUBSCRIPTION_GOES_ON = new Set(['rate_limited', ...START_FAILED]);

/** A presence `update` without `ttl_ms` lasts this long (syncd/crdt/presence.py DEFAULT_TTL_MS). */
const PRESENCE_DEFAULT_TTL_MS = 30_000;
/** The shortest `ttl_ms` the server takes (syncd/crdt/presence.py MIN_TTL_MS). */
const PRESENCE_MIN_TTL_MS = 1_000;

/** The presence ops (`update`, `leave`) in an op body (one op or a batch) for `id`. */
function presenceOps(id, body) {
  const list = Array.isArray(body) ? body : [body];
  return list.filter(
    (o) =>
      o !== null &&
      typeof o === 'object' &&
      (o.op === 'update' || o.op === 'leave') &&
      (o.type === 'presence' || (o.type === undefined && typeForId(id) === 'presence')),
  );
}

/** The bytes a frame takes on the wire (a JSON text frame is UTF-8). */
function frameSize(frame) {
  return typeof frame === 'string' ? new TextEncoder().encode(frame).byteLength : frame.byteLength;
}

/** An unpaired surrogate: UTF-8 cannot carry it, the server cannot read a message holding one. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Whether a string (a key or a value) anywhere in `value` holds an unpaired surrogate. */
function holdsLoneSurrogate(value) {
  if (typeof value === 'string') return LONE_SURROGATE.test(value);
  if (value === null || typeof value !== 'object' || ArrayBuffer.isView(value)) return false;
  if (Array.isArray(value)) return value.some(holdsLoneSurrogate);
  return Object.entries(value).some(([k, v]) => LONE_SURROGATE.test(k) || holdsLoneSurrogate(v));
}

export class SyncSocket extends Emitter {
  /**
   * @param {{baseUrl: string, token: string | (() => string | Promise<string>), namespace: string, WebSocket?: unknown}} config
   * @param {Partial<typeof DEFAULTS>} [options]
   */
  constructor(config, options = {}) {
    super();
    this.config = normalizeConfig(config);
    this.options = socketOptions(options);
    this._WebSocket = config.WebSocket ?? options.WebSocket ?? globalThis.WebSocket;
    if (typeof this._WebSocket !== 'function') {
      throw new TypeError('no WebSocket implementation: pass config.WebSocket (Node 20: run with --experimental-websocket)');
    }
    /** 'idle' | 'connecting' | 'open' | 'closed' */
    this.state = 'idle';
    this._ws = null;
    this._subs = new Map();
    this._pending = new Map(); // ref -> {message, resolve, reject}
    this._nextRef = 1;
    this._session = randomId();
    this._attempt = 0;
    this._timer = null;
    this._connectTimer = null;
    this._pingTimer = null;
    /**
     * Timers that send again on the connection they were started on (an op
     * or a presence announce refused rate_limited): cleared when it is lost
     * or the socket is closed, so none outlives either.
     */
    this._connectionTimers = new Set();
    this._lastHeard = 0;
    this._openWaiters = [];
    /** Why close() was called (an error), once it was. */
    this._closeReason = null;
    /**
     * The error stopping the socket for good (a revoked or expired fixed
     * token) while listeners hear of it: a close() of theirs, without a
     * reason, closes for this one, not for a SyncdError `closed`.
     */
    this._stopping = null;
    /**
     * crdt id -> {op, until}: the last presence `update` acked on this socket
     * (op_id left out) and when its entry expires, until a `leave`.
     */
    this._presence = new Map();
  }

  /** Start connecting (idempotent); resolves when the socket is open. */
  connect() {
    if (this.state === 'closed') return Promise.reject(new SyncdError('closed', 'socket was closed'));
    if (this.state === 'open') return Promise.resolve();
    const opened = new Promise((resolve, reject) => this._openWaiters.push({ resolve, reject }));
    if (this.state === 'idle') this._open();
    return opened;
  }

  _setState(state) {
    if (this.state === state) return;
    this.state = state;
    this.emit('status', state);
  }

  async _open() {
    this._timer = null;
    if (this.state === 'closed') return;
    this._setState('connecting');
    let token;
    try {
      token = await currentToken(this.config);
    } catch (err) {
      // Closed while the token was being had: nothing to report or retry.
      if (this.state === 'closed') return;
      if (err instanceof TokenExpiredError || err instanceof TokenParseError) {
        // A bad token does not get better by retrying: stop and say why.
        this._fail(err);
        return;
      }
      this._scheduleReconnect(err);
      return;
    }
    if (this.state === 'closed') return;
    let ws;
    try {
      ws = new this._WebSocket(wsUrl(this.config.baseUrl, this.config.namespace, token));
    } catch (err) {
      this._scheduleReconnect(err);
      return;
    }
    ws.binaryType = 'arraybuffer';
    this._ws = ws;
    ws.onopen = () => {
      if (this._ws !== ws) return;
      clearTimeout(this._connectTimer);
      this._attempt = 0;
      this._lastHeard = Date.now();
      this._setState('open');
      // A status listener closed the socket: start nothing on it.
      if (this._ws !== ws) return;
      for (const sub of this._subs.values()) this._sendSubscribe(sub, false);
      const pending = [...this._pending].sort((a, b) => a[0] - b[0]);
      for (const [, p] of pending) {
        // Sent in the reconnect's burst: see _dispatch's rate_limited.
        p.burst = ws;
        p.sentOn = ws;
        p.firstSentAt ??= Date.now();
        this._send(p.message);
      }
      this._announcePresence(pending.map(([, p]) => p.message));
      this._startPing();
      for (const w of this._openWaiters.splice(0)) w.resolve();
      this.emit('open');
    };
    ws.onmessage = (event) => {
      if (this._ws !== ws) return;
      this._lastHeard = Date.now();
      let msg;
      try {
        msg = typeof event.data === 'string' ? JSON.parse(event.data) : decode(new Uint8Array(event.data));
      } catch (err) {
        this.emit('error', new SyncdError('bad_frame', `undecodable frame: ${err.message}`));
        return;
      }
      this._dispatch(msg);
    };
    ws.onclose = (event) => {
      if (this._ws !== ws) return;
      if (event.code === CLOSE_TOKEN_ENDED && typeof this.config.token !== 'function') {
        // Revoked (docs/permissions.md#revoking-tokens) or expired: the same
        // token would be refused at every reconnect. Stop and say why. (With
        // no subscription, this close is all the server says: this clock,
        // if behind the server's, still takes the token for valid.)
        if (event.reason === 'token revoked') {
          this._fail(new TokenRevokedError());
          return;
        }
        if (event.reason === 'token expired') {
          this._fail(serviceError('token_expired', 'token expired (the server closed the connection, 4401)'));
          return;
        }
      }
      if (event.code === CLOSE_TOO_BIG) this._refuseTooBig(ws);
      this._lost(new SyncdError('connection_lost', `connection closed (${event.code}${event.reason ? ` ${event.reason}` : ''})`));
    };
    ws.onerror = () => {
      // Browsers follow an error with a close event; some implementations
      // (Node 20's) never close a socket that failed to connect. Either way
      // the socket is done.
      if (this._ws === ws) this._lost(new SyncdError('connection_lost', 'connection failed'));
    };
    clearTimeout(this._connectTimer);
    this._connectTimer = timerUnlessOff(() => {
      if (this._ws === ws && this.state !== 'open') this._lost(new SyncdError('timeout', 'connection timed out'));
    }, this.options.connectTimeoutMs);
  }

  _lost(err) {
    this._stopPing();
    this._clearConnectionTimers();
    // An attempt lost before it opened: its timeout has nothing left to end
    // (left, it was pending through the backoff, holding the lost socket).
    clearTimeout(this._connectTimer);
    this._connectTimer = null;
    const ws = this._ws;
    this._ws = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close();
      } catch {
        // already closing
      }
    }
    for (const sub of this._subs.values()) sub.disconnected();
    if (this.state !== 'closed') this._scheduleReconnect(err);
  }

  /**
   * The server closed `ws` with 1009: a message sent on it was over its
   * SERVICE_MAX_BODY_BYTES. Only an op can be; any op larger than that one
   * is over the limit too, so the largest op sent on `ws` and not answered
   * is: reject it (as HTTP answers it, 413), or every reconnect would send
   * it again and be closed again.
   */
  _refuseTooBig(ws) {
    let culprit = null;
    for (const [ref, p] of this._pending) {
      if (p.sentOn === ws && (culprit === null || p.size > culprit[1].size)) culprit = [ref, p];
    }
    if (culprit === null) return;
    const [ref, p] = culprit;
    this._pending.delete(ref);
    p.reject(
      new SyncdError(
        'payload_too_large',
        `${p.message.id}: the op (${p.size} bytes) is over the server's body limit (SERVICE_MAX_BODY_BYTES); the server closed the connection (1009)`,
        { status: 413 },
      ),
    );
  }

  _scheduleReconnect(err) {
    if (this.state === 'closed') return;
    this._setState('connecting');
    this.emit('disconnect', err);
    // A status or disconnect listener closed the socket: no reconnect.
    if (this.state === 'closed') return;
    const { minReconnectMs, maxReconnectMs } = this.options;
    const base = Math.min(maxReconnectMs, minReconnectMs * 2 ** this._attempt);
    this._attempt = Math.min(this._attempt + 1, 30);
    const delay = base / 2 + Math.random() * (base / 2);
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._open(), delay);
  }

  _fail(err) {
    this._stopping = err;
    this.emit('error', err);
    for (const w of this._openWaiters.splice(0)) w.reject(err);
    this.close(err);
  }

  _startPing() {
    this._stopPing();
    const { pingIntervalMs, pongTimeoutMs } = this.options;
    // No pings: nothing asks for an answer, so silence is never taken as death.
    if (pingIntervalMs > MAX_TIMER_MS) return;
    this._pingTimer = setInterval(() => {
      if (Date.now() - this._lastHeard > pingIntervalMs + pongTimeoutMs) {
        this._lost(new SyncdError('timeout', 'no answer to ping'));
        return;
      }
      this._send({ kind: 'ping' });
    }, pingIntervalMs);
  }

  _stopPing() {
    clearInterval(this._pingTimer);
    this._pingTimer = null;
  }

  _encode(message) {
    return this.options.encoding === 'json' ? JSON.stringify(message) : encode(message);
  }

  _send(message) {
    const ws = this._ws;
    if (!ws || this.state !== 'open') return false;
    ws.send(this._encode(message));
    return true;
  }

  /**
   * Why the server could not read op message `message` (a SyncdError
   * `bad_request`, as HTTP answers it), or null. Its answer would be an error
   * without `ref` (it could not read the ref): the op would never settle and
   * go again at every reconnect; and one this encoding cannot write would
   * throw where it is sent (as the socket opens, stopping the rest).
   */
  _unreadable(message, sized) {
    let why = null;
    try {
      sized.size = frameSize(this._encode(message));
      if (holdsLoneSurrogate(message.op)) why = 'a string holds an unpaired surrogate (\\ud800-\\udfff), which UTF-8 cannot carry';
    } catch (err) {
      why = `the op cannot be written as ${this.options.encoding}: ${err?.message ?? err}`;
    }
    return why === null ? null : new SyncdError('bad_request', `${message.id}: ${why}`, { status: 400 });
  }

  _dispatch(msg) {
    if (msg === null || typeof msg !== 'object') return;
    switch (msg.kind) {
      case 'snapshot':
      case 'op':
      case 'deleted': {
        const sub = this._subs.get(msg.id);
        if (!sub) return;
        try {
          sub.handleDelta(msg);
        } catch (err) {
          // A delta this replica cannot apply: start over from a snapshot.
          this.emit('error', err);
          this._resync(sub, true);
        }
        return;
      }
      case 'ack': {
        const pending = this._pending.get(msg.ref);
        if (!pending) return;
        this._pending.delete(msg.ref);
        const { kind, ref, ...answer } = msg;
        pending.resolve(answer);
        return;
      }
      case 'error': {
        const retryAfter = typeof msg.retry_after === 'number' ? msg.retry_after : undefined;
        const err = serviceError(msg.error ?? 'error', msg.message ?? 'error', { body: msg, retryAfter });
        const pending = msg.ref !== undefined ? this._pending.get(msg.ref) : undefined;
        if ((err.code === 'token_expired' || err.code === 'token_revoked') && typeof this.config.token === 'function') {
          // The token ran out (or was revoked) on an open connection: reconnect
          // with a fresh one; the refused op (not applied) stays pending and goes again.
          this._lost(err);
          return;
        }
        if (err.code === 'token_revoked' || err.code === 'token_expired') {
          // A fixed token that was revoked, or that the server says has
          // expired (its clock decides, whatever this one says): every
          // reconnect would be refused, by a handshake a browser cannot read.
          const sub = msg.id !== undefined ? this._subs.get(msg.id) : undefined;
          this._stopping = err;
          if (pending) {
            this._pending.delete(msg.ref);
            pending.reject(err);
          } else if (sub) sub.handleError(err);
          this._fail(err);
          return;
        }
        if (pending && err.code === 'rate_limited' && pending.burst !== undefined && pending.burst === this._ws) {
          // An op sent again (or first) as the socket reopened, refused because
          // the reconnect spent the token's limit on its upgrade and subscribes:
          // it stays pending and goes again after retry_after (it may have been
          // applied before the drop: only its own answer can say).
          this._resendLater(msg.ref, retryAfter);
          return;
        }
        if (pending) {
          this._pending.delete(msg.ref);
          pending.reject(err);
          return;
        }
        const sub = msg.id !== undefined ? this._subs.get(msg.id) : undefined;
        // A subscribe over the token's rate limit changed nothing on the
        // server: ask again once the limit allows (still reported, as a
        // refused op is).
        if (sub && err.code === 'rate_limited') this._subscribeLater(sub, retryAfter);
        if (sub && START_FAILED.has(err.code)) {
          // The server could not read the start (its store away) and dropped
          // the subscription: ask again, later at each failure in a row.
          sub._startFailures = (sub._startFailures ?? 0) + 1;
          const backoffMs = Math.min(this.options.maxReconnectMs, 1000 * 2 ** (sub._startFailures - 1));
          this._subscribeLater(sub, retryAfter ?? backoffMs / 1000);
        }
        if (!sub) {
          this.emit('error', err);
          return;
        }
        sub.handleError(err);
        // Any other error about a subscription (its read ended: `forbidden`
        // when the rule that granted it expired; a subscribe refused) means
        // the server dropped it or never took it: it ends with the error, as
        // an SSE stream does, rather than stay `synced` with nothing coming
        // and be sent again at every reconnect. (Unless a listener of the
        // error ended it already.)
        if (!SUBSCRIPTION_GOES_ON.has(err.code) && this._subs.get(sub.id) === sub) this._endSubscription(sub, err);
        return;
      }
      case 'synced': {
        // The end of a subscription's start (docs/protocol.md#resuming).
        const sub = this._subs.get(msg.id);
        if (!sub) return;
        sub._startFailures = 0;
        sub.handleSynced(msg);
        return;
      }
      case 'pong':
        return;
      default:
        this.emit('message', msg);
    }
  }

  _sendSubscribe(sub, fresh) {
    // From the exact position: the start ends with `synced` even when the
    // server has nothing to replay.
    const message = { kind: 'subscribe', id: sub.id, ...(fresh ? {} : sub.resumeFields()) };
    this._send(message);
  }

  /**
   * After a reconnect: the server wrote a `leave` for every presence the old
   * connection wrote (docs/protocol.md#the-websocket), so announce the last
   * one set on each id again, with a fresh op_id (the old one would be
   * answered as a duplicate, not applied). Ids with a presence op still
   * pending are skipped: that op, newer, has just been sent again; so are
   * entries whose TTL has run out (the app stopped renewing them). The
   * announce carries what is left of the TTL (at least the server's minimum),
   * and its entry keeps its end: reconnects do not keep alive an entry the
   * app stopped renewing.
   */
  _announcePresence(resent) {
    const busy = new Set(resent.filter((m) => presenceOps(m.id, m.op).length > 0).map((m) => m.id));
    const now = Date.now();
    for (const [id, { op, until }] of this._presence) {
      if (until <= now) {
        this._presence.delete(id);
        continue;
      }
      if (busy.has(id)) continue;
      this._announce(id, this._presence.get(id));
    }
  }

  /**
   * Send presence entry `entry` of `id` again (see _announcePresence). One
   * refused over the token's rate limit (a reconnect spends it on its upgrade
   * and subscribes first) goes again after `retry_after`, on the same
   * connection, if the entry is still the one to announce.
   */
  _announce(id, entry) {
    const ws = this._ws;
    const ttl_ms = Math.max(PRESENCE_MIN_TTL_MS, Math.ceil(entry.until - Date.now()));
    this._submit(id, { ...entry.op, ttl_ms }, entry.until).catch((err) => {
      if (err?.code === 'closed') return;
      this.emit('error', err);
      if (err?.code !== 'rate_limited') return;
      this._onThisConnection(
        () => {
          if (this._ws !== ws || this.state !== 'open' || this._presence.get(id) !== entry) return;
          if (entry.until <= Date.now()) {
            this._presence.delete(id);
            return;
          }
          const busy = [...this._pending.values()].some((p) => p.message.id === id && presenceOps(id, p.message.op).length > 0);
          if (!busy) this._announce(id, entry);
        },
        Math.max(1, err.retryAfter ?? 1) * 1000,
      );
    });
  }

  /**
   * Keep the presence this socket set (acked), for _announcePresence; an
   * announce (`keepUntil`) keeps the end its entry had. An update's TTL is
   * counted from `sentAt`, when the op first went out: the server stamps it
   * on arrival, no earlier, so the entry is kept no longer than the server
   * keeps it. Counted from the ack, its end was late by the op's round trip
   * and the answer's wait (over 100 ms on a loaded machine), and every
   * announce after a reconnect carried that much more than the app gave.
   */
  _notePresence(id, body, keepUntil, sentAt) {
    for (const o of presenceOps(id, body)) {
      if (o.op === 'leave') this._presence.delete(id);
      else {
        const { op_id, ...op } = o;
        // A heartbeat (no data) keeps the entry's data on the server; the
        // announce after a reconnect (the server left the entry meanwhile)
        // must carry that data, which is the last one noted here.
        const held = this._presence.get(id);
        // (None once that entry ran out: the server's heartbeat then kept no data either.)
        if (op.data === undefined && held?.op.data !== undefined && held.until > Date.now()) op.data = held.op.data;
        const ttl = typeof op.ttl_ms === 'number' ? op.ttl_ms : PRESENCE_DEFAULT_TTL_MS;
        this._presence.set(id, { op, until: keepUntil ?? (sentAt ?? Date.now()) + ttl });
      }
    }
  }

  _resendLater(ref, seconds) {
    const ws = this._ws;
    this._onThisConnection(
      () => {
        const pending = this._pending.get(ref);
        // After another reconnect it went out again with the others.
        if (pending && this._ws === ws && this.state === 'open') this._send(pending.message);
      },
      Math.max(1, seconds ?? 1) * 1000,
    );
  }

  /** Run `fn` after `delay` ms unless the connection is lost or the socket closed first. */
  _onThisConnection(fn, delay) {
    const timer = setTimeout(() => {
      this._connectionTimers.delete(timer);
      fn();
    }, delay);
    this._connectionTimers.add(timer);
  }

  _clearConnectionTimers() {
    for (const timer of this._connectionTimers) clearTimeout(timer);
    this._connectionTimers.clear();
  }

  _subscribeLater(sub, seconds) {
    const ws = this._ws;
    clearTimeout(sub._retryTimer);
    sub._retryTimer = setTimeout(
      () => {
        // After a reconnect the subscribe went out again with the others.
        if (!sub.closed && this._ws === ws && this.state === 'open') this._sendSubscribe(sub, false);
      },
      Math.max(1, seconds ?? 1) * 1000,
    );
  }

  _resync(sub, fresh) {
    if (fresh) {
      sub.seq = 0;
      sub.epoch = null;
    }
    this._send({ kind: 'unsubscribe', id: sub.id });
    this._sendSubscribe(sub, fresh);
    clearTimeout(sub._resyncTimer);
    sub._resyncTimer = timerUnlessOff(() => {
      if (!sub.closed && sub._resyncing && this.state === 'open') this._resync(sub, false);
    }, this.options.resyncTimeoutMs);
  }

  /**
   * Follow a CRDT: deltas from a snapshot (or the replay after a reconnect) on.
   * @param {string} id
   * @param {{replica?: boolean, onChange?: Function, onDelta?: Function, onError?: Function}} [options]
   */
  subscribe(id, options = {}) {
    checkId(id);
    if (this.state === 'closed') {
      // Nothing would ever be sent: say so rather than return a subscription that never syncs.
      throw new SyncdError('closed', `cannot subscribe to ${id}: the socket was closed (use a new client)`, {
        cause: this._closeReason ?? undefined,
      });
    }
    if (this._subs.has(id)) {
      // One subscription per id: a second would share its position and deltas.
      throw new SyncdError('already_subscribed', `already subscribed to ${id}: unsubscribe() it first, or use the subscription you have`);
    }
    const sub = new Subscription(id, {
      replica: options.replica, // default: one, but none of a Yjs document (Subscription)
      resync: (s, fresh) => this._resync(s, fresh),
    });
    if (options.onChange) sub.on('change', options.onChange);
    if (options.onDelta) sub.on('delta', options.onDelta);
    if (options.onError) sub.on('error', options.onError);
    sub.apply = (op) => this.op(id, op);
    sub.unsubscribe = () => this.unsubscribe(id);
    this._subs.set(id, sub);
    if (this.state === 'idle') this.connect().catch(() => {});
    else this._sendSubscribe(sub, false);
    return sub;
  }

  unsubscribe(id) {
    const sub = this._subs.get(id);
    if (!sub) return;
    this._endSubscription(sub, new SyncdError('closed', `unsubscribed from ${id}`));
  }

  /** Forget `sub` (unsubscribed on the server too) and end it with `reason`. */
  _endSubscription(sub, reason) {
    clearTimeout(sub._resyncTimer);
    clearTimeout(sub._retryTimer);
    this._subs.delete(sub.id);
    this._send({ kind: 'unsubscribe', id: sub.id });
    sub.end(reason);
  }

  /**
   * Apply an op (or an array of ops, all or none) over the socket. Resolves
   * with the ack (`{seq, ...}`), rejects with SyncdError for an error answer.
   * Sent when the socket is open, and again after a reconnect until acked.
   */
  op(id, op) {
    return this._submit(id, op, undefined);
  }

  /** op(); `keepUntil`: a presence announce's entry keeps this end once acked. */
  _submit(id, op, keepUntil) {
    checkId(id);
    if (this.state === 'closed') return Promise.reject(new SyncdError('closed', 'socket was closed'));
    const ref = this._nextRef++;
    // Only an op map gets an op_id; anything else goes as it is, for the
    // server to refuse (a rejected promise, never a throw from here).
    const isOp = (o) => o !== null && typeof o === 'object' && !Array.isArray(o);
    const stamp = (o, suffix) => (isOp(o) && o.op_id === undefined ? { ...o, op_id: `${this._session}-${ref}${suffix}` } : o);
    const body = Array.isArray(op) ? op.map((o, i) => stamp(o, `.${i}`)) : stamp(op, '');
    const message = { kind: 'op', id, op: body, ref };
    const sized = {};
    const unreadable = this._unreadable(message, sized);
    if (unreadable) return Promise.reject(unreadable);
    return new Promise((resolve, reject) => {
      const acked = (answer) => {
        this._notePresence(id, body, keepUntil, pending.firstSentAt);
        resolve(answer);
      };
      /** firstSentAt: when the op first went out (see _notePresence). */
      const pending = { message, size: sized.size, resolve: acked, reject, sentOn: null, firstSentAt: undefined };
      this._pending.set(ref, pending);
      if (this.state === 'idle') this.connect().catch(() => {});
      else if (this._send(message)) {
        pending.sentOn = this._ws;
        pending.firstSentAt = Date.now();
      }
    });
  }

  /** Ops sent and not yet acknowledged. */
  get pendingOps() {
    return this._pending.size;
  }

  /** Close for good: no reconnect; unacknowledged ops are rejected, every subscription ends (`close`). */
  close(reason) {
    if (this.state === 'closed') return;
    if (!(reason instanceof Error)) reason = this._stopping;
    this._closeReason = reason instanceof Error ? reason : null;
    this._setState('closed');
    this._presence.clear();
    clearTimeout(this._timer);
    clearTimeout(this._connectTimer);
    this._stopPing();
    this._clearConnectionTimers();
    const ws = this._ws;
    this._ws = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close(1000);
      } catch {
        // already closed
      }
    }
    const err = reason instanceof Error ? reason : new SyncdError('closed', 'socket was closed');
    for (const pending of this._pending.values()) pending.reject(err);
    this._pending.clear();
    for (const w of this._openWaiters.splice(0)) w.reject(err);
    const subs = [...this._subs.values()];
    this._subs.clear();
    for (const sub of subs) {
      clearTimeout(sub._resyncTimer);
      clearTimeout(sub._retryTimer);
      sub.end(err);
    }
  }
}
