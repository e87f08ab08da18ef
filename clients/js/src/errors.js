// Error types of the client. Every failure the server reports keeps its HTTP
// status and its error code (docs/http-api.md#status-codes), so callers branch on `code`.

export class SyncdError extends Error {
  /**
   * @param {string} code  the server's error code (or a client-side one)
   * @param {string} message
   * @param {{status?: number, retryAfter?: number, body?: unknown, cause?: unknown}} [extra]
   */
  constructor(code, message, extra = {}) {
    super(message, extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = 'SyncdError';
    this.code = code;
    this.status = extra.status ?? 0;
    this.retryAfter = extra.retryAfter;
    this.body = extra.body;
  }
}

/**
 * 401 `token_revoked`: an admin revoked the client's tokens issued before some
 * time (docs/permissions.md#revoking-tokens). Only the server knows, so there
 * is no local check; the same token will not work again, a newer one does.
 */
export class TokenRevokedError extends SyncdError {
  constructor(message = 'token revoked', extra = {}) {
    super('token_revoked', message, { status: 401, ...extra });
    this.name = 'TokenRevokedError';
  }
}

/**
 * HTTP status of each error code (docs/http-api.md#status-codes), for the
 * errors a socket or a stream reports without one: an op refused over the
 * WebSocket has the status the same refusal over HTTP has.
 */
const STATUS = {
  bad_request: 400,
  invalid_op: 400,
  invalid_id: 400,
  invalid_namespace: 400,
  unknown_type: 400,
  missing_token: 401,
  invalid_token: 401,
  token_expired: 401,
  token_revoked: 401,
  quota_exceeded: 403,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  type_mismatch: 409,
  cycle: 409,
  not_restorable: 409,
  not_revertible: 409,
  too_many_revocations: 409,
  history_expired: 410,
  crdt_too_large: 413,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  internal: 500,
  not_implemented: 501,
  unavailable: 503,
};

/** The error for a server's `{error, message}`: TokenRevokedError for `token_revoked`. */
export function serviceError(code, message, extra = {}) {
  const status = extra.status ?? (Object.hasOwn(STATUS, code) ? STATUS[code] : undefined);
  if (code === 'token_revoked') return new TokenRevokedError(message, { ...extra, status: status ?? 401 });
  return new SyncdError(code, message, { ...extra, status });
}

/** A token that cannot be decoded locally (not base64url + msgpack claims). */
export class TokenParseError extends Error {
  constructor(message) {
    super(message);
    this.name = 'TokenParseError';
    this.code = 'token_parse';
  }
}

/** A token whose `expires_at` has passed, found before any connection. */
export class TokenExpiredError extends Error {
  constructor(expiresAt, now) {
    super(`token expired at ${new Date(expiresAt).toISOString()} (now ${new Date(now).toISOString()})`);
    this.name = 'TokenExpiredError';
    this.code = 'token_expired';
    this.expiresAt = expiresAt;
  }
}
