// A client replica of the rga type: snapshot state in, op deltas in, the
// visible sequence and element ids out. It mirrors syncd/crdt/rga/ one
// element per slot (simple and fast enough for documents a browser edits).
//
// Elements are code points, as on the server: "😀" is one element even though
// it is two UTF-16 units in a JavaScript string.
//
// Order (classic RGA, docs/data-model.md#rga): a new element goes right after its
// origin, past every following element with a greater id (counter, then
// client), so concurrent inserts at one place order by higher counter first.

/** The wire form of an element id: "<counter>@<client>". */
export function formatId(client, counter) {
  return `${counter}@${client}`;
}

// The server's element id pattern (syncd/crdt/rga/ids.py), exactly: one
// spelling per id, no leading zeros and no "-0", so "1@-0" does not name
// client 0's "1@0" and "07@1" does not name "7@1".
const ID_RE = /^([1-9][0-9]*)@(0|-?[1-9][0-9]*)$/;
// The server's MAX_ID_CHARS: longer than any id it makes (two 64-bit integers and an "@").
const MAX_ID_CHARS = 48;

// Decimals this short are always safe integers (2^53 has 16 digits): Number at once.
const SAFE_DIGITS = 15;

/**
 * One decimal of an id, exactly: a number when it is a safe integer (every id
 * the server makes), else a BigInt. The server parses ids of any size up to
 * MAX_ID_CHARS (Python ints), so "9007199254740993@1" must not read as the
 * neighbouring "9007199254740992@1" here.
 */
function exactInt(digits) {
  if (digits.length <= SAFE_DIGITS + (digits[0] === '-' ? 1 : 0)) return Number(digits);
  const n = Number(digits);
  return Number.isSafeInteger(n) ? n : BigInt(digits);
}

/**
 * "<counter>@<client>" -> [client, counter]; TypeError for anything else.
 * Each part is a number, or a BigInt past Number.MAX_SAFE_INTEGER, so
 * formatId() of the pair gives back the same id.
 */
export function parseId(id) {
  const m = typeof id === 'string' && id.length <= MAX_ID_CHARS ? ID_RE.exec(id) : null;
  if (!m) throw new TypeError(`not an element id: ${JSON.stringify(id)}`);
  return [exactInt(m[2]), exactInt(m[1])];
}

function greater(a, client, counter) {
  return a.counter > counter || (a.counter === counter && a.client > client);
}

export class RgaReplica {
  constructor() {
    /** @type {{client: number, counter: number, value: unknown, deleted: boolean}[]} */
    this.elements = [];
    this._byId = new Map();
    this._max = 0;
    this._length = 0;
  }

  /** From a `?format=crdt` / snapshot state `{runs: [[client, counter, after, content], ...]}`. */
  static fromState(state) {
    const r = new RgaReplica();
    if (state == null) return r;
    if (!Array.isArray(state.runs)) throw new TypeError('rga state: runs must be an array');
    for (const [client, counter, , content] of state.runs) {
      if (typeof content === 'number') {
        for (let k = 0; k < content; k++) r._push(client, counter + k, undefined, true);
      } else {
        const items = typeof content === 'string' ? Array.from(content) : content;
        items.forEach((v, k) => r._push(client, counter + k, v, false));
      }
    }
    return r;
  }

  _push(client, counter, value, deleted) {
    const e = { client, counter, value, deleted };
    this.elements.push(e);
    this._byId.set(formatId(client, counter), e);
    if (counter > this._max) this._max = counter;
    if (!deleted) this._length++;
  }

  /** Visible elements. */
  get length() {
    return this._length;
  }

  has(id) {
    return this._byId.has(id);
  }

  /** Apply an op delta (`op` of an op delta); idempotent like the server's. */
  applyDelta(delta) {
    if (delta.op === 'insert') this._integrate(delta);
    else if (delta.op === 'delete') {
      for (const [client, first, count] of delta.ranges) {
        for (let c = first; c < first + count; c++) {
          const e = this._byId.get(formatId(client, c));
          if (!e) throw new Error(`rga delta: unknown element ${formatId(client, c)}`);
          if (!e.deleted) {
            e.deleted = true;
            e.value = undefined;
            this._length--;
          }
        }
      }
    } else throw new Error(`rga delta: unknown op ${JSON.stringify(delta.op)}`);
  }

  _integrate({ after, client, counter, text, values }) {
    const items = text !== undefined ? Array.from(text) : values;
    if (this._byId.has(formatId(client, counter))) return; // seen: an op's elements come together
    let pos = 0;
    if (after != null) {
      const origin = this._byId.get(formatId(after[0], after[1]));
      if (!origin) throw new Error(`rga delta: unknown after element ${formatId(after[0], after[1])}`);
      pos = this.elements.indexOf(origin) + 1;
    }
    const els = this.elements;
    while (pos < els.length && greater(els[pos], client, counter)) pos++;
    const fresh = items.map((value, k) => ({ client, counter: counter + k, value, deleted: false }));
    els.splice(pos, 0, ...fresh);
    for (const e of fresh) this._byId.set(formatId(e.client, e.counter), e);
    this._max = Math.max(this._max, counter + items.length - 1);
    this._length += items.length;
  }

  /** The visible values, in order. */
  values() {
    const out = [];
    for (const e of this.elements) if (!e.deleted) out.push(e.value);
    return out;
  }

  /** The visible text (values joined). */
  text() {
    let out = '';
    for (const e of this.elements) if (!e.deleted) out += e.value;
    return out;
  }

  /** Ids of the visible elements, in order. */
  ids() {
    const out = [];
    for (const e of this.elements) if (!e.deleted) out.push(formatId(e.client, e.counter));
    return out;
  }

  /** The id of visible element `index`. */
  idAt(index) {
    let i = 0;
    for (const e of this.elements) {
      if (e.deleted) continue;
      if (i === index) return formatId(e.client, e.counter);
      i++;
    }
    throw new RangeError(`index ${index} out of range 0..${this._length - 1}`);
  }

  /** The visible index of an element; -1 when it is deleted or unknown. */
  indexOf(id) {
    const target = this._byId.get(id);
    if (!target || target.deleted) return -1;
    let i = 0;
    for (const e of this.elements) {
      if (e === target) return i;
      if (!e.deleted) i++;
    }
    return -1;
  }

  /** The view of docs/data-model.md#reading: `{value, text?}`. */
  view() {
    const value = this.values();
    return value.every((v) => typeof v === 'string') ? { value, text: value.join('') } : { value };
  }
}
