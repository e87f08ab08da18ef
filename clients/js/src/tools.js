// Agent tool helpers (docs/clients.md#agent-tools): tool
// definitions for a list of (crdt_id, type) pairs, in the JSON-schema shape
// LLM tool-calling APIs take, and execution of a tool call over HTTP.
//
// Names: `service_<action>_<id>` with every character of the id other than a
// letter, digit or "_" turned into "_", as the Python client names them. A
// call is resolved by looking its name up among the tools built from the
// pairs, never by parsing the id back out of it, so any valid CRDT id works
// (`gc:visits`, `yd:notes`). The type comes from the pair and travels in the
// op's `type` field. Every result fits `maxResultChars` (bounded.js): a larger
// value comes back as a page saying how to read on with `offset`.

import { base64Decode } from './base64.js';
import { DEFAULT_MAX_RESULT_CHARS, boundHistory, boundValue, checkLimit, resultSize } from './bounded.js';
import { SyncdError } from './errors.js';
import { yjsRootNames } from './yroots.js';

export { DEFAULT_MAX_RESULT_CHARS, MIN_MAX_RESULT_CHARS } from './bounded.js';

export const TOOL_PREFIX = 'service_';

/** Actions per type beyond `read` (which every type has), in tool order. */
export const TOOL_ACTIONS = Object.freeze({
  gcounter: ['increment', 'history'],
  pncounter: ['increment', 'history', 'restore', 'revert'],
  lwwregister: ['set', 'history', 'restore', 'revert'],
  orset: ['add', 'history', 'restore', 'revert'],
  presence: ['history'],
  rga: ['history', 'restore', 'revert'],
  tree: ['history', 'restore', 'revert'],
  ydoc: ['history', 'revert'],
});

/** The service's longest origin (docs/data-model.md#origins). */
export const MAX_ORIGIN_LENGTH = 128;

const WRITER = {
  client_id: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: "Optional: only this writer's changes (its client id)." },
  origin: { type: 'string', minLength: 1, maxLength: MAX_ORIGIN_LENGTH, description: 'Optional: only the changes made with this origin (a task, e.g. agent:x-1).' },
};

/**
 * The longest one tool call takes by default before it is given up with a
 * SyncdError `timeout` (the Python tools' DEFAULT_CALL_TIMEOUT_S): each
 * request waits up to the client's `timeoutMs` of silence, and an answer
 * trickling in resets it, while MCP hosts give up on a tool call after 60 s
 * with an error that tells the model nothing.
 */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/** How long a call that timed out tells the model to wait (`retryAfter`, seconds). */
const TIMEOUT_RETRY_S = 5;

/** The actions whose call may have changed a CRDT when it was given up. */
const WRITING_ACTIONS = new Set(['increment', 'set', 'add', 'restore', 'revert']);

/** Changes one history call returns at most. */
export const MAX_HISTORY_LIMIT = 50;

// docs/data-model.md#identifiers: 1-256 of these characters.
const CRDT_ID = /^[A-Za-z0-9._:~@+=-]{1,256}$/;
/** OpenAI function names and Anthropic tool names are at most 64 characters. */
export const MAX_TOOL_NAME_LENGTH = 64;
/** The longest Yjs root name, as the service's `?root=` takes it. */
const MAX_ROOT_NAME = 256;
const ROOT_KINDS = ['text', 'map', 'array', 'xml'];
/**
 * The longest root name (as JSON) a page's message repeats. A page already
 * names its root in its `root` field; a 256-character name said twice leaves
 * no room for the value under the smallest result limit (MIN_MAX_RESULT_CHARS),
 * so a longer one is referred to instead of repeated.
 */
const MAX_ROOT_IN_MESSAGE = 64;

/** The tool name for an action on an id: `service_read_page_views`, `service_read_gc_visits`. */
export function toolName(action, crdtId) {
  return `${TOOL_PREFIX}${action}_${crdtId.replace(/[^A-Za-z0-9_]/g, '_')}`;
}

/**
 * `{action, crdtId}` from a tool name (underscores of the id back to hyphens),
 * or null. Exact only for ids of letters, digits and hyphens: execution
 * resolves names by lookup, not with this.
 */
export function parseToolName(name) {
  if (typeof name !== 'string' || !name.startsWith(TOOL_PREFIX)) return null;
  const rest = name.slice(TOOL_PREFIX.length);
  for (const action of ['read', 'increment', 'set', 'add', 'history', 'restore', 'revert']) {
    if (rest.startsWith(`${action}_`) && rest.length > action.length + 1) {
      return { action, crdtId: rest.slice(action.length + 1).replace(/_/g, '-') };
    }
  }
  return null;
}

