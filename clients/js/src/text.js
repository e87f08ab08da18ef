// Collaborative text over an rga CRDT, without a DOM: local edits by index
// in, ops out, remote deltas in, the text to show out.
//
// Theory of operation
// -------------------
// What the user sees is the confirmed replica (every delta up to some seq)
// with the local edits the server has not confirmed yet laid over it. Each
// local edit is turned into an id-based op (insert `after` an element id,
// delete element `ids`), never an index op: an index means something else
// on a server that has meanwhile applied other people's edits, an id does not.
//
// New elements get local ids ("~1", "~2", ...) until the server names them.
// Edits go out one at a time, in order, so by the time an edit is sent every
// element it names has its real id. An insert is shown right after its
// `after` element, which is where the server puts it: its counter is higher
// than any element the server holds. Typing while an edit is in flight adds
// to the next queued insert, so a burst of keystrokes becomes one op.
//
// An edit is confirmed when its own delta arrives (matched by `op_id`, or by
// the seq of its ack); the delta's counter names the new elements, and the
// local ids become aliases of the real ones, so cursors held as ids survive.

import { Emitter } from './emitter.js';
import { formatId, RgaReplica } from './rga.js';

/**
 * Whether a surrogate pair starts at `i`: a high surrogate followed by a low
 * one. A lone surrogate is one code point on its own, as Array.from counts it.
 */
function pairAt(text, i) {
  const c = text.charCodeAt(i);
  if (c < 0xd800 || c > 0xdbff) return false;
  const next = text.charCodeAt(i + 1);
  return next >= 0xdc00 && next <= 0xdfff;
}

/** Code-point index of UTF-16 offset `offset` in `text` (textarea selections are UTF-16). */
export function codePointIndex(text, offset) {
  let n = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (pairAt(text, i)) i++;
    n++;
  }
  return n;
}

/** UTF-16 offset of code-point index `index` in `text`. */
export function utf16Offset(text, index) {
  let i = 0;
  for (let n = 0; n < index && i < text.length; n++) i += pairAt(text, i) ? 2 : 1;
  return i;
}

/**
 * The single edit that turns `before` into `after` (code-point indexes):
 * `{index, deleteCount, text}`, or null when they are equal. `cursor` (the
 * caret after the edit, a code-point index into `after`) settles ambiguous
 * cases such as typing "a" into "aa".
 */
