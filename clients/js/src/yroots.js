// The root names of a Yjs document, read from its binary update (v1, as the
// service's read of a ydoc answers it) without Yjs itself: the agent tools
// list them for a read that names no root, as the Python tools do, so the
// model need not guess names (the service's `?root=` read takes one it knows).
//
// A root's name is in the update as the parent of each item inserted into it
// with no neighbour to take its parent from (docs: the Yjs update format,
// lib0 encoding). The content of every item is stepped over, not decoded.

const TEXT = new TextDecoder('utf-8', { fatal: true });

/** Thrown for an update this reader cannot step through. */
class UpdateError extends Error {}

class Reader {
  constructor(bytes) {
    this.bytes = bytes;
    this.pos = 0;
  }

  byte() {
    if (this.pos >= this.bytes.length) throw new UpdateError('the update ends early');
    return this.bytes[this.pos++];
  }

  uint() {
    let value = 0;
    let scale = 1;
    for (;;) {
      const b = this.byte();
      value += (b & 0x7f) * scale;
      if (b < 0x80) return value;
      scale *= 128;
      if (scale > 2 ** 56) throw new UpdateError('a number too large');
    }
  }

  skipInt() {
    while (this.byte() & 0x80);
  }

  skip(count) {
    if (count > this.bytes.length - this.pos) throw new UpdateError('the update ends early');
    this.pos += count;
  }

  string() {
    const length = this.uint();
    const start = this.pos;
    this.skip(length);
    return TEXT.decode(this.bytes.subarray(start, this.pos));
  }

  skipString() {
    this.skip(this.uint());
  }

  /** Step over one lib0 "any" value (ContentAny, a subdocument's options). */
  skipAny(depth = 0) {
    if (depth > 1000) throw new UpdateError('a value nested too deep');
    const tag = this.byte();
    switch (tag) {
      case 127: // undefined
      case 126: // null
      case 121: // false
      case 120: // true
        return;
      case 125:
        return this.skipInt();
      case 124:
        return this.skip(4);
      case 123:
      case 122:
        return this.skip(8);
      case 119:
      case 116:
        return this.skipString(); // a string, or bytes: both length-prefixed
      case 118: {
        for (let n = this.uint(); n > 0; n--) {
          this.skipString();
          this.skipAny(depth + 1);
        }
        return;
      }
      case 117: {
        for (let n = this.uint(); n > 0; n--) this.skipAny(depth + 1);
        return;
      }
      default:
        throw new UpdateError(`an unknown value tag ${tag}`);
    }
  }
}

/** Step over an item's content, `kind` being the low 5 bits of its info byte. */
function skipContent(reader, kind) {
  switch (kind) {
    case 1: // deleted: a length
      return void reader.uint();
    case 2: // JSON: strings
      for (let n = reader.uint(); n > 0; n--) reader.skipString();
      return;
    case 3: // binary
    case 4: // string
    case 5: // embed (JSON text)
      return reader.skipString();
    case 6: // format: key and JSON text
      reader.skipString();
      return reader.skipString();
    case 7: {
      // a type: XmlElement (3) and XmlHook (5) carry a name
      const ref = reader.uint();
      if (ref === 3 || ref === 5) reader.skipString();
      return;
    }
    case 8: // any values
      for (let n = reader.uint(); n > 0; n--) reader.skipAny();
      return;
    case 9: // a subdocument: its guid and options
      reader.skipString();
      return reader.skipAny();
    default:
      throw new UpdateError(`an unknown content kind ${kind}`);
  }
}

/** Code point order, as the Python tools sort names (`sorted`). */
function byCodePoint(a, b) {
  const x = Array.from(a, (c) => c.codePointAt(0));
  const y = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/**
 * The root names of the Yjs update `bytes` (v1), sorted by code point; null
 * when it cannot be read (not an update, or one this reader does not know).
 */
export function yjsRootNames(bytes) {
  const reader = new Reader(bytes);
  const names = new Set();
  try {
    for (let clients = reader.uint(); clients > 0; clients--) {
      let structs = reader.uint();
      reader.uint(); // client
      reader.uint(); // clock of the first struct
      for (; structs > 0; structs--) {
        const info = reader.byte();
        const kind = info & 0x1f;
        if (kind === 0 || kind === 10) {
          reader.uint(); // GC or skip: a length
          continue;
        }
        if (info & 0x80) (reader.uint(), reader.uint()); // origin id
        if (info & 0x40) (reader.uint(), reader.uint()); // right origin id
        if ((info & 0xc0) === 0) {
          // No neighbour: the parent is written, a root's name or an item's id.
          if (reader.uint() === 1) names.add(reader.string());
          else (reader.uint(), reader.uint());
          if (info & 0x20) reader.skipString(); // the key in a map
        }
        skipContent(reader, kind);
      }
    }
  } catch (err) {
    if (err instanceof UpdateError || err instanceof TypeError) return null; // TypeError: bad UTF-8
    throw err;
  }
  return [...names].sort(byCodePoint);
}
