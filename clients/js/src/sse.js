// The SSE transport (docs/protocol.md#the-sse-stream): `data: <base64 msgpack delta>` events,
// `event: synced` (its data encoded as a delta's) ending the start, which sets
// the subscription's `synced`; and, when the read ends (the token expires or is revoked, or the rule that
// granted it expires), a last event `event: end` whose data is the error body
// as JSON. That ends the stream with the error (a SyncdError; TokenRevokedError
// for `token_revoked`) instead of a reconnect that would only be refused;
// an expired token with a token function reconnects with a fresh token.
//
// Two ways to read the stream:
// - `eventsource`: an EventSource (the browser's, or one given in the
//   options, such as the `eventsource` package in Node). EventSource cannot
//   send headers, so the token goes in the query (`?token=`). It hides the
//   server's `: ping` comments, so it asks for pings as events
//   (`?ping=event`: `event: ping` with empty data) to see the stream is alive.
// - `fetch`: a streaming fetch with the Authorization header (browsers and
//   Node 18+), parsed here; it sees the comments.
// Either way a stream with nothing from the server (an event or a ping) for
// `readTimeoutMs` is taken as dead and reopened: a connection dropped on the
// way (a NAT, a proxy) ends with no close to tell.
// `auto` takes fetch when there is one (it authenticates with the header,
// which every syncd accepts), else EventSource. Either way the
// stream is reopened by us (not by EventSource's own retry), with `since` and
// `epoch`, so a reconnect replays only what was missed.

import { decode } from '@msgpack/msgpack';
import { base64Decode } from './base64.js';
import { crdtPath, currentToken, normalizeConfig } from './config.js';
import { Emitter } from './emitter.js';
import { SyncdError, TokenExpiredError, TokenParseError, serviceError } from './errors.js';
import { retryAfterSeconds } from './http.js';
import { Subscription } from './subscription.js';

/** Decode one SSE `data:` payload into a delta. */
export function decodeSseData(data) {
  return decode(base64Decode(data.trim()));
}

/**
 * The longest `Retry-After` a reconnect honours (ms), as the Python client's
 * streams cap it (syncd/client/retry.py RETRY_AFTER_MAX_S): a larger one is
 * cut to this, not waited in full.
 */
export const RETRY_AFTER_MAX_MS = 10_000;

/**
 * Silence after which a stream counts as dead (ms): three missed pings
 * of the server's default SERVICE_SSE_PING_S (15 s), as the Python client's
 * SSE_READ_TIMEOUT_S. A connection dropped on the way (a NAT, a proxy, a
 * laptop asleep) ends with no close to tell: only the silence does.
 */
export const READ_TIMEOUT_MS = 45_000;

/**
 * The longest delay a timer holds (ms): setTimeout takes a longer one, and
 * Infinity, as 1 ms. A readTimeoutMs past it sets no timer: the stream is
 * never taken as dead for its silence.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A bound given as an option (`readTimeoutMs`, `maxEventChars`): `undefined`
 * (not given, or passed on by a wrapper that was not given it) is `fallback`,
 * Infinity no bound; anything else but a positive number is refused where
 * the stream (or parser) is made. Taken as it came, NaN bounded nothing (no
 * length is greater) and 0, undefined or Infinity timed every stream out at
 * once (setTimeout's 1 ms), reopening it for ever.
 */
function positiveBound(name, value, fallback) {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value > 0)) {
    throw new RangeError(`${name} must be a positive number (Infinity for no bound), not ${String(value)}`);
  }
  return value;
}

/**
 * A reconnect delay given as an option (`minReconnectMs`, `maxReconnectMs`):
 * `undefined` is `fallback`; anything else but a number from 0 to
 * MAX_TIMER_MS is refused where the stream is made. Taken as it came,
 * undefined made every delay NaN, and NaN, Infinity or a delay past
 * MAX_TIMER_MS is 1 ms to setTimeout: a refused stream asked again at once,
 * for ever.
 */
function delayOption(name, value, fallback) {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value >= 0 && value <= MAX_TIMER_MS)) {
    throw new RangeError(`${name} must be a number of ms from 0 to ${MAX_TIMER_MS}, not ${String(value)}`);
  }
  return value;
}

/** The name of the stream's last event when its read ends. */
export const END_EVENT = 'end';