/** The type each id prefix fixes (docs/data-model.md#how-a-crdt-gets-its-type). */
const PREFIX_TYPES = Object.freeze({
  'gc:': 'gcounter',
  'pn:': 'pncounter',
  'or:': 'orset',
  'lw:': 'lwwregister',
  'pr:': 'presence',
  'rg:': 'rga',
  'tr:': 'tree',
  'yd:': 'ydoc',
});

/**
 * Refuse a type other than the one the id's prefix fixes: the server refuses
 * every op of such tools (type_mismatch), and their descriptions would tell
 * the model the wrong kind of value.
 */
function checkPrefixType(crdtId, type) {
  const prefix = crdtId.slice(0, 3);
  const fixed = Object.hasOwn(PREFIX_TYPES, prefix) ? PREFIX_TYPES[prefix] : null;
  if (fixed !== null && fixed !== type) {
    throw new TypeError(`tool CRDT ${JSON.stringify(crdtId)}: its prefix ${JSON.stringify(prefix)} makes it a ${fixed}, not a ${type}`);
  }
}

function checkToolId(crdtId) {
  if (typeof crdtId !== 'string' || !CRDT_ID.test(crdtId)) {
    throw new TypeError(
      `tool CRDT id ${JSON.stringify(crdtId)}: 1-256 characters of A-Z a-z 0-9 . _ : ~ @ + = - ` +
        '(docs/data-model.md#identifiers)',
    );
  }
}

const OFFSET = {
  type: 'integer',
  minimum: 0,
  description:
    'Optional: where to start, for a value that came back cut short (its next_offset): ' +
    'characters of a text, elements of a list, entries of a map.',
};

const YDOC_READ =
  " It is a Yjs document: name a root type with 'root' and how to read it with 'as' (text, map, array " +
  "or xml) to get its content. Without 'root' it lists the roots (many of them in pages, read on with " +
  'offset as for a value).';

const YDOC_ROOT = {
  root: {
    type: 'string',
    minLength: 1,
    maxLength: MAX_ROOT_NAME,
    description: "Optional: the root type to read (editors: TipTap and ProseMirror use 'default').",
  },
  as: {
    type: 'string',
    enum: ROOT_KINDS,
    description: 'How to read the root: text (the default), map, array or xml (TipTap and ProseMirror documents: xml).',
  },
};

const JSON_VALUE = { description: 'Any JSON value: string, number, boolean, null, array or object.' };

