// Strict base64 decoding for both alphabets, the same in browsers and Node
// (no Buffer, no atob quirks): tokens use base64url (padding optional), SSE
// events standard base64 with padding (docs/permissions.md#token-format,
// docs/protocol.md#the-sse-stream).

const STD = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

function table(alphabet) {
  const t = new Int16Array(128).fill(-1);
  for (let i = 0; i < alphabet.length; i++) t[alphabet.charCodeAt(i)] = i;
  return t;
}
const STD_TABLE = table(STD);
const URL_TABLE = table(URL);

function decode(text, lookup) {
  if (typeof text !== 'string') throw new TypeError('base64: expected a string');
  let end = text.length;
  while (end > 0 && text[end - 1] === '=') end--;
  if (text.length - end > 2) throw new TypeError('base64: too much padding');
  if (end % 4 === 1) throw new TypeError('base64: bad length');
  if (text.length !== end && text.length % 4 !== 0) throw new TypeError('base64: bad padding');
  const out = new Uint8Array(Math.floor((end * 3) / 4));
  let bits = 0;
  let acc = 0;
  let o = 0;
  for (let i = 0; i < end; i++) {
    const c = text.charCodeAt(i);
    const v = c < 128 ? lookup[c] : -1;
    if (v < 0) throw new TypeError(`base64: invalid character at ${i}`);
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
  }
  return out;
}

/** base64url without or with padding -> bytes; throws TypeError on bad input. */
export function base64urlDecode(text) {
  return decode(text, URL_TABLE);
}

/** Standard base64 (RFC 4648 section 4) -> bytes; throws TypeError on bad input. */
export function base64Decode(text) {
  return decode(text, STD_TABLE);
}

/** bytes -> base64url without padding (tokens are written this way). */
export function base64urlEncode(bytes) {
  let out = '';
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    out += URL[n >> 18] + URL[(n >> 12) & 63] + URL[(n >> 6) & 63] + URL[n & 63];
  }
  if (i < bytes.length) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8);
    out += URL[n >> 18] + URL[(n >> 12) & 63];
    if (i + 1 < bytes.length) out += URL[(n >> 6) & 63];
  }
  return out;
}