/** The name of the event that ends the stream's start (the snapshot or replay, or nothing). */
export const SYNCED_EVENT = 'synced';

/**
 * The name of the keep-alive event the eventsource transport asks for
 * (`?ping=event`; the server's default ping is a comment, which an
 * EventSource never shows): its only use is that it came.
 */
export const PING_EVENT = 'ping';

/**
 * Characters of one event: bounds the memory a broken or hostile server (or
 * proxy) can make the client hold; past it the stream ends with a SyncdError
 * `message_too_large`. Twice the server's default SERVICE_MAX_CRDT_BYTES
 * (64 MiB, syncd/quotas.py DEFAULT_MAX_CRDT_BYTES), 128 Mi: a snapshot event
 * is its state in base64, 4 characters per 3 bytes, and the state may pass
 * the limit (a Yjs delete-only update by a sixteenth of it, a Yjs document's
 * waiting updates listed beside it), so half as much again is left for
 * those. At the limit's bytes a 63 MiB orset the server held (an 84 Mi
 * character snapshot) ended every stream of it. A server with a larger
 * SERVICE_MAX_CRDT_BYTES needs `maxEventChars` set to match.
 */
export const MAX_EVENT_CHARS = 128 * 1024 * 1024;

/** The error of an event past its parser's bound: reopening would only fetch it again. */
function eventTooLarge(max) {
  return new SyncdError('message_too_large', `an SSE event is longer than ${max} characters`);
}

/** A line end of SSE: CRLF, CR or LF. */
const LINE_END = /\r\n|\r|\n/g;

/**
 * Split an SSE text stream into events. Feed text chunks: `events()` returns
 * each complete event as `{event, data}` (`event` is `'message'` unless an
 * `event:` line named it); `feed()` only the data of the unnamed ones, the
 * deltas. Comments (`: ping`) are skipped, an event without data is not
 * dispatched (the SSE rules).
 *
 * A chunk may end anywhere: in a line (its start is kept as pieces, joined
 * once the line ends, so a large event in small chunks is not scanned or
 * copied again at every chunk), or between the CR and the LF of a CRLF (the
 * LF starting the next chunk is that line end's, not a blank line).
 */
export class SseParser {
  /** @param {number} [maxEventChars] the longest event taken (SyncdError `message_too_large` past it; Infinity for none) */
  constructor(maxEventChars) {
    this._max = positiveBound('maxEventChars', maxEventChars, MAX_EVENT_CHARS);
    /** The unfinished line's pieces, and their length. */
    this._partial = [];
    this._partialChars = 0;
    /** Characters of the event's data lines so far. */
    this._dataChars = 0;
    /** The last chunk ended with a CR: an LF starting the next one belongs to it. */
    this._skipLf = false;
    this._data = [];
    this._event = '';
    /**
     * The SyncdError `message_too_large` of the event past the bound, once
     * met: thrown by every later call (the parser takes nothing more). When
     * the chunk that held it completed other events before it, those were
     * returned first and this is the only news of it: a reader checks it
     * once it has handled them, rather than wait for another chunk.
     */
    this.error = null;
  }

  /**
   * The events `chunk` completes. An event past the bound throws: at once
   * when `chunk` completed none before it, else at the next call (`error`),
   * after these are returned. They were whole events, and one chunk may hold
   * several before an oversize one (a batch's deltas, read at once): thrown
   * at once, they were lost with it.
   */
  events(chunk) {
    if (this.error !== null) throw this.error;
    const events = [];
    try {
      this._events(chunk, events);
    } catch (err) {
      if (err?.code !== 'message_too_large') throw err;
      this.error = err;
      if (events.length === 0) throw err;
    }
    return events;
  }

  _events(chunk, events) {
    let pos = 0;
    if (this._skipLf && chunk.length > 0) {
      this._skipLf = false;
      if (chunk.charCodeAt(0) === 10) pos = 1;
    }
    LINE_END.lastIndex = pos;
    let m;
    while ((m = LINE_END.exec(chunk)) !== null) {
      let line = chunk.slice(pos, m.index);
      if (this._partial.length) {
        this._partial.push(line);
        line = this._partial.join('');
        this._partial = [];
        this._partialChars = 0;
      }
      pos = LINE_END.lastIndex;
      if (pos === chunk.length && m[0] === '\r') this._skipLf = true;
      this._line(line, events);
    }
    if (pos < chunk.length) {
      this._partial.push(chunk.slice(pos));
      this._partialChars += chunk.length - pos;
      if (this._partialChars + this._dataChars > this._max) throw eventTooLarge(this._max);
    }
  }