function definition(action, crdtId, type) {
  const name = toolName(action, crdtId);
  switch (action) {
    case 'read':
      return {
        name,
        description:
          `Read the current state of the ${type} "${crdtId}". Returns its JSON state, or null when it does not exist. ` +
          'A value too large for one result comes back in part, with truncated: true and next_offset: call again ' +
          'with offset=next_offset for the rest.' +
          (type === 'ydoc' ? YDOC_READ : ''),
        input_schema: {
          type: 'object',
          properties: { offset: OFFSET, ...(type === 'ydoc' ? YDOC_ROOT : {}) },
          additionalProperties: false,
        },
      };
    case 'increment':
      return {
        name,
        description: `Increment the ${type} "${crdtId}" by an amount (default 1).`,
        input_schema: {
          type: 'object',
          properties: {
            amount: { type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER, description: 'How much to add (default 1).' },
          },
          additionalProperties: false,
        },
      };
    case 'set':
      return {
        name,
        description: `Set the value of the last-writer-wins register "${crdtId}" (a string, number or object).`,
        input_schema: {
          type: 'object',
          properties: {
            value: { ...JSON_VALUE, description: 'The new value (string, number or object).' },
            client_id: { type: 'integer', description: "Optional; must equal the token's client_id." },
          },
          required: ['value'],
          additionalProperties: false,
        },
      };
    case 'add':
      return {
        name,
        description: `Add an element to the set "${crdtId}".`,
        input_schema: {
          type: 'object',
          properties: { element: { ...JSON_VALUE, description: 'The element to add.' } },
          required: ['element'],
          additionalProperties: false,
        },
      };
    case 'history':
      return {
        name,
        description:
          `Look at the past of the ${type} "${crdtId}" (read-only). Without input: its latest changes, ` +
          'newest first, each with its version (seq), who made it (client_id, and origin: the task, when it ' +
          "named one) and when (ts, ms). With 'client_id' or 'origin': only that writer's changes. " +
          "With 'at': its state right after that version (with 'offset' for the rest of a value cut short). " +
          "With 'before': the changes older than that version.",
        input_schema: {
          type: 'object',
          properties: {
            at: { type: 'integer', minimum: 0, description: 'Optional: read the state as of this version.' },
            offset: { ...OFFSET, description: `Optional, with 'at': ${OFFSET.description.slice('Optional: '.length)}` },
            ...(type === 'ydoc' ? YDOC_ROOT : {}),
            before: { type: 'integer', minimum: 0, description: 'Optional: only changes older than this.' },
            limit: { type: 'integer', minimum: 1, maximum: MAX_HISTORY_LIMIT, description: 'How many changes at most (default 10).' },
            ...WRITER,
          },
          additionalProperties: false,
        },
      };
    case 'revert':
      return {
        name,
        description:
          `Take back the changes one writer made to the ${type} "${crdtId}" (by client_id, origin, or both), ` +
          "keeping everyone else's changes, by applying new ones (needs write permission). Find the writer " +
          'with the history tool first. Returns how many changes were taken back.',
        input_schema: {
          type: 'object',
          properties: {
            ...WRITER,
            since_seq: { type: 'integer', minimum: 0, description: 'Optional: only changes from this version on.' },
            until_seq: { type: 'integer', minimum: 0, description: 'Optional: only changes up to this version.' },
          },
          additionalProperties: false,
        },
      };
    case 'restore':
      return {
        name,
        description:
          `Restore the ${type} "${crdtId}" to its value as of an earlier version (seq), undoing the changes ` +
          'made since by applying new ones (needs write permission). Find the version with the history tool first.',
        input_schema: {
          type: 'object',
          properties: { seq: { type: 'integer', minimum: 0, description: 'The version whose value to bring back.' } },
          required: ['seq'],
          additionalProperties: false,
        },
      };
    default:
      throw new TypeError(`unknown action ${action}`);
  }
}

/** `{name -> {action, crdtId, type}}` of the tools of `crdts`, checking them as buildTools says. */
function toolIndex(crdts) {
  const index = new Map();
  const out = [];
  const ids = new Set();
  for (const pair of crdts) {
    if (!Array.isArray(pair) || pair.length !== 2) {
      throw new TypeError(`tool CRDTs are [crdtId, type] pairs, not ${JSON.stringify(pair)}`);
    }
    const [crdtId, type] = pair;
    checkToolId(crdtId);
    const actions = Object.hasOwn(TOOL_ACTIONS, type) ? TOOL_ACTIONS[type] : null;
    if (!actions) throw new TypeError(`unknown CRDT type ${JSON.stringify(type)} for tool id ${crdtId}`);
    checkPrefixType(crdtId, type);
    if (ids.has(crdtId)) throw new TypeError(`tool CRDT id ${crdtId} is given twice`);
    ids.add(crdtId);
    for (const action of ['read', ...actions]) {
      const def = definition(action, crdtId, type);
      if (index.has(def.name)) throw new TypeError(`duplicate tool name ${def.name}: rename one of the ids`);
      if (def.name.length > MAX_TOOL_NAME_LENGTH) {
        throw new TypeError(`tool name ${def.name} is longer than ${MAX_TOOL_NAME_LENGTH} characters; use a shorter id`);
      }
      index.set(def.name, { action, crdtId, type });
      out.push(def);
    }
  }
  return { index, definitions: out };
}

/**
 * Tool definitions (`{name, description, input_schema}`) for `[crdtId, type]`
 * pairs. Throws TypeError for an invalid CRDT id, an unknown type, a repeated
 * id, two ids that would give the same tool name (`gc:a-b`, `gc:a_b`), or a
 * name over MAX_TOOL_NAME_LENGTH.
 * @param {Array<[string, string]>} crdts
 */
export function buildTools(crdts) {
  return toolIndex(crdts).definitions;
}

/** The same definitions in the OpenAI function-calling shape. */
export function toOpenAiTools(tools) {
  return tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } }));
}

function offsetOf(args) {
  const offset = args.offset ?? 0;
  if (!Number.isInteger(offset) || offset < 0) throw new SyncdError('invalid_op', 'offset: a whole number, 0 or more');
  return offset;
}

