// Token pre-validation (docs/clients.md#token-pre-validation): decode the claims locally
// and report an unparseable token and an expired one as two distinct errors,
// before any connection is made. The signature is not (cannot be) checked
// here: that is the server's job.

import { decode } from '@msgpack/msgpack';
import { base64urlDecode } from './base64.js';
import { TokenExpiredError, TokenParseError } from './errors.js';

const SIGNATURE_BYTES = 64; // ed25519

/**
 * The claims of a token: `{namespace, client_id, expires_at, permissions}`.
 * Throws TokenParseError when the token is not `base64url(msgpack) . base64url(sig)`.
 */
export function decodeToken(token) {
  if (typeof token !== 'string' || token.length === 0) {
    throw new TokenParseError('token must be a non-empty string');
  }
  const parts = token.split('.');
  if (parts.length !== 2 || !parts[0] || !parts[1]) {
    throw new TokenParseError('token must be two base64url parts joined by "."');
  }
  let payload;
  let signature;
  try {
    payload = base64urlDecode(parts[0]);
    signature = base64urlDecode(parts[1]);
  } catch (err) {
    throw new TokenParseError(`token is not base64url: ${err.message}`);
  }
  if (signature.length !== SIGNATURE_BYTES) {
    throw new TokenParseError(`token signature must be ${SIGNATURE_BYTES} bytes, got ${signature.length}`);
  }
  let claims;
  try {
    claims = decode(payload);
  } catch (err) {
    throw new TokenParseError(`token claims are not msgpack: ${err.message}`);
  }
  if (claims === null || typeof claims !== 'object' || Array.isArray(claims)) {
    throw new TokenParseError('token claims must be a map');
  }
  if (typeof claims.namespace !== 'string' || !claims.namespace) {
    throw new TokenParseError('token claim namespace must be a non-empty string');
  }
  if (!Number.isSafeInteger(claims.client_id)) {
    throw new TokenParseError('token claim client_id must be an integer');
  }
  if (!Number.isSafeInteger(claims.expires_at)) {
    throw new TokenParseError('token claim expires_at must be an integer (ms)');
  }
  if (claims.permissions === null || typeof claims.permissions !== 'object') {
    throw new TokenParseError('token claim permissions must be a map');
  }
  return claims;
}

/**
 * Decode and check expiry: TokenParseError or TokenExpiredError, else the claims.
 * @param {string} token
 * @param {{now?: number}} [options] `now` in ms (default Date.now())
 */
export function validateToken(token, options = {}) {
  const claims = decodeToken(token);
  const now = options.now ?? Date.now();
  if (claims.expires_at <= now) throw new TokenExpiredError(claims.expires_at, now);
  return claims;
}