  _line(line, events) {
    if (line === '') {
      if (this._data.length) events.push({ event: this._event || 'message', data: this._data.join('\n') });
      this._data = [];
      this._dataChars = 0;
      this._event = '';
    } else if (line.startsWith(':')) {
      return;
    } else if (line.startsWith('data:')) {
      const value = line.slice(line[5] === ' ' ? 6 : 5);
      this._data.push(value);
      this._dataChars += value.length + 1;
      if (this._dataChars > this._max) throw eventTooLarge(this._max);
    } else if (line.startsWith('event:')) {
      this._event = line.slice(line[6] === ' ' ? 7 : 6);
    }
  }

  feed(chunk) {
    return this.events(chunk)
      .filter((e) => e.event === 'message')
      .map((e) => e.data);
  }
}

/** The error an `end` event's data (`{"error", "message"}`) stands for. */
export function endError(data) {
  let body;
  try {
    body = JSON.parse(data);
  } catch {
    body = null;
  }
  if (body === null || typeof body !== 'object' || typeof body.error !== 'string') {
    return new SyncdError('bad_event', `an end event without an error: ${String(data).slice(0, 200)}`);
  }
  return serviceError(body.error, String(body.message ?? ''), { body });
}

/**
 * A refusal that asking again cannot change: any 4xx but 408 (timeout) and
 * 429 (rate limit), as the Python client's streams judge it. A 5xx and a
 * failed connection are retried.
 */
function isFinal(status) {
  return status >= 400 && status < 500 && status !== 408 && status !== 429;
}

export class EventStream extends Emitter {
  /**
   * @param {{baseUrl: string, token: string | (() => string | Promise<string>), namespace: string, fetch?: typeof fetch, EventSource?: unknown}} config
   * @param {string} id
   * @param {{transport?: 'auto' | 'eventsource' | 'fetch', replica?: boolean, minReconnectMs?: number, maxReconnectMs?: number}} [options]
   */
  constructor(config, id, options = {}) {
    super();
    this.config = normalizeConfig(config);
    // An id with no path is refused here, as SyncSocket.subscribe refuses it:
    // at the first request it was a TypeError retried at every backoff, for ever.
    crdtPath(this.config, id);
    this.options = {
      ...options,
      minReconnectMs: delayOption('minReconnectMs', options.minReconnectMs, 100),
      maxReconnectMs: delayOption('maxReconnectMs', options.maxReconnectMs, 5000),
      readTimeoutMs: positiveBound('readTimeoutMs', options.readTimeoutMs, READ_TIMEOUT_MS),
      maxEventChars: positiveBound('maxEventChars', options.maxEventChars, MAX_EVENT_CHARS),
    };
    const ES = options.EventSource ?? config.EventSource ?? globalThis.EventSource;
    const transport = options.transport ?? 'auto';
    const canFetch = typeof (config.fetch ?? globalThis.fetch) === 'function';
    this.transport = transport === 'auto' ? (canFetch || typeof ES !== 'function' ? 'fetch' : 'eventsource') : transport;
    if (this.transport === 'eventsource' && typeof ES !== 'function') {
      throw new TypeError('no EventSource implementation: pass options.EventSource or use transport "fetch"');
    }
    this._ES = ES;
    this._fetch = config.fetch ?? globalThis.fetch?.bind(globalThis);
    this.subscription = new Subscription(id, {
      replica: options.replica, // default: one, but none of a Yjs document (Subscription)
      // Resync on SSE: reopen the stream (with since, unless starting over).
      resync: (sub, fresh) => {
        if (fresh) {
          sub.seq = 0;
          sub.epoch = null;
        }
        this._restart();
      },
    });
    this.state = 'connecting';
    this._attempt = 0;
    this._source = null;
    this._abort = null;
    this._timer = null;
    /** The stream's silence timeout (see READ_TIMEOUT_MS). */
    this._silentTimer = null;
    /** The error _fail() stops the stream with, while listeners hear of it. */
    this._stopping = null;
    this._open();
  }