export function diffText(before, after, cursor) {
  const a = Array.from(before);
  const b = Array.from(after);
  let suffix = 0;
  const maxSuffix = Math.min(a.length, b.length, cursor === undefined ? Infinity : b.length - cursor);
  while (suffix < maxSuffix && a[a.length - 1 - suffix] === b[b.length - 1 - suffix]) suffix++;
  let prefix = 0;
  const maxPrefix = Math.min(a.length, b.length) - suffix;
  while (prefix < maxPrefix && a[prefix] === b[prefix]) prefix++;
  const deleteCount = a.length - prefix - suffix;
  const text = b.slice(prefix, b.length - suffix).join('');
  if (!deleteCount && !text) return null;
  return { index: prefix, deleteCount, text };
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** Recent own inserts remembered to name elements when an ack comes after its delta. */
const RECENT_INSERTS = 256;

export class CollabText extends Emitter {
  /**
   * @param {{send: (op: object) => Promise<{seq: number, ids?: string[]}>, clientId?: number}} options
   *   `send` applies one op (over a SyncSocket or HTTP) and resolves with its answer.
   */
  constructor({ send, clientId }) {
    super();
    this._sendOp = send;
    this.clientId = clientId ?? null;
    this.replica = new RgaReplica();
    this.seq = 0;
    this.epoch = null;
    this._edits = [];
    this._alias = new Map();
    this._nextLocal = 1;
    this._nextOp = 1;
    this._prefix = Math.random().toString(36).slice(2, 10);
    this._recent = new Map();
    this._display = null;
    this._visibleKeys = this._computeVisible();
  }

  /** Follow a Subscription (from SyncSocket.subscribe or EventStream) of an rga id. */
  attach(subscription) {
    return subscription.on('delta', (delta, verdict) => this.receive(delta, verdict));
  }

  // -- the confirmed side --------------------------------------------------

  /** Feed one delta with the verdict of the subscription (snapshot / first / apply / deleted). */
  receive(delta, verdict) {
    const previous = this._visibleKeys;
    if (verdict === 'snapshot' || verdict === 'deleted' || verdict === 'first') {
      // Pending edits name elements of the life they were made in; a new life
      // (not the first one, which our own first insert may have started) voids them.
      const newLife =
        verdict === 'deleted' || (this.epoch !== null && (delta.epoch ?? null) !== this.epoch);
      this.replica = verdict === 'snapshot' ? RgaReplica.fromState(delta.state) : new RgaReplica();
      this.seq = verdict === 'snapshot' ? delta.seq : 0;
      this.epoch = verdict === 'deleted' ? null : (delta.epoch ?? null);
      if (newLife) this._dropEdits();
      if (verdict === 'first') this._applyOp(delta);
    } else if (verdict === 'apply') {
      this._applyOp(delta);
    } else {
      return;
    }
    this._resolve();
    this._changed(previous, false);
  }

  _applyOp(delta) {
    this.replica.applyDelta(delta.op);
    this.seq = delta.seq;
    if (delta.epoch) this.epoch = delta.epoch;
    const op = delta.op;
    if (op.op === 'insert') {
      const n = op.text !== undefined ? Array.from(op.text).length : op.values.length;
      this._recent.set(delta.seq, { client: op.client, counter: op.counter, n });
      if (this._recent.size > RECENT_INSERTS) this._recent.delete(this._recent.keys().next().value);
    }
    const first = this._edits[0];
    if (first && first.state !== 'queued' && delta.op_id !== undefined && delta.op_id === first.opId) {
      first.state = 'acked';
      first.seq = delta.seq;
    }
  }

  /** Retire confirmed edits from the front of the queue, then send the next one. */
  _resolve() {
    for (;;) {
      const edit = this._edits[0];
      if (!edit || edit.state !== 'acked' || this.seq < edit.seq) break;
      if (edit.kind === 'insert') {
        let ids = edit.ids;
        if (!ids) {
          const rec = this._recent.get(edit.seq);
          if (rec && rec.n === edit.lids.length) {
            ids = edit.lids.map((_, k) => formatId(rec.client, rec.counter + k));
          }
        }
        if (!ids || ids.some((id) => !this.replica.has(id))) {
          // The delta went by inside a snapshot: its elements cannot be named.
          this._dropEdits();
          this.emit('error', new Error('lost track of local edits after a resync; showing the server state'));
          break;
        }
        edit.lids.forEach((lid, k) => this._alias.set(lid, ids[k]));
      }
      this._edits.shift();
    }
    this._pump();
  }

  _dropEdits() {
    this._edits = [];
    this._display = null;
  }

  // -- the local side ----------------------------------------------------------

  /** The text shown: the replica with pending local edits laid over it. */
  get value() {
    return this._items()
      .filter((it) => !it.deleted)
      .map((it) => it.ch)
      .join('');
  }

  /** Visible length in code points. */
  get length() {
    return this._visibleKeys.length;
  }

  /** Local edits not yet confirmed by the server. */
  get pendingEdits() {
    return this._edits.length;
  }

  _real(key) {
    return this._alias.get(key) ?? key;
  }

  _items() {
    if (this._display) return this._display;
    const items = this.replica.elements.map((e) => ({
      key: formatId(e.client, e.counter),
      ch: e.value,
      deleted: e.deleted,
    }));
    const byKey = new Map(items.map((it) => [it.key, it]));
    for (const edit of this._edits) {
      if (edit.kind === 'insert') {
        let pos = 0;
        if (edit.after !== null) {
          const origin = byKey.get(this._real(edit.after));
          pos = origin ? items.indexOf(origin) + 1 : 0;
        }
        const fresh = edit.lids.map((lid, k) => ({ key: lid, ch: edit.chars[k], deleted: false }));
        items.splice(pos, 0, ...fresh);
        for (const it of fresh) byKey.set(it.key, it);
      } else {
        for (const key of edit.keys) {
          const it = byKey.get(this._real(key));
          if (it) it.deleted = true;
        }
      }
    }
    this._display = items;
    this._byKey = byKey;
    return items;
  }

  _computeVisible() {
    return this._items()
      .filter((it) => !it.deleted)
      .map((it) => it.key);
  }

  _changed(previous, local) {
    this._display = null;
    this._visibleKeys = this._computeVisible();
    const mapIndex = (index) => this._mapIndex(previous, index);
    this.emit('change', { local, value: this.value, mapIndex });
  }

  /** Where code-point index `index` of the previous text is now. */
  _mapIndex(previousKeys, index) {
    if (index <= 0) return 0;
    return this.indexOfRef(previousKeys[Math.min(index, previousKeys.length) - 1]);
  }

  /**
   * A stable reference to the caret position `index`: the id of the element
   * before it (null: the start). Survives remote edits; see indexOfRef.
   */
  refAt(index) {
    if (index <= 0) return null;
    const keys = this._visibleKeys;
    return this._real(keys[Math.min(index, keys.length) - 1]);
  }

  /**
   * Like refAt, but always a server element id (or null), for sharing with
   * others (presence cursors): pending local elements are skipped backwards.
   */
  sharedRefAt(index) {
    const items = this._items();
    let seen = 0;
    let last = null;
    for (const it of items) {
      if (seen >= index) break;
      const real = this._real(it.key);
      if (!real.startsWith('~')) last = real;
      if (!it.deleted) seen++;
    }
    return last;
  }

  /** The caret index of a reference made by refAt / sharedRefAt (by anyone). */
  indexOfRef(ref) {
    if (ref === null || ref === undefined) return 0;
    const items = this._items();
    const target = this._byKey.get(this._real(ref));
    if (!target) return 0;
    let visible = 0;
    for (const it of items) {
      if (!it.deleted) visible++;
      if (it === target) return it.deleted ? visible : visible;
    }
    return 0;
  }

  /**
   * A local edit at code-point `index`: delete `deleteCount` elements, then
   * insert `text` there. Shown at once, sent to the server in order.
   */
  edit(index, deleteCount, text = '') {
    const keys = this._visibleKeys;
    if (!Number.isInteger(index) || index < 0 || index > keys.length) {
      throw new RangeError(`index ${index} out of range 0..${keys.length}`);
    }
    if (!Number.isInteger(deleteCount) || deleteCount < 0 || index + deleteCount > keys.length) {
      throw new RangeError(`deleteCount ${deleteCount} out of range`);
    }
    const previous = keys;
    if (deleteCount > 0) {
      const doomed = keys.slice(index, index + deleteCount);
      const last = this._edits[this._edits.length - 1];
      if (last && last.kind === 'delete' && last.state === 'queued') last.keys.push(...doomed);
      else this._edits.push({ kind: 'delete', keys: doomed, state: 'queued' });
    }
    // UTF-8 (and so the server) cannot carry a lone surrogate: U+FFFD instead, as TextEncoder does.
    const chars = Array.from(text.replace(LONE_SURROGATE, '\ufffd'));
    if (chars.length) {
      const after = index > 0 ? keys[index - 1] : null;
      const lids = chars.map(() => `~${this._nextLocal++}`);
      const last = this._edits[this._edits.length - 1];
      if (last && last.kind === 'insert' && last.state === 'queued' && after !== null && last.lids[last.lids.length - 1] === after) {
        last.lids.push(...lids);
        last.chars.push(...chars);
      } else {
        this._edits.push({ kind: 'insert', after, lids, chars, state: 'queued' });
      }
    }
    if (deleteCount || chars.length) {
      this._changed(previous, true);
      this._pump();
    }
  }

  /** Make the text equal `value` by one edit (from a textarea's input event). */
  replace(value, cursor) {
    const change = diffText(this.value, value, cursor);
    if (change) this.edit(change.index, change.deleteCount, change.text);
    return change;
  }

  _pump() {
    const edit = this._edits[0];
    if (!edit || edit.state !== 'queued') return;
    edit.state = 'sent';
    edit.opId = `${this._prefix}-${this._nextOp++}`;
    let op;
    if (edit.kind === 'insert') {
      const after = edit.after === null ? null : this._real(edit.after);
      op = { op: 'insert', type: 'rga', after, text: edit.chars.join(''), op_id: edit.opId };
    } else {
      op = { op: 'delete', type: 'rga', ids: edit.keys.map((k) => this._real(k)), op_id: edit.opId };
    }
    this._sendOp(op).then(
      (answer) => {
        if (this._edits[0] !== edit) return;
        if (edit.state === 'sent') {
          edit.state = 'acked';
          edit.seq = answer.seq;
        }
        if (Array.isArray(answer.ids)) edit.ids = answer.ids;
        const previous = this._visibleKeys;
        this._resolve();
        this._changed(previous, false);
      },
      (err) => {
        if (this._edits[0] !== edit) return;
        // Refused (or the connection was closed for good): later edits may
        // build on this one, so they go too; the server's text is shown.
        const previous = this._visibleKeys;
        this._dropEdits();
        this._changed(previous, false);
        this.emit('error', err);
      },
    );
  }
}