/** `{root, as}` of a ydoc read (root undefined: none named); SyncdError for bad ones. */
function rootOf(type, args) {
  if (type !== 'ydoc') return {};
  const { root, as } = args;
  if (root !== undefined && (typeof root !== 'string' || !root || root.length > MAX_ROOT_NAME)) {
    throw new SyncdError('invalid_op', `root: a string of 1 to ${MAX_ROOT_NAME} characters`);
  }
  if (as !== undefined) {
    if (!ROOT_KINDS.includes(as)) throw new SyncdError('invalid_op', `as: one of ${ROOT_KINDS.join(', ')}`);
    if (root === undefined) throw new SyncdError('invalid_op', "as: says how to read a root; name it with 'root'");
  }
  return { root, as };
}

const ROOTS_HINT =
  'A Yjs document: read one of its roots with root=NAME and as=text, map, array or xml ' +
  "(TipTap and ProseMirror keep theirs in root 'default', read as xml; a Yjs update does " +
  'not say which kind a root is).';

/**
 * A ydoc's view without a root named, as the Python tools answer it: its root
 * names (`roots`, decoded from its update) and how to read one; null when the
 * update cannot be read here.
 */
function ydocRoots(view) {
  if (!view || typeof view.value !== 'string') return null;
  let names;
  try {
    names = yjsRootNames(base64Decode(view.value));
  } catch {
    return null; // not base64
  }
  if (names === null) return null;
  const out = {};
  for (const key of ['id', 'type', 'seq', 'epoch']) if (key in view) out[key] = view[key];
  out.roots = names;
  out.message = names.length ? ROOTS_HINT : 'The Yjs document is empty: it has no roots.';
  return out;
}

/**
 * The root names of `whole` (ydocRoots): all of them when they fit, else (or
 * from an `offset`) the page of them from `offset` that fits, paged as a
 * list value is (by elements, with `next_offset`).
 */
function boundRoots(whole, { offset, maxChars, readMore }) {
  if (offset === 0 && resultSize(whole) <= maxChars) return whole;
  const roots = whole.roots;
  const total = roots.length;
  const start = Math.min(offset, total);
  const page = (count) => {
    const end = start + Math.max(count, 1);
    let what;
    if (start >= total) what = `offset ${offset} is past the end: the document has ${total} roots.`;
    else if (count === 0) what = `The root name at offset ${start} is too long to show.`;
    else what = `These are roots ${start} to ${start + count - 1} of ${total}.`;
    if (end < total) what += ` Read on with ${readMore} and offset=${end} for more root names.`;
    return {
      ...whole,
      roots: roots.slice(start, start + count),
      truncated: true,
      offset: start,
      next_offset: end < total ? end : null,
      total,
      unit: 'elements',
      message: `${what} ${ROOTS_HINT}`,
    };
  };
  let low = 0;
  let high = total - start; // the most root names that fit: a binary search
  while (low < high) {
    const mid = Math.floor((low + high + 1) / 2);
    if (resultSize(page(mid)) <= maxChars) low = mid;
    else high = mid - 1;
  }
  return page(low);
}

/** A ydoc's view without a root named: its binary update left out, and how to read it. */
function ydocWithoutRoot(view) {
  if (!view) return view;
  const { value: _update, state_vector: _vector, ...rest } = view;
  return {
    ...rest,
    message:
      "A Yjs document: its binary value is left out. Read a root with root=NAME and as=text, map, array or xml " +
      "(TipTap and ProseMirror keep theirs in root 'default', read as xml).",
  };
}

/**
 * Refuse fields a tool does not take: every op and request is built from the
 * fields it names, so a misspelt one (`amout`, `sinse_seq`) would otherwise be
 * dropped and the call run without it (an increment by 1, a revert of all).
 */
function onlyFields(args, allowed) {
  const extra = Object.keys(args).filter((k) => !allowed.includes(k));
  if (extra.length) throw new SyncdError('invalid_op', `unknown input field(s): ${extra.join(', ')}`);
}

/** The fields each action's tool takes (its schema's properties). */
const TOOL_FIELDS = {
  read: (type) => (type === 'ydoc' ? ['offset', 'root', 'as'] : ['offset']),
  increment: () => ['amount'],
  set: () => ['value', 'client_id'],
  add: () => ['element'],
  history: (type) => ['at', 'before', 'limit', 'client_id', 'origin', 'offset', ...(type === 'ydoc' ? ['root', 'as'] : [])],
  revert: () => ['client_id', 'origin', 'since_seq', 'until_seq'],
  restore: () => ['seq'],
};