  /** The stream's URL; with `token` (EventSource's, which sends no header), pings as events too. */
  _url(token) {
    const url = new URL(this.config.baseUrl + crdtPath(this.config, this.subscription.id) + '/events');
    const resume = this.subscription.resumeFields();
    if (resume.since !== undefined) {
      url.searchParams.set('since', String(resume.since));
      url.searchParams.set('epoch', resume.epoch);
    }
    if (token !== undefined) {
      url.searchParams.set('token', token);
      url.searchParams.set('ping', 'event');
    }
    return url.toString();
  }

  /**
   * Wait `readTimeoutMs` for more from the server, then call `onSilent`
   * (no wait past MAX_TIMER_MS: never). `heard()`, called on anything from
   * the server, moves the wait on: it only notes the time, and the timer,
   * when it fires early, waits the rest, so a stream of many events does not
   * set a timer for each.
   */
  _waitForMore(onSilent) {
    this._clearSilence();
    const wait = this.options.readTimeoutMs;
    if (wait > MAX_TIMER_MS) return () => {};
    let last = performance.now();
    const check = () => {
      const left = last + wait - performance.now();
      if (left > 0) {
        this._silentTimer = setTimeout(check, left);
        return;
      }
      this._silentTimer = null;
      onSilent();
    };
    this._silentTimer = setTimeout(check, wait);
    return () => {
      last = performance.now();
    };
  }

  _clearSilence() {
    clearTimeout(this._silentTimer);
    this._silentTimer = null;
  }

  /** The error a stream silent for readTimeoutMs is reopened for. */
  _silenceError() {
    return new SyncdError('timeout', `nothing from the event stream for ${this.options.readTimeoutMs} ms`);
  }

  _end(data) {
    const err = endError(data);
    if (err.code === 'token_expired' && typeof this.config.token === 'function') {
      // A fresh token may be had: reconnect with it, resuming where we were.
      this.emit('disconnect', err);
      this._restart();
      return;
    }
    this._fail(err);
  }

  /**
   * Stop for good with `err`, reported first as an `error`: a close() from a
   * listener of it (without a reason) closes for `err` too, not for a
   * SyncdError `closed`.
   */
  _fail(err) {
    this._stopping = err;
    this.emit('error', err);
    this.close(err);
  }

  _synced(data) {
    let message;
    try {
      message = decodeSseData(data);
    } catch (err) {
      this.emit('error', new SyncdError('bad_event', `undecodable event: ${err.message}`));
      return;
    }
    this.subscription.handleSynced(message);
  }

  _deliver(data) {
    let delta;
    try {
      delta = decodeSseData(data);
    } catch (err) {
      this.emit('error', new SyncdError('bad_event', `undecodable event: ${err.message}`));
      return;
    }
    this._attempt = 0;
    try {
      this.subscription.handleDelta(delta);
    } catch (err) {
      this.emit('error', err);
      this.subscription.seq = 0;
      this.subscription.epoch = null;
      this._restart();
    }
  }

  async _open() {
    this._timer = null;
    let token;
    try {
      token = await currentToken(this.config);
    } catch (err) {
      // Closed while the token was being had: nothing to report or retry.
      if (this.state === 'closed') return;
      if (err instanceof TokenExpiredError || err instanceof TokenParseError) {
        this._fail(err);
        return;
      }
      this._retry(err);
      return;
    }
    if (this.state === 'closed') return;
    this.subscription.disconnected();
    if (this.transport === 'eventsource') this._openEventSource(token);
    else this._openFetch(token);
  }

  _openEventSource(token) {
    const source = new this._ES(this._url(token));
    this._source = source;
    // The open, every event and the pings asked for (the URL's ping=event)
    // move the wait on; silence closes the source and reconnects, as a
    // failed connection does. An EventSource never tells of a connection
    // that died on the way: it waits on it for ever.
    const heard = this._waitForMore(() => {
      if (this._source !== source) return;
      this._stop();
      this._retry(this._silenceError());
    });
    source.onopen = () => {
      heard();
      this._setState('open');
    };
    source.onmessage = (event) => {
      heard();
      this._deliver(event.data);
    };
    source.addEventListener(END_EVENT, (event) => {
      if (this._source === source) this._end(event.data);
    });
    source.addEventListener(SYNCED_EVENT, (event) => {
      if (this._source !== source) return;
      heard();
      this._synced(event.data);
    });
    source.addEventListener(PING_EVENT, () => {
      if (this._source === source) heard();
    });
    source.onerror = () => {
      if (this._source !== source) return;
      this._clearSilence();
      source.close();
      this._source = null;
      this._retry(new SyncdError('connection_lost', 'event stream closed'));
    };
  }

