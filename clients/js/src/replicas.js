// Client replicas of every type: a snapshot's `state` (as `?format=crdt`)
// in, op deltas in (in seq order: the subscription guarantees it), the read
// view of docs/data-model.md#reading out. Each mirrors the server's type in syncd/crdt.

import { canonicalJson, compareCodePoints } from './canonical.js';
import { SyncdError } from './errors.js';
import { RgaReplica } from './rga.js';

const sum = (m) => Object.values(m).reduce((a, b) => a + b, 0);

function joinCount(map, client, count) {
  const key = String(client);
  if (!(map[key] >= count)) map[key] = count;
}

class GCounterReplica {
  constructor(state) {
    this.counts = { ...(state?.counts ?? {}) };
  }
  applyDelta(d) {
    joinCount(this.counts, d.client_id, d.count);
  }
  view() {
    return { value: sum(this.counts), counts: { ...this.counts } };
  }
}

class PNCounterReplica {
  constructor(state) {
    this.p = { ...(state?.p ?? {}) };
    this.n = { ...(state?.n ?? {}) };
  }
  applyDelta(d) {
    joinCount(d.op === 'increment' ? this.p : this.n, d.client_id, d.count);
  }
  view() {
    return { value: sum(this.p) - sum(this.n), p: { ...this.p }, n: { ...this.n } };
  }
}

const dotKey = (d) => `${d[0]}:${d[1]}`;

/** The form an element reads in: its smallest live dot's (client, then n), as syncd/crdt/orset.py. */
function smallestForm(tags) {
  let best = null;
  for (const tag of tags.values()) {
    const [d] = tag;
    if (best === null || d[0] < best[0][0] || (d[0] === best[0][0] && d[1] < best[0][1])) best = tag;
  }
  return best[1];
}

class ORSetReplica {
  constructor(state) {
    this.values = new Map(); // canonical JSON -> element as it reads (its smallest dot's form)
    this.tags = new Map(); // canonical JSON -> Map of dot key -> [dot, form] (its live dots)
    this.seen = new Set(); // dot keys seen (the causal context, kept flat)
    // Dots whose form is not their element's (concurrent adds in two forms);
    // every other dot keeps the element's, as in a state written before forms.
    const forms = new Map();
    for (const [c, n, form] of state?.forms ?? []) forms.set(dotKey([c, n]), form);
    for (const [element, dots] of state?.elements ?? []) {
      if (!dots.length) continue;
      const key = canonicalJson(element);
      // An old state may hold one identity twice (1 and 1.0): the first's form, both's dots.
      if (!this.values.has(key)) this.values.set(key, element);
      const shown = this.values.get(key);
      const tags = this.tags.get(key) ?? new Map();
      for (const d of dots) {
        const k = dotKey(d);
        tags.set(k, [d, forms.has(k) ? forms.get(k) : shown]);
        this.seen.add(k);
      }
      this.tags.set(key, tags);
    }
    for (const [key, tags] of this.tags) this.values.set(key, smallestForm(tags));
    this._vv = { ...(state?.vv ?? {}) };
    for (const d of state?.cloud ?? []) this.seen.add(dotKey(d));
  }
  _seen(d) {
    return d[1] <= (this._vv[String(d[0])] ?? 0) || this.seen.has(dotKey(d));
  }
  applyDelta(d) {
    const key = canonicalJson(d.element);
    let form = d.element;
    if ('form' in d) form = d.form;
    // A record of an earlier server, which wrote no form, comes in seq order:
    // the element reads here as it did at the writer, in the form it kept.
    else if (d.dot && d.dots.length && this.values.has(key)) form = this.values.get(key);
    const tags = this.tags.get(key) ?? new Map();
    for (const r of d.dots) {
      tags.delete(dotKey(r));
      this.seen.add(dotKey(r));
    }
    if (d.dot && !this._seen(d.dot)) {
      tags.set(dotKey(d.dot), [d.dot, form]);
      this.seen.add(dotKey(d.dot));
    }
    if (tags.size) {
      this.tags.set(key, tags);
      this.values.set(key, smallestForm(tags));
    } else {
      this.tags.delete(key);
      this.values.delete(key);
    }
  }
  has(element) {
    return this.values.has(canonicalJson(element));
  }
  view() {
    const keys = [...this.values.keys()].sort(compareCodePoints);
    return { value: keys.map((k) => this.values.get(k)) };
  }
}

