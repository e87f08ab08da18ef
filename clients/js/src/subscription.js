// One followed CRDT: its position in the delta stream, an optional local
// replica, and events. Transport-agnostic: the WebSocket and SSE transports
// feed it deltas and it tells them when to resubscribe.

import { Emitter } from './emitter.js';
import { advance, classifyDelta, resumeFields } from './stream.js';
import { createReplica, hasReplica, noReplicaError, typeForId } from './replicas.js';

/** The id prefix of a Yjs document, of which this client keeps no replica. */
const YDOC_PREFIX = 'yd:';

export class Subscription extends Emitter {
  /**
   * @param {string} id
   * @param {{replica?: boolean, resync: (sub: Subscription, fresh: boolean) => void}} options
   *   `replica`: keep a local replica (default: true, but none of a Yjs document;
   *   true for a `yd:` id throws a SyncdError `no_replica`)
   */
  constructor(id, { replica, resync }) {
    super();
    // Refused here, not at the first snapshot: asked for, it could never be.
    if (replica === true && id.startsWith(YDOC_PREFIX)) throw noReplicaError(id);
    this.id = id;
    this.type = typeForId(id);
    this.seq = 0;
    this.epoch = null;
    /**
     * Whether this subscription's start (a snapshot, the replay of what it
     * missed, or nothing when it was up to date) has all arrived since it was
     * (re)subscribed: the server ends every start with a `synced` message
     * (docs/protocol.md#resuming). False from a disconnect, or a gap (which
     * resubscribes), until then; each change to true emits `synced`.
     */
    this.synced = false;
    this.replica = replica === false ? undefined : null;
    this._wantReplica = replica !== false;
    /** Asked for explicitly: an id that turns out a ydoc is then an error (once). */
    this._askedReplica = replica === true;
    this._toldNoReplica = false;
    this._resync = resync;
    this._resyncing = false;
    this.closed = false;
  }

  /**
   * The read view of the local replica (`{value, ...}`), or null before the
   * first snapshot / when absent. A copy, the caller's to change: the
   * replica's view holds the values it keeps (a register's value, a set's
   * elements, a node's data).
   */
  view(nowMs) {
    return this.replica ? structuredClone(this.replica.view(nowMs)) : null;
  }

  /** The plain value (the view's `value`), or null. */
  value(nowMs) {
    return this.view(nowMs)?.value ?? null;
  }

  /** The fields a (re)subscribe message carries to resume. */
  resumeFields() {
    return resumeFields({ seq: this.seq, epoch: this.epoch });
  }

  /** Called by the transport when the connection is gone: the next delta must be a snapshot or replay. */
  disconnected() {
    this.synced = false;
    this._resyncing = false;
  }

  /**
   * The server's `synced` message (`{kind, ns, id, seq, epoch}`) ended the
   * start: `synced` becomes true (and `synced` is emitted) if it was false.
   * Ignored while a resync is under way (its own start ends with another),
   * or when it is not at this subscription's position (a delta of the start
   * could not be taken).
   */
  handleSynced(message) {
    if (this._resyncing) return;
    if (message.seq !== this.seq || (message.epoch ?? null) !== this.epoch) return;
    this.markSynced();
  }

  /** The start is all in: `synced` becomes true (and `synced` is emitted) if it was false. */
  markSynced() {
    if (this.synced || this.closed) return;
    this.synced = true;
    this.emit('synced');
  }

  /** Feed one delta (snapshot, op or deleted) from the transport. */
  handleDelta(delta) {
    if (this.closed) return;
    const pos = { seq: this.seq, epoch: this.epoch };
    const verdict = classifyDelta(pos, delta);
    if (verdict === 'duplicate') return;
    if (verdict === 'gap' || verdict === 'new_life') {
      if (!this._resyncing) {
        this._resyncing = true;
        // Behind, and resubscribed: not synced until that start is in.
        this.synced = false;
        this.emit('gap', { have: this.seq, got: delta.seq, verdict });
        this._resync(this, verdict === 'new_life');
      }
      return;
    }
    this._resyncing = false;
    const next = advance(pos, delta, verdict);
    this.seq = next.seq;
    this.epoch = next.epoch;
    if (delta.type) this.type = delta.type;
    if (this._wantReplica) {
      // The replica keeps its own copy of what it takes from the delta (it
      // holds on to the values in states and ops), so the listeners given
      // the delta below may change it.
      if (verdict === 'snapshot') {
        this.replica = this._newReplica(delta.state ?? null);
      } else if (verdict === 'deleted') {
        this.replica = this._newReplica(null);
      } else {
        if (verdict === 'first' || !this.replica) this.replica = this._newReplica(null);
        if (this.replica) this.replica.applyDelta(structuredClone(delta.op));
      }
    }
    this.emit('delta', delta, verdict);
    this.emit('change', { delta, verdict, seq: this.seq, epoch: this.epoch });
  }

  /**
   * A replica of this id's type from `state`, or null: while the type is
   * unknown, and for a Yjs document (its deltas are passed on alone, to be
   * applied to a Y.Doc). Throwing there instead made the transports resync
   * for ever: every snapshot threw again.
   */
  _newReplica(state) {
    if (!this.type) return null;
    if (hasReplica(this.type)) return createReplica(this.type, structuredClone(state));
    if (this._askedReplica && !this._toldNoReplica) {
      this._toldNoReplica = true;
      this.emit('error', noReplicaError(this.id, this.type));
    }
    return null;
  }

  /**
   * Called by the transport when this subscription gets no more deltas: its
   * socket or stream was closed (by close(), or for good by the server), or
   * it was unsubscribed. `closed` becomes true and `synced` false, and
   * `close` is emitted once with `reason` (a SyncdError `closed`, or the
   * error that stopped the transport), so nothing waits on it for ever.
   */
  end(reason) {
    if (this.closed) return;
    this.closed = true;
    this.synced = false;
    this._resyncing = false;
    this.emit('close', reason);
  }

  /** The transport reported an error for this id (e.g. forbidden). */
  handleError(error) {
    this.emit('error', error);
  }
}