  async _openFetch(token) {
    const abort = new AbortController();
    this._abort = abort;
    // Anything from the server (a ping comment too) moves the wait on;
    // its end aborts the request, taken below as a lost connection. (_stop()
    // clears it with the request.)
    let timedOut = false;
    const heard = this._waitForMore(() => {
      if (this._abort !== abort) return;
      timedOut = true;
      abort.abort();
    });
    try {
      const response = await this._fetch(this._url(), {
        headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' },
        signal: abort.signal,
      });
      if (!response.ok) {
        let body = null;
        try {
          body = await response.json();
        } catch {
          // not JSON
        }
        throw serviceError(body?.error ?? `http_${response.status}`, body?.message ?? `HTTP ${response.status}`, {
          status: response.status,
          retryAfter: retryAfterSeconds(response.headers.get('retry-after')),
          body,
        });
      }
      this._setState('open');
      const parser = new SseParser(this.options.maxEventChars);
      const decoder = new TextDecoder();
      const reader = response.body.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        if (this._abort !== abort) return;
        heard();
        for (const { event, data } of parser.events(decoder.decode(value, { stream: true }))) {
          // A listener closed or restarted the stream: the rest of the chunk is the old stream's.
          if (this._abort !== abort) return;
          if (event === 'message') this._deliver(data);
          else if (event === SYNCED_EVENT) this._synced(data);
          else if (event === END_EVENT) {
            this._end(data);
            return;
          }
        }
        // An event past the bound, behind the events just delivered.
        if (parser.error !== null) throw parser.error;
      }
      throw new SyncdError('connection_lost', 'event stream ended');
    } catch (err) {
      if (this._abort !== abort || this.state === 'closed') return;
      this._abort = null;
      // The answer may still be coming (an event past the bound): no more of it.
      abort.abort();
      if (err instanceof SyncdError && (isFinal(err.status) || err.code === 'message_too_large')) {
        this._fail(err);
        return;
      }
      this._retry(timedOut ? this._silenceError() : err);
    } finally {
      if (this._abort === abort || this._abort === null) this._clearSilence();
    }
  }

  _setState(state) {
    if (this.state === state) return;
    this.state = state;
    this.emit('status', state);
  }

  _stop() {
    this._clearSilence();
    if (this._source) {
      this._source.onerror = this._source.onmessage = this._source.onopen = null;
      this._source.close();
      this._source = null;
    }
    if (this._abort) {
      const abort = this._abort;
      this._abort = null;
      abort.abort();
    }
  }

  _restart() {
    if (this.state === 'closed') return;
    this._stop();
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._open(), 0);
  }

  _retry(err) {
    if (this.state === 'closed') return;
    this._setState('connecting');
    this.emit('disconnect', err);
    // A status or disconnect listener closed the stream: no reconnect.
    if (this.state === 'closed') return;
    const base = Math.min(this.options.maxReconnectMs, this.options.minReconnectMs * 2 ** this._attempt);
    this._attempt = Math.min(this._attempt + 1, 30);
    let delay = base / 2 + Math.random() * (base / 2);
    // A refusal with `Retry-After` (a 429 to the fetch transport; EventSource
    // never sees the status): knocking sooner would only be refused again.
    const retryAfter = err?.retryAfter;
    if (typeof retryAfter === 'number' && Number.isFinite(retryAfter)) {
      delay = Math.max(delay, Math.min(retryAfter * 1000, RETRY_AFTER_MAX_MS));
    }
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._open(), delay);
  }

  /** Close for good: no reconnect; the subscription ends (`close`) with `reason` or a SyncdError `closed`. */
  close(reason) {
    if (this.state === 'closed') return;
    this._setState('closed');
    clearTimeout(this._timer);
    this._stop();
    const why = reason instanceof Error ? reason : this._stopping;
    this.subscription.end(why ?? new SyncdError('closed', 'stream was closed'));
  }
}