class LWWRegisterReplica {
  constructor(state) {
    this.value = state?.value ?? null;
    this.timestamp = state?.timestamp ?? null;
    this.clientId = state?.client_id ?? null;
  }
  applyDelta(d) {
    if (this.timestamp !== null) {
      if (d.timestamp < this.timestamp) return;
      if (d.timestamp === this.timestamp) {
        if (d.client_id < this.clientId) return;
        // The server's tie-break: canonical JSON by code point (JS's <= compares UTF-16 units).
        if (
          d.client_id === this.clientId &&
          compareCodePoints(canonicalJson(d.value), canonicalJson(this.value)) <= 0
        ) {
          return;
        }
      }
    }
    this.value = d.value;
    this.timestamp = d.timestamp;
    this.clientId = d.client_id;
  }
  view() {
    return { value: this.value, timestamp: this.timestamp, client_id: this.clientId };
  }
}

const PRESENCE_MAX_TTL_MS = 300_000; // syncd/crdt/presence.py MAX_TTL_MS: records older than the horizon by this are gone

class PresenceReplica {
  constructor(state) {
    this.horizon = state?.horizon ?? 0;
    this.records = new Map(); // client id (number) -> {stamp, expires_at?, data?, left?}
    for (const [cid, rec] of Object.entries(state?.clients ?? {})) this.records.set(Number(cid), { ...rec });
  }
  applyDelta(d) {
    if (d.horizon !== undefined && d.horizon > this.horizon) {
      this.horizon = d.horizon;
      for (const [cid, rec] of this.records) if (rec.stamp + PRESENCE_MAX_TTL_MS <= this.horizon) this.records.delete(cid);
    }
    if (d.stamp + PRESENCE_MAX_TTL_MS <= this.horizon) return;
    const held = this.records.get(d.client_id);
    if (held && held.stamp > d.stamp) return;
    this.records.set(
      d.client_id,
      d.op === 'update' ? { stamp: d.stamp, expires_at: d.expires_at, data: d.data } : { stamp: d.stamp, left: true },
    );
  }
  /** Live entries at `nowMs` (server clock, ms). */
  view(nowMs = Date.now()) {
    const value = {};
    const expires = {};
    for (const cid of [...this.records.keys()].sort((a, b) => a - b)) {
      const rec = this.records.get(cid);
      if (!rec.left && rec.expires_at > nowMs) {
        value[String(cid)] = rec.data;
        expires[String(cid)] = rec.expires_at;
      }
    }
    return { value, expires_at: expires };
  }
}

const ROOT = 'root';

