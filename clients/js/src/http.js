// HTTP access (docs/http-api.md#routes): reads, listing, ops for every type, delete,
// and the caller's token. Any fetch implementation works (browsers, Node 18+,
// or one given in the config).

import { SyncdError, serviceError } from './errors.js';
import { crdtPath, currentToken, normalizeConfig, nsPath } from './config.js';

/**
 * Seconds to wait from a `Retry-After` header: delay-seconds or an HTTP date
 * (RFC 9110 10.2.3; proxies send dates); undefined when absent or unreadable.
 */
export function retryAfterSeconds(header, now = Date.now()) {
  if (header === null || header === undefined || header.trim() === '') return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(header);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - now) / 1000);
}

/**
 * The default `timeoutMs` of HTTP calls: how long the server may leave a
 * request without a word (no answer yet, or nothing more of it), as the
 * Python client's DEFAULT_TIMEOUT_S. An op is acknowledged in milliseconds;
 * ten seconds means the service is stuck.
 */
export const HTTP_TIMEOUT_MS = 10_000;

/** The answer's body as text, read under `watch` (re-armed at every chunk). */
async function readText(response, watch) {
  if (!response.body) return response.text();
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text + decoder.decode();
    watch();
    text += decoder.decode(value, { stream: true });
  }
}

export class HttpApi {
  /** @param {{baseUrl: string, token: string | (() => string | Promise<string>), namespace: string, fetch?: typeof fetch, timeoutMs?: number}} config */
  constructor(config) {
    this.config = normalizeConfig(config);
    this._fetch = config.fetch ?? globalThis.fetch?.bind(globalThis);
    if (typeof this._fetch !== 'function') throw new TypeError('no fetch implementation: pass config.fetch');
  }

