// The client configuration (docs/clients.md#configuration): `{ baseUrl, token, namespace }`.
// `token` may also be a function returning the token (or a promise of it),
// for tokens that are refreshed, such as the demo's short-lived ones.

import { validateToken } from './token.js';

const NAMESPACE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const CRDT_ID = /^[A-Za-z0-9._:~@+=-]{1,256}$/;

export function normalizeConfig(config) {
  if (config === null || typeof config !== 'object') throw new TypeError('config must be an object');
  const { baseUrl, token, namespace } = config;
  if (typeof baseUrl !== 'string' || !/^https?:\/\//.test(baseUrl)) {
    throw new TypeError('config.baseUrl must be an http:// or https:// URL');
  }
  if (typeof token !== 'string' && typeof token !== 'function') {
    throw new TypeError('config.token must be a string or a function returning one');
  }
  if (typeof namespace !== 'string' || !NAMESPACE.test(namespace)) {
    throw new TypeError('config.namespace must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}');
  }
  return { ...config, baseUrl: baseUrl.replace(/\/+$/, '') };
}

export function checkId(id) {
  if (typeof id !== 'string' || !CRDT_ID.test(id)) {
    throw new TypeError(`invalid CRDT id ${JSON.stringify(id)}: 1-256 of A-Z a-z 0-9 . _ : ~ @ + = -`);
  }
  return id;
}

/** The current token, pre-validated (TokenParseError / TokenExpiredError). */
export async function currentToken(config) {
  const token = typeof config.token === 'function' ? await config.token() : config.token;
  validateToken(token);
  return token;
}

export function nsPath(config) {
  return `/v1/namespaces/${encodeURIComponent(config.namespace)}`;
}

/** Ids that are dot segments: a WHATWG URL (fetch, EventSource) drops them, `%2E` spelled or not. */
const DOT_SEGMENTS = new Set(['.', '..']);

/**
 * The HTTP path of CRDT `id`. The valid ids "." and ".." have none a fetch
 * can send: "/crdts/./history" is "/crdts/history" to the URL parser, the
 * read of another CRDT. TypeError for those (the WebSocket takes them).
 */
export function crdtPath(config, id) {
  checkId(id);
  if (DOT_SEGMENTS.has(id)) {
    throw new TypeError(
      `CRDT id ${JSON.stringify(id)} cannot be a URL path segment (URLs drop "." and ".."): use the WebSocket (client.send, client.subscribe)`,
    );
  }
  return `${nsPath(config)}/crdts/${encodeURIComponent(id)}`;
}