/** Fields whose null is a value of their own (a register set to null), not "not given". */
const NULL_IS_A_VALUE = new Set(['value', 'element']);

/**
 * The input without its optional fields given as null: models send null for
 * a field they do not want (OpenAI's strict mode sends every field), which
 * means its default, as for the Python tools. Sent on, the server refused
 * `amount: null` and `since_seq: null`.
 */
function withoutNulls(args) {
  return Object.fromEntries(Object.entries(args).filter(([key, v]) => v !== null || NULL_IS_A_VALUE.has(key)));
}

async function readValue(http, crdtId, type, args, { at, maxChars, readMore }) {
  const offset = offsetOf(args);
  const { root, as } = rootOf(type, args);
  let view;
  if (root !== undefined) {
    try {
      view = await http.readRoot(crdtId, root, { as, at });
    } catch (err) {
      if (err instanceof SyncdError && err.status === 404) return null; // as a plain read answers
      throw err;
    }
    const named = JSON.stringify(root);
    const rootHint = named.length <= MAX_ROOT_IN_MESSAGE ? named : "the root of this result's root field";
    readMore = `${readMore} (root=${rootHint}, as=${JSON.stringify(view.as)})`;
  } else {
    view = at === undefined ? await http.read(crdtId) : await http.at(crdtId, at);
    if (type === 'ydoc') {
      const roots = ydocRoots(view);
      if (roots) return boundRoots(roots, { offset, maxChars, readMore });
      view = ydocWithoutRoot(view);
    }
  }
  if (view === null || view === undefined) return null;
  return boundValue(view, type, { offset, maxChars, readMore });
}

/**
 * Execute a tool call by HTTP. `http` is an HttpApi (or a SyncdClient);
 * `crdts` the pairs the tools were built from, which give the op's `type`.
 * Returns the state for `read` (null when the CRDT does not exist; any other
 * refusal throws SyncdError, as for every other action) and the server's
 * answer for ops. A read, a history page or a state `at` a version longer
 * than `maxResultChars` characters of JSON (default 16000) comes back as a
 * page with `truncated`, `next_offset` and a `message`.
 */
export async function executeTool(
  http,
  crdts,
  name,
  input = {},
  { origin, maxResultChars = DEFAULT_MAX_RESULT_CHARS, callTimeoutMs = DEFAULT_CALL_TIMEOUT_MS } = {},
) {
  const limits = { origin, maxChars: checkLimit(maxResultChars), callTimeoutMs: checkCallTimeout(callTimeoutMs) };
  return execute(http, toolIndex(crdts).index, name, input, limits);
}

function checkCallTimeout(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms <= 0) {
    throw new TypeError(`callTimeoutMs ${String(ms)}: a number of milliseconds above 0`);
  }
  return ms;
}

/**
 * `call()`, or a SyncdError `timeout` once it has run `ms`: it says whether
 * the CRDT may have changed and when to try again (`retryAfter`). The request
 * under way is left to end by itself (within the client's `timeoutMs` of
 * silence); its answer is dropped.
 */
async function withinLimit(call, ms, action) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => {
      // Given up between sending an op and its answer, the op may be in: a
      // new call is a new op, and an increment would count twice.
      const effect = WRITING_ACTIONS.has(action)
        ? 'the change may have been applied or not: read the value (or the history tool) before calling again'
        : 'nothing was changed';
      const message =
        `the call took longer than ${ms / 1000} s (the service is slow or busy) and was stopped; ` +
        `${effect}. Try again in ${TIMEOUT_RETRY_S} s.`;
      reject(new SyncdError('timeout', message, { status: 0, retryAfter: TIMEOUT_RETRY_S }));
    }, ms);
  });
  const running = call();
  try {
    return await Promise.race([running, limit]);
  } finally {
    clearTimeout(timer);
    running.catch(() => {}); // a late failure of the call given up is nobody's
  }
}

async function execute(http, index, name, input, { origin, maxChars, callTimeoutMs = DEFAULT_CALL_TIMEOUT_MS }) {
  const found = typeof name === 'string' ? index.get(name) : undefined;
  if (!found) throw new SyncdError('unknown_tool', `no tool named ${JSON.stringify(name)}`);
  return withinLimit(() => run(http, found, name, input, { origin, maxChars }), callTimeoutMs, found.action);
}