class TreeReplica {
  constructor(state) {
    this.nodes = new Map([[ROOT, [null, null, {}]]]);
    if (state?.nodes) {
      this.nodes = new Map(Object.entries(state.nodes).map(([id, n]) => [id, [n[0], n[1], n[2]]]));
    }
    // parent id -> Set of child ids, an index over `nodes` (syncd/crdt/tree.py
    // _children): a delete's subtree is found without scanning every node
    // for each of its nodes.
    this.kids = new Map();
    for (const [id, n] of this.nodes) if (n[0] !== null) this._link(n[0], id);
  }
  _link(parent, id) {
    const kids = this.kids.get(parent);
    if (kids) kids.add(id);
    else this.kids.set(parent, new Set([id]));
  }
  _unlink(parent, id) {
    const kids = this.kids.get(parent);
    if (!kids) return;
    kids.delete(id);
    if (!kids.size) this.kids.delete(parent);
  }
  _set(id, node) {
    const old = this.nodes.get(id);
    if (old && old[0] !== null && old[0] !== node[0]) this._unlink(old[0], id);
    this.nodes.set(id, node);
    if (node[0] !== null) this._link(node[0], id);
  }
  _isAncestor(ancestor, id) {
    while (id != null) {
      if (id === ancestor) return true;
      const n = this.nodes.get(id);
      if (!n) return false;
      id = n[0];
    }
    return false;
  }
  _subtree(id) {
    const out = [id];
    for (let i = 0; i < out.length; i++) {
      const kids = this.kids.get(out[i]);
      if (kids) for (const kid of kids) out.push(kid);
    }
    return out;
  }
  // In seq order this is the server's replay of one op (syncd/crdt/tree.py _do).
  applyDelta(d) {
    const node = this.nodes.get(d.id);
    if (d.op === 'add' || d.op === 'move') {
      if (d.id === ROOT || !this.nodes.has(d.parent) || this._isAncestor(d.id, d.parent)) return;
      if (d.op === 'add') this._set(d.id, [d.parent, d.pos ?? null, d.data ?? {}]);
      else if (node) this._set(d.id, [d.parent, d.pos ?? null, node[2]]);
    } else if (d.op === 'update') {
      if (node) this.nodes.set(d.id, [node[0], node[1], d.data]);
    } else if (d.op === 'delete' && node && d.id !== ROOT) {
      for (const n of this._subtree(d.id)) {
        this._unlink(this.nodes.get(n)[0], n);
        this.nodes.delete(n);
        this.kids.delete(n);
      }
    }
  }
  view() {
    const kids = new Map();
    for (const [id, n] of this.nodes) if (n[0] !== null) (kids.get(n[0]) ?? kids.set(n[0], []).get(n[0])).push(id);
    const build = (id) => {
      const list = (kids.get(id) ?? []).sort((a, b) => {
        const pa = this.nodes.get(a)[1] ?? '';
        const pb = this.nodes.get(b)[1] ?? '';
        return compareCodePoints(pa, pb) || compareCodePoints(a, b);
      });
      return { id, data: this.nodes.get(id)[2], children: list.map(build) };
    };
    return { value: build(ROOT) };
  }
}

class RgaTypeReplica {
  constructor(state) {
    this.seq = RgaReplica.fromState(state);
  }
  applyDelta(d) {
    this.seq.applyDelta(d);
  }
  view() {
    return this.seq.view();
  }
}

const CLASSES = {
  gcounter: GCounterReplica,
  pncounter: PNCounterReplica,
  orset: ORSetReplica,
  lwwregister: LWWRegisterReplica,
  presence: PresenceReplica,
  tree: TreeReplica,
  rga: RgaTypeReplica,
};

export const TYPES = Object.keys(CLASSES);

/** Whether this client keeps replicas of `type` (not of a `ydoc`: see noReplicaError). */
export function hasReplica(type) {
  return Object.hasOwn(CLASSES, type);
}

/**
 * The error for a replica of `id`, a Yjs document: Yjs is its replica (a
 * Y.Doc applies its updates, and keeps those that wait for their
 * dependencies), and this client does not depend on Yjs.
 */
export function noReplicaError(id, type = 'ydoc') {
  return new SyncdError(
    'no_replica',
    `${id}: this client keeps no replica of a ${type} (a Yjs document): subscribe with replica: false ` +
      "(or leave it out) and apply each delta's Yjs update to a Y.Doc: a snapshot's state.update, an op's op.update " +
      '(docs/yjs.md), or connect a y-websocket provider',
  );
}

/** A replica of `type` from a snapshot `state` (null: the empty CRDT). */
export function createReplica(type, state = null) {
  const cls = CLASSES[type];
  if (type === 'ydoc') throw noReplicaError('createReplica', type);
  if (!cls) throw new TypeError(`unknown CRDT type ${JSON.stringify(type)}`);
  return new cls(state);
}

/** The type an id's prefix fixes (docs/data-model.md#types), or null. */
export function typeForId(id) {
  const prefixes = { 'gc:': 'gcounter', 'pn:': 'pncounter', 'or:': 'orset', 'lw:': 'lwwregister', 'pr:': 'presence', 'rg:': 'rga', 'tr:': 'tree' };
  return prefixes[id.slice(0, 3)] ?? null;
}