  /** A raw request: the parsed JSON answer, or SyncdError for a non-2xx status. */
  async request(method, path, { body, query, headers } = {}) {
    const token = await currentToken(this.config);
    let url = this.config.baseUrl + path;
    if (query) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) params.set(k, String(v));
      const qs = params.toString();
      if (qs) url += `?${qs}`;
    }
    const init = { method, headers: { authorization: `Bearer ${token}`, ...headers } };
    if (body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    // No word from the server for timeoutMs (before the answer, or between
    // its chunks) aborts the request: fetch itself waits for ever in a browser.
    const timeoutMs = this.config.timeoutMs ?? HTTP_TIMEOUT_MS;
    const abort = new AbortController();
    let timer = null;
    const watch = () => {
      clearTimeout(timer);
      timer = setTimeout(() => abort.abort(), timeoutMs);
    };
    init.signal = abort.signal;
    let response;
    let text;
    try {
      watch();
      response = await this._fetch(url, init);
      watch();
      text = await readText(response, watch);
    } catch (err) {
      if (abort.signal.aborted) {
        throw new SyncdError('timeout', `no answer from the service within ${timeoutMs} ms: ${method} ${path}`, { status: 0, cause: err });
      }
      // fetch rejects with a bare TypeError ("fetch failed") when the service
      // cannot be reached or the connection drops: a SyncdError like the rest,
      // status 0 (no answer), so callers branch on `code` alone.
      throw new SyncdError('unavailable', `the service could not be reached: ${method} ${path}: ${err?.cause?.code ?? err?.message ?? err}`, {
        status: 0,
        cause: err,
      });
    } finally {
      clearTimeout(timer);
    }
    let parsed = null;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = text;
      }
    }
    if (!response.ok) {
      throw serviceError(
        typeof parsed?.error === 'string' ? parsed.error : `http_${response.status}`,
        typeof parsed?.message === 'string' ? parsed.message : `HTTP ${response.status}`,
        { status: response.status, retryAfter: retryAfterSeconds(response.headers.get('retry-after')), body: parsed },
      );
    }
    return parsed;
  }

  /**
   * The state of a CRDT (docs/data-model.md#reading), or null when it does not exist.
   * `{format: 'crdt'}` asks for the full mergeable state.
   */
  async read(id, { format } = {}) {
    try {
      return await this.request('GET', crdtPath(this.config, id), { query: { format } });
    } catch (err) {
      if (err instanceof SyncdError && err.status === 404) return null;
      throw err;
    }
  }

  /**
   * One root type of a Yjs document as JSON (docs/data-model.md#reading):
   * `{id, type, seq, epoch, root, as, value}`, `as` one of text (the default),
   * map, array, xml; `{at}` reads it as of a version. Only `yd:` ids (409
   * `type_mismatch` otherwise); 404 for an unknown document.
   */
  readRoot(id, root, { as, at } = {}) {
    return this.request('GET', crdtPath(this.config, id), { query: { root, as, at } });
  }

  /** One page of `{crdts: [{id, type, seq}], next}`. */
  list({ prefix, limit, cursor } = {}) {
    return this.request('GET', `${nsPath(this.config)}/crdts`, { query: { prefix, limit, cursor } });
  }

  /**
   * Apply one op or an array of ops (all or none): `{ok, seq, applied, ...}`.
   * `{returnState: true}` adds the new state to the answer; `{origin}` gives
   * every op that names none of its own that origin (docs/data-model.md#origins).
   */
  apply(id, op, { returnState = false, origin } = {}) {
    return this.request('POST', `${crdtPath(this.config, id)}/ops`, {
      body: op,
      query: { return: returnState ? 'state' : undefined, origin },
    });
  }

  /**
   * Retained ops, newest first (docs/http-api.md#history-and-restore):
   * `{seq, oldest, ops: [{seq, client_id, ts, op, origin?}], next}`; pass `next`
   * as `before`. `clientId` and/or `origin`: only that writer's ops.
   */
  history(id, { before, limit, clientId, origin } = {}) {
    return this.request('GET', `${crdtPath(this.config, id)}/history`, {
      query: { before, limit, client_id: clientId, origin },
    });
  }

  /**
   * The state right after op `seq`; SyncdError 410 `history_expired`
   * (`err.body.oldest`) when that is no longer kept. `{format: 'crdt'}` for the full state.
   */
  at(id, seq, { format } = {}) {
    return this.request('GET', crdtPath(this.config, id), { query: { at: seq, format } });
  }

  /**
   * Make the value what it was at `seq`, by ordinary ops: `{ok, seq, applied, restored}`.
   * 409 `not_restorable` for gcounter and presence; with `opId` a repeat answers as the first.
   */
  restore(id, seq, { opId } = {}) {
    const body = { seq };
    if (opId !== undefined && opId !== null) body.op_id = opId;
    return this.request('POST', `${crdtPath(this.config, id)}/restore`, { body });
  }

  /**
   * Take back one writer's ops (docs/revert.md): `{ok, seq, applied, matched,
   * since_seq, until_seq}`. Name the writer by `clientId`, `origin` or both;
   * 409 `not_revertible` for gcounter and presence; with `opId` a repeat answers as the first.
   */
  revert(id, { clientId, origin, sinceSeq, untilSeq, opId } = {}) {
    // null is an absent option here, as in the Python client: the server
    // refuses null as a field's value (400 naming it).
    if ((clientId === undefined || clientId === null) && (origin === undefined || origin === null)) {
      throw new TypeError('a revert names whose ops to take back: clientId, origin or both');
    }
    const fields = { client_id: clientId, origin, since_seq: sinceSeq, until_seq: untilSeq, op_id: opId };
    const body = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null));
    return this.request('POST', `${crdtPath(this.config, id)}/revert`, { body });
  }

  /** Delete a CRDT (namespace admin). */
  async deleteCrdt(id) {
    await this.request('DELETE', crdtPath(this.config, id));
  }

  /** The decoded claims of the configured token, as the server sees them. */
  tokenInfo() {
    return this.request('GET', `${nsPath(this.config)}/tokens/me`);
  }
}