async function run(http, found, name, input, { origin, maxChars }) {
  const { action, crdtId, type } = found;
  const given = input ?? {};
  if (typeof given !== 'object' || Array.isArray(given)) throw new SyncdError('invalid_op', 'the tool input must be an object');
  onlyFields(given, TOOL_FIELDS[action](type));
  const args = withoutNulls(given);
  switch (action) {
    case 'read':
      return readValue(http, crdtId, type, args, { maxChars, readMore: toolName('read', crdtId) });
    case 'increment': {
      const op = { op: 'increment', type };
      if (args.amount !== undefined) op.amount = args.amount;
      return http.apply(crdtId, op, { origin });
    }
    case 'set': {
      if (!('value' in args)) throw new SyncdError('invalid_op', 'value: required');
      const op = { op: 'set', type, value: args.value };
      if (args.client_id !== undefined) op.client_id = args.client_id;
      return http.apply(crdtId, op, { origin });
    }
    case 'add': {
      if (!('element' in args)) throw new SyncdError('invalid_op', 'element: required');
      return http.apply(crdtId, { op: 'add', type, element: args.element }, { origin });
    }
    case 'history': {
      if (args.at !== undefined) {
        // They choose changes to list; 'at' reads one value: dropping them
        // would answer a question the model did not ask.
        const listing = ['before', 'limit', 'client_id', 'origin'].filter((k) => args[k] !== undefined && args[k] !== null);
        if (listing.length) {
          throw new SyncdError(
            'invalid_op',
            `'at' reads the value at a version and cannot be combined with ${listing.join(', ')} (which list changes): call without 'at' for those`,
          );
        }
        const readMore = `${toolName('history', crdtId)} (at=${args.at})`;
        return readValue(http, crdtId, type, args, { at: args.at, maxChars, readMore });
      }
      const reading = ['offset', 'root', 'as'].filter((k) => args[k] !== undefined);
      if (reading.length) {
        throw new SyncdError('invalid_op', `${reading.join(', ')}: go with 'at'; a list of changes is paged with 'before'`);
      }
      const limit = args.limit ?? 10;
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_HISTORY_LIMIT) {
        throw new SyncdError('invalid_op', `limit: a whole number from 1 to ${MAX_HISTORY_LIMIT}`);
      }
      const page = await http.history(crdtId, { before: args.before, limit, clientId: args.client_id, origin: args.origin });
      return boundHistory(page, { maxChars, readMore: toolName('history', crdtId) });
    }
    case 'revert': {
      if (args.client_id === undefined && args.origin === undefined) {
        throw new SyncdError('invalid_op', 'client_id, origin: name whose changes to take back');
      }
      return http.revert(crdtId, {
        clientId: args.client_id,
        origin: args.origin,
        sinceSeq: args.since_seq,
        untilSeq: args.until_seq,
      });
    }
    case 'restore': {
      if (!Number.isInteger(args.seq) || args.seq < 0) throw new SyncdError('invalid_op', 'seq: required, a whole number');
      return http.restore(crdtId, args.seq);
    }
    default:
      throw new SyncdError('unknown_tool', name);
  }
}

/**
 * Definitions and an executor bound to one client and one list of pairs.
 * `{origin: 'agent:task-1'}`: every op the tools make carries that origin;
 * `{maxResultChars}`: the longest result (default 16000 characters of JSON);
 * `{callTimeoutMs}`: the longest one call takes (default 30 s) before it
 * throws a SyncdError `timeout` with `retryAfter`.
 */
export function createAgentTools(
  http,
  crdts,
  { origin, maxResultChars = DEFAULT_MAX_RESULT_CHARS, callTimeoutMs = DEFAULT_CALL_TIMEOUT_MS } = {},
) {
  if (origin !== undefined && (typeof origin !== 'string' || !origin || origin.length > MAX_ORIGIN_LENGTH)) {
    throw new TypeError(`origin: a string of 1 to ${MAX_ORIGIN_LENGTH} characters`);
  }
  const maxChars = checkLimit(maxResultChars);
  const limitMs = checkCallTimeout(callTimeoutMs);
  const { index, definitions } = toolIndex(crdts);
  return {
    definitions,
    maxResultChars: maxChars,
    callTimeoutMs: limitMs,
    execute: (name, input) => execute(http, index, name, input, { origin, maxChars, callTimeoutMs: limitMs }),
  };
}
