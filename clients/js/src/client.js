// The client facade: `new SyncdClient({ baseUrl, token, namespace })`.
// HTTP reads and typed ops, a WebSocket for subscriptions and ops (opened on
// first use), SSE streams, and agent tools. The token is pre-validated here,
// so a bad or expired one fails before any connection.

import { normalizeConfig } from './config.js';
import { SyncdError } from './errors.js';
import { HttpApi } from './http.js';
import { ops } from './ops.js';
import { EventStream } from './sse.js';
import { decodeToken, validateToken } from './token.js';
import { createAgentTools } from './tools.js';
import { SyncSocket, socketOptions } from './ws.js';

export class SyncdClient {
  /**
   * @param {{baseUrl: string, token: string | (() => string | Promise<string>), namespace: string,
   *   fetch?: typeof fetch, WebSocket?: unknown, EventSource?: unknown}} config
   * @param {{socket?: object}} [options] options for the SyncSocket
   */
  constructor(config, options = {}) {
    this.config = normalizeConfig(config);
    if (typeof this.config.token === 'string') validateToken(this.config.token);
    this.http = new HttpApi(this.config);
    this._socketOptions = options.socket ?? {};
    // Checked now, though the socket is made at its first use: a bad timer
    // option is the caller's mistake, told where it was made, not at some
    // later subscribe() or op().
    socketOptions(this._socketOptions);
    this._socket = null;
    /** The SSE streams events() made and not closed yet: close() closes them. */
    this._streams = new Set();
    this._closed = false;
  }

  /** The claims of a string token (decoded locally, not verified). */
  get claims() {
    return typeof this.config.token === 'string' ? decodeToken(this.config.token) : null;
  }

  /**
   * The shared WebSocket, created on first use; after close() a closed one
   * (its subscribe() throws, its op() rejects), never a new connection.
   */
  get socket() {
    if (!this._socket) {
      this._socket = new SyncSocket(this.config, this._socketOptions);
      if (this._closed) this._socket.close();
    }
    return this._socket;
  }

  // -- HTTP ----------------------------------------------------------------------

  read(id, options) {
    return this.http.read(id, options);
  }
  readRoot(id, root, options) {
    return this.http.readRoot(id, root, options);
  }
  list(options) {
    return this.http.list(options);
  }
  apply(id, op, options) {
    return this.http.apply(id, op, options);
  }
  deleteCrdt(id) {
    return this.http.deleteCrdt(id);
  }
  history(id, options) {
    return this.http.history(id, options);
  }
  at(id, seq, options) {
    return this.http.at(id, seq, options);
  }
  restore(id, seq, options) {
    return this.http.restore(id, seq, options);
  }
  revert(id, options) {
    return this.http.revert(id, options);
  }
  tokenInfo() {
    return this.http.tokenInfo();
  }

  increment(id, amount, opts) {
    return this.apply(id, ops.increment(amount, opts));
  }
  decrement(id, amount, opts) {
    return this.apply(id, ops.decrement(amount, opts));
  }
  add(id, element, opts) {
    return this.apply(id, ops.add(element, opts));
  }
  remove(id, element, opts) {
    return this.apply(id, ops.remove(element, opts));
  }
  set(id, value, opts) {
    return this.apply(id, ops.set(value, opts));
  }
  updatePresence(id, data, opts) {
    return this.apply(id, ops.updatePresence(data, opts));
  }
  leavePresence(id, opts) {
    return this.apply(id, ops.leavePresence(opts));
  }
  insertAt(id, index, content, opts) {
    return this.apply(id, ops.insertAt(index, content, opts));
  }
  insertAfter(id, after, content, opts) {
    return this.apply(id, ops.insertAfter(after, content, opts));
  }
  deleteAt(id, index, count, opts) {
    return this.apply(id, ops.deleteAt(index, count, opts));
  }
  deleteIds(id, ids, opts) {
    return this.apply(id, ops.deleteIds(ids, opts));
  }
  addNode(id, nodeId, parent, opts) {
    return this.apply(id, ops.addNode(nodeId, parent, opts));
  }
  moveNode(id, nodeId, parent, opts) {
    return this.apply(id, ops.moveNode(nodeId, parent, opts));
  }
  updateNode(id, nodeId, data, opts) {
    return this.apply(id, ops.updateNode(nodeId, data, opts));
  }
  deleteNode(id, nodeId, opts) {
    return this.apply(id, ops.deleteNode(nodeId, opts));
  }

  // -- streams ---------------------------------------------------------------------

  /** Follow a CRDT over the WebSocket (see SyncSocket.subscribe). */
  subscribe(id, options) {
    return this.socket.subscribe(id, options);
  }

  /** Apply an op over the WebSocket; resolves with the ack. */
  send(id, op) {
    return this.socket.op(id, op);
  }

  /**
   * Follow a CRDT over SSE; returns the EventStream (its `subscription` holds
   * the replica), which close() closes. Throws a SyncdError `closed` after close().
   */
  events(id, options) {
    if (this._closed) {
      throw new SyncdError('closed', `cannot follow ${id}: the client was closed (use a new client)`);
    }
    const stream = new EventStream(this.config, id, options);
    this._streams.add(stream);
    // Forgotten once closed (by its owner or the server), so a long-lived client does not keep them.
    const off = stream.on('status', (state) => {
      if (state !== 'closed') return;
      this._streams.delete(stream);
      off();
    });
    return stream;
  }

  // -- agent tools ---------------------------------------------------------------

  /** `{definitions, execute(name, input)}` for `[crdtId, type]` pairs. */
  agentTools(crdts, options) {
    return createAgentTools(this.http, crdts, options);
  }

  /** Close the socket (see SyncSocket.close), even one not made yet, and every SSE stream, for good. */
  close() {
    this._closed = true;
    if (this._socket) this._socket.close();
    for (const stream of [...this._streams]) stream.close();
  }
}
