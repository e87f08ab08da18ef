// Agent tool helpers (docs/clients.md#agent-tools): tool
// definitions for a list of (crdt_id, type) pairs, in the JSON-schema shape
// LLM tool-calling APIs take, and execution of a tool call over HTTP.
//
// Names: `service_<action>_<id>` with ":", "/" and "-" of the id turned into
// "_"; execution turns "_" back into "-". That only round-trips for ids of
// letters, digits and hyphens, so any other id is refused when the tools are
// built. The type comes from the pair and travels in the op's `type` field.

import { SyncdError } from './errors.js';

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

/** Changes one history call returns at most. */
export const MAX_HISTORY_LIMIT = 50;

const TOOL_ID = /^[A-Za-z0-9-]+$/;
const MAX_ID_LENGTH = 256; // docs/data-model.md#identifiers

/** The tool name for an action on an id: `service_read_page_views`. */
export function toolName(action, crdtId) {
  return `${TOOL_PREFIX}${action}_${crdtId.replace(/[:/-]/g, '_')}`;
}

/** `{action, crdtId}` from a tool name (underscores of the id back to hyphens), or null. */
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

function checkToolId(crdtId) {
  if (typeof crdtId !== 'string' || !crdtId || crdtId.length > MAX_ID_LENGTH || !TOOL_ID.test(crdtId)) {
    throw new TypeError(
      `tool CRDT id ${JSON.stringify(crdtId)}: use letters, digits and hyphens only ` +
        '(a colon, slash or underscore could not be mapped back from the tool name)',
    );
  }
}

const JSON_VALUE = { description: 'Any JSON value: string, number, boolean, null, array or object.' };

function definition(action, crdtId, type) {
  const name = toolName(action, crdtId);
  switch (action) {
    case 'read':
      return {
        name,
        description: `Read the current state of the ${type} "${crdtId}". Returns its JSON state, or null when it does not exist.`,
        input_schema: { type: 'object', properties: {}, additionalProperties: false },
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
          "With 'at': its state right after that version. With 'before': the changes older than that version.",
        input_schema: {
          type: 'object',
          properties: {
            at: { type: 'integer', minimum: 0, description: 'Optional: read the state as of this version.' },
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

/**
 * Tool definitions (`{name, description, input_schema}`) for `[crdtId, type]`
 * pairs. Throws TypeError for an id that is not letters, digits and hyphens,
 * an unknown type, or two ids that would give the same tool name.
 * @param {Array<[string, string]>} crdts
 */
export function buildTools(crdts) {
  const out = [];
  const names = new Set();
  for (const pair of crdts) {
    const [crdtId, type] = pair;
    checkToolId(crdtId);
    const actions = TOOL_ACTIONS[type];
    if (!actions) throw new TypeError(`unknown CRDT type ${JSON.stringify(type)} for tool id ${crdtId}`);
    for (const action of ['read', ...actions]) {
      const def = definition(action, crdtId, type);
      if (names.has(def.name)) throw new TypeError(`duplicate tool name ${def.name}`);
      names.add(def.name);
      out.push(def);
    }
  }
  return out;
}

/** The same definitions in the OpenAI function-calling shape. */
export function toOpenAiTools(tools) {
  return tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } }));
}

/**
 * Execute a tool call by HTTP. `http` is an HttpApi (or a SyncdClient);
 * `crdts` the pairs the tools were built from, which give the op's `type`.
 * Returns the state for `read` (null when absent or on any error status, as
 * the Python client's tools do) and the server's answer for ops.
 */
export async function executeTool(http, crdts, name, input = {}, { origin } = {}) {
  const parsed = parseToolName(name);
  if (!parsed) throw new SyncdError('unknown_tool', `not a service tool: ${name}`);
  const { action, crdtId } = parsed;
  const pair = crdts.find(([id]) => id === crdtId);
  if (!pair) throw new SyncdError('unknown_tool', `no tool ${name} was built for id ${crdtId}`);
  const type = pair[1];
  if (action !== 'read' && !TOOL_ACTIONS[type]?.includes(action)) {
    throw new SyncdError('unknown_tool', `${action} is not a tool action for a ${type}`);
  }
  const args = input ?? {};
  switch (action) {
    case 'read':
      try {
        return await http.read(crdtId);
      } catch (err) {
        if (err instanceof SyncdError && err.status) return null;
        throw err;
      }
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
      if (args.at !== undefined) return http.at(crdtId, args.at);
      const limit = args.limit ?? 10;
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_HISTORY_LIMIT) {
        throw new SyncdError('invalid_op', `limit: a whole number from 1 to ${MAX_HISTORY_LIMIT}`);
      }
      return http.history(crdtId, { before: args.before, limit, clientId: args.client_id, origin: args.origin });
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
 * `{origin: 'agent:task-1'}`: every op the tools make carries that origin.
 */
export function createAgentTools(http, crdts, { origin } = {}) {
  if (origin !== undefined && (typeof origin !== 'string' || !origin || origin.length > MAX_ORIGIN_LENGTH)) {
    throw new TypeError(`origin: a string of 1 to ${MAX_ORIGIN_LENGTH} characters`);
  }
  const definitions = buildTools(crdts);
  const frozen = crdts.map(([id, type]) => [id, type]);
  return { definitions, execute: (name, input) => executeTool(http, frozen, name, input, { origin }) };
}
