// Error types of the client. Every failure the server reports keeps its HTTP
// status and its error code (docs/http-api.md#status-codes), so callers branch on `code`.

export class SyncdError extends Error {
  /**
   * @param {string} code  the server's error code (or a client-side one)
   * @param {string} message
   * @param {{status?: number, retryAfter?: number, body?: unknown}} [extra]
   */
  constructor(code, message, extra = {}) {
    super(message);
    this.name = 'SyncdError';
    this.code = code;
    this.status = extra.status ?? 0;
    this.retryAfter = extra.retryAfter;
    this.body = extra.body;
  }
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
