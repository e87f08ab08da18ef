// Tool results that fit a language model's context (docs/clients.md#large-values),
// as the Python client's syncd/client/bounded.py cuts them: a result whose JSON
// text is over the limit becomes the page of its value that fits, with
// `truncated`, `offset`, `next_offset`, `total`, `unit`, `omitted` and a
// `message` saying how to read on.

/** The longest tool result, in characters of its JSON text (about 4000 tokens). */
export const DEFAULT_MAX_RESULT_CHARS = 16000;
/** The smallest limit accepted: below it a page's own fields leave no room for the value. */
export const MIN_MAX_RESULT_CHARS = 1000;
/** How much of one element or change too large for a page is shown. */
export const PREVIEW_CHARS = 200;

const KEPT = ['id', 'type', 'seq', 'epoch', 'root', 'as', 'duplicate'];

/** The length of a result as the JSON text a model reads. */
export function resultSize(result) {
  return JSON.stringify(result).length;
}

/** `maxResultChars` if usable; TypeError otherwise. */
export function checkLimit(maxResultChars) {
  if (!Number.isInteger(maxResultChars) || maxResultChars < MIN_MAX_RESULT_CHARS) {
    throw new TypeError(`maxResultChars ${JSON.stringify(maxResultChars)}: a whole number, at least ${MIN_MAX_RESULT_CHARS}`);
  }
  return maxResultChars;
}

/**
 * The start of a JSON text too large to show, and its length, by code points
 * as the Python tools count them: cut by UTF-16 units, an emoji at the cut
 * left a lone surrogate, which a host cannot send on as UTF-8.
 */
function preview(text) {
  const points = Array.from(text);
  return { text: points.slice(0, PREVIEW_CHARS).join(''), chars: points.length };
}

/** The largest n in [0, most] with fits(n) (monotone; fits(0) assumed). */
function largest(fits, most) {
  let low = 0;
  let high = most;
  while (low < high) {
    const mid = Math.floor((low + high + 1) / 2);
    if (fits(mid)) low = mid;
    else high = mid - 1;
  }
  return low;
}

function pageMessage(start, shownEnd, end, total, unit, readMore, asked) {
  if (asked > total) return `offset ${asked} is past the end: the value has ${total} ${unit}.`;
  const what = shownEnd > start ? `${unit} ${start} to ${shownEnd - 1}` : `no ${unit}`;
  const note = `This is ${what} of ${total}`;
  if (end < total) {
    return (
      `${note}: the value is too large to return whole. Read on with ${readMore} and offset=${end}; ` +
      'the value may change between calls (compare seq).'
    );
  }
  return `${note}; it is the end of the value.`;
}

function page(result, field, whole, offset, maxChars, readMore, drop = []) {
  let items;
  let unit;
  const isMap = !(typeof whole === 'string' || Array.isArray(whole));
  if (typeof whole === 'string') {
    items = Array.from(whole); // code points, as the server counts a text
    unit = field === 'value_json' ? "characters of the value's JSON" : 'characters';
  } else if (Array.isArray(whole)) {
    items = whole;
    unit = 'elements';
  } else {
    items = Object.entries(whole).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    unit = 'entries';
  }
  const total = items.length;
  const start = Math.min(offset, total);
  const build = (count, tooLarge) => {
    const window = items.slice(start, start + count);
    const shown = typeof whole === 'string' ? window.join('') : isMap ? Object.fromEntries(window) : window;
    const end = start + count + (tooLarge ? 1 : 0);
    const out = 'ok' in result ? { ok: result.ok } : {};
    for (const name of KEPT) if (name in result) out[name] = result[name];
    out[field] = shown;
    Object.assign(out, {
      truncated: true,
      offset: start,
      next_offset: end < total ? end : null,
      total,
      unit,
      omitted: Object.keys(result).filter((n) => !KEPT.includes(n) && n !== field && n !== 'ok' && !drop.includes(n)),
    });
    if (tooLarge) {
      out.too_large = tooLarge;
      out.message =
        `The ${unit.slice(0, -1)} at offset ${start} is too large to show (${tooLarge.json_chars} characters of JSON): ` +
        `too_large.preview is its start.${end < total ? ` Read on with ${readMore} and offset=${end}.` : ''}`;
    } else {
      out.message = pageMessage(start, start + count, end, total, unit, readMore, offset);
    }
    return out;
  };
  // Every element or character takes at least one character of JSON: no page
  // holds more than maxChars of them, which keeps each probe small.
  const count = largest((n) => resultSize(build(n)) <= maxChars, Math.min(total - start, maxChars));
  if (count === 0 && start < total && typeof whole === 'string') {
    // The page's own fields leave no room (a 256-character root name is in
    // both `root` and the message): one character anyway, a little over the
    // limit, rather than an empty page whose next_offset is its offset,
    // which an agent following it would ask for again for ever.
    return build(1);
  }
  if (count === 0 && start < total) {
    const item = items[start];
    const shown = preview(JSON.stringify(isMap ? item[1] : item));
    const tooLarge = { offset: start, json_chars: shown.chars, preview: shown.text };
    if (isMap) tooLarge.key = item[0];
    return build(0, tooLarge);
  }
  return build(count);
}

