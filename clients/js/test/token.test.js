import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  decodeToken,
  SyncdClient,
  TokenExpiredError,
  TokenParseError,
  validateToken,
} from '../src/index.js';
import { base64urlDecode, base64urlEncode } from '../src/base64.js';
import { fakeToken, serverMissing, startServer } from './helpers.js';

const CLAIMS = {
  namespace: 'ns1',
  client_id: 42,
  expires_at: Date.now() + 60_000,
  permissions: { read: ['*'], write: ['gc:*'], admin: false },
};

describe('token pre-validation', () => {
  test('decodes the msgpack claims', () => {
    assert.deepEqual(decodeToken(fakeToken(CLAIMS)), CLAIMS);
    assert.deepEqual(validateToken(fakeToken(CLAIMS)), CLAIMS);
  });

  test('accepts padding on either part', () => {
    const [a, b] = fakeToken(CLAIMS).split('.');
    const pad = (s) => s + '='.repeat((4 - (s.length % 4)) % 4);
    assert.equal(decodeToken(`${pad(a)}.${pad(b)}`).client_id, 42);
  });

  test('an expired token is TokenExpiredError, before and at expiry', () => {
    const token = fakeToken({ ...CLAIMS, expires_at: 1000 });
    assert.throws(() => validateToken(token), TokenExpiredError);
    assert.throws(() => validateToken(token, { now: 1000 }), TokenExpiredError);
    assert.equal(validateToken(token, { now: 999 }).expires_at, 1000);
    // Expired is not a parse failure: the two are told apart.
    assert.throws(() => validateToken(token), (err) => !(err instanceof TokenParseError));
  });

  const bad = {
    empty: '',
    'not a string': 17,
    'no dot': 'abc',
    'three parts': `${fakeToken(CLAIMS)}.x`,
    'empty part': '.abc',
    'bad base64': 'a*b.c',
    'short signature': fakeToken(CLAIMS, 32),
    'not msgpack': `${base64urlEncode(new Uint8Array([0xc1]))}.${base64urlEncode(new Uint8Array(64))}`,
    'claims not a map': fakeToken([1, 2, 3]),
    'no namespace': fakeToken({ ...CLAIMS, namespace: undefined }),
    'client_id a string': fakeToken({ ...CLAIMS, client_id: '42' }),
    'expires_at missing': fakeToken({ ...CLAIMS, expires_at: undefined }),
    'permissions missing': fakeToken({ ...CLAIMS, permissions: null }),
  };
  for (const [name, token] of Object.entries(bad)) {
    test(`TokenParseError: ${name}`, () => {
      assert.throws(() => validateToken(token), TokenParseError);
    });
  }

  test('the client refuses a bad token before any connection', () => {
    let fetched = 0;
    const config = { baseUrl: 'http://127.0.0.1:9', namespace: 'ns1', fetch: () => fetched++ };
    assert.throws(() => new SyncdClient({ ...config, token: 'garbage' }), TokenParseError);
    assert.throws(
      () => new SyncdClient({ ...config, token: fakeToken({ ...CLAIMS, expires_at: 5 }) }),
      TokenExpiredError,
    );
    assert.equal(fetched, 0);
  });

  test('base64url round trip at every length', () => {
    for (let n = 0; n < 40; n++) {
      const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 37 + n) & 0xff);
      assert.deepEqual(base64urlDecode(base64urlEncode(bytes)), bytes);
    }
  });
});

describe('tokens from a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(() => server?.close());

  test('an issued token decodes to the claims the server reports', async () => {
    const token = await server.token({ clientId: 99, ttlMs: 60_000 });
    const claims = validateToken(token);
    const client = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
    const me = await client.tokenInfo();
    assert.equal(claims.client_id, 99);
    assert.equal(me.client_id, claims.client_id);
    assert.equal(me.expires_at, claims.expires_at);
    assert.deepEqual(me.permissions, claims.permissions);
  });

  test('a token that expires is refused locally with TokenExpiredError', async () => {
    const token = await server.token({ ttlMs: 1 });
    await new Promise((r) => setTimeout(r, 5));
    assert.throws(() => validateToken(token), TokenExpiredError);
    const client = new SyncdClient({ baseUrl: server.url, token: () => token, namespace: 'ns1' });
    await assert.rejects(client.read('gc:a'), TokenExpiredError);
  });

  test('a demo token decodes', async () => {
    const body = await (await fetch(`${server.url}/demo/token`)).json();
    assert.equal(validateToken(body.token).namespace, 'demo');
  });
});
