// A SyncdClient checks its socket options (`options.socket`) when it is made:
// its SyncSocket is made at the first `client.socket`, subscribe() or op(),
// and a timer option out of bounds (d5b6cd0) was a RangeError only there,
// far from the mistake. Valid options (undefined for the default, Infinity
// for a timeout off, 0 for a reconnect delay) make a client, and no socket.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { fakeToken } from './helpers.js';

const config = {
  baseUrl: 'http://127.0.0.1:9',
  token: fakeToken({ namespace: 'ns1', client_id: 1, expires_at: Date.now() + 600_000, permissions: {} }),
  namespace: 'ns1',
  WebSocket: class {
    constructor() {
      throw new Error('no socket may be opened here');
    }
  },
};

test('a socket option out of bounds is a RangeError when the client is made', () => {
  const bad = {
    pingIntervalMs: [0, -1, Number.NaN, '15000', null],
    pongTimeoutMs: [0, Number.NaN, null],
    resyncTimeoutMs: [-5, '5000'],
    connectTimeoutMs: [0, null],
    minReconnectMs: [-1, Number.NaN, Infinity, 2 ** 31, null],
    maxReconnectMs: [Infinity, '100'],
  };
  for (const [name, values] of Object.entries(bad)) {
    for (const value of values) {
      assert.throws(
        () => new SyncdClient(config, { socket: { [name]: value } }),
        (err) => err instanceof RangeError && err.message.includes(name),
        `${name}: ${String(value)}`,
      );
    }
  }
});

test('valid socket options make a client and no socket', () => {
  const valid = [
    {},
    { pingIntervalMs: undefined, minReconnectMs: undefined },
    { pingIntervalMs: Infinity, pongTimeoutMs: Infinity, resyncTimeoutMs: Infinity, connectTimeoutMs: Infinity },
    { minReconnectMs: 0, maxReconnectMs: 2 ** 31 - 1, connectTimeoutMs: 2 ** 31 },
  ];
  for (const socket of valid) {
    const client = new SyncdClient(config, { socket });
    assert.equal(client._socket, null, JSON.stringify(socket));
    client.close();
  }
  new SyncdClient(config).close();
});