/**
 * `result` (`{ok, ..., value}`) whole when it fits and `offset` is 0, else the
 * page of its value from `offset` that fits; `readMore` names the call that
 * reads on.
 */
export function boundValue(result, type, { offset = 0, maxChars, readMore }) {
  if (offset === 0 && resultSize(result) <= maxChars) return result;
  if (type === 'rga' && typeof result.text === 'string') {
    return page(result, 'text', result.text, offset, maxChars, readMore, ['value']);
  }
  const { value } = result;
  if (typeof value === 'string' || Array.isArray(value)) return page(result, 'value', value, offset, maxChars, readMore);
  if (value !== null && typeof value === 'object' && type !== 'tree') {
    return page(result, 'value', value, offset, maxChars, readMore);
  }
  if (offset === 0) {
    const trimmed = 'ok' in result ? { ok: result.ok } : {};
    const omitted = [];
    for (const [name, field] of Object.entries(result)) {
      if (KEPT.includes(name)) trimmed[name] = field;
      else if (name !== 'value' && name !== 'ok') omitted.push(name);
    }
    if ('value' in result) trimmed.value = value;
    Object.assign(trimmed, {
      truncated: true,
      omitted,
      message: `Left out to stay within the result limit: ${omitted.join(', ')} (the value is whole).`,
    });
    if (resultSize(trimmed) <= maxChars) return trimmed;
  }
  return page(result, 'value_json', JSON.stringify(value ?? null), offset, maxChars, readMore, ['value']);
}

/** A history page (`{seq, oldest, ops, next}`) cut to the newest ops that fit. */
export function boundHistory(answer, { maxChars, readMore }) {
  if (resultSize(answer) <= maxChars) return answer;
  const ops = [...(answer.ops ?? [])];
  const build = (count) => {
    const kept = ops.slice(0, count);
    const cut = { ...answer, ops: kept, truncated: true };
    if (count < ops.length && kept.length) {
      cut.next = kept[kept.length - 1]?.seq ?? null;
      cut.message = `Only the newest ${count} of ${ops.length} changes fit the result limit: call ${readMore} with before=${cut.next} for older ones.`;
    }
    return cut;
  };
  const count = largest((n) => resultSize(build(n)) <= maxChars, ops.length);
  if (count === 0 && ops.length && ops[0] && typeof ops[0] === 'object') {
    const { op, ...first } = ops[0];
    const shown = preview(JSON.stringify(op ?? null));
    ops[0] = { ...first, op_preview: shown.text, op_json_chars: shown.chars };
    const cut = build(1);
    cut.message =
      "This change's op is too large to show whole: op_preview is its start." +
      (ops.length > 1 ? ` Call ${readMore} with before=${first.seq} for older changes.` : '');
    return cut;
  }
  return build(count);
}
