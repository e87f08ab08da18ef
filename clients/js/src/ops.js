// Op builders for every type (docs/data-model.md#ops). Each returns the op map the
// server takes over HTTP and WebSocket alike; `opts` may add `type` (for ids
// without a type prefix) and `op_id` (an idempotency key).

function withOpts(op, opts) {
  if (opts?.type !== undefined) op.type = opts.type;
  if (opts?.opId !== undefined) op.op_id = opts.opId;
  return op;
}

function amount(op, n) {
  if (n !== undefined) op.amount = n;
  return op;
}

export const ops = {
  increment: (n, opts) => withOpts(amount({ op: 'increment' }, n), opts),
  decrement: (n, opts) => withOpts(amount({ op: 'decrement' }, n), { type: 'pncounter', ...opts }),
  add: (element, opts) => withOpts({ op: 'add', element }, opts),
  remove: (element, opts) => withOpts({ op: 'remove', element }, opts),
  set: (value, opts) => {
    const op = { op: 'set', value };
    if (opts?.timestamp !== undefined) op.timestamp = opts.timestamp;
    return withOpts(op, opts);
  },
  updatePresence: (data, opts) => {
    const op = { op: 'update' };
    if (data !== undefined) op.data = data;
    if (opts?.ttlMs !== undefined) op.ttl_ms = opts.ttlMs;
    return withOpts(op, { type: 'presence', ...opts });
  },
  leavePresence: (opts) => withOpts({ op: 'leave' }, { type: 'presence', ...opts }),
  /** Insert text (one element per character) or an array of values at a visible index. */
  insertAt: (index, content, opts) =>
    withOpts({ op: 'insert', index, ...content_(content) }, { type: 'rga', ...opts }),
  /** Insert after an element id (`"<counter>@<client>"`), or null for the head. */
  insertAfter: (after, content, opts) =>
    withOpts({ op: 'insert', after, ...content_(content) }, { type: 'rga', ...opts }),
  deleteAt: (index, count = 1, opts) => withOpts({ op: 'delete', index, count }, { type: 'rga', ...opts }),
  deleteIds: (ids, opts) => withOpts({ op: 'delete', ids }, { type: 'rga', ...opts }),
  addNode: (id, parent = 'root', opts) => {
    const op = { op: 'add', id, parent };
    if (opts?.data !== undefined) op.data = opts.data;
    if (opts?.pos !== undefined) op.pos = opts.pos;
    return withOpts(op, { type: 'tree', ...opts });
  },
  moveNode: (id, parent, opts) => {
    const op = { op: 'move', id, parent };
    if (opts?.pos !== undefined) op.pos = opts.pos;
    return withOpts(op, { type: 'tree', ...opts });
  },
  updateNode: (id, data, opts) => withOpts({ op: 'update', id, data }, { type: 'tree', ...opts }),
  deleteNode: (id, opts) => withOpts({ op: 'delete', id }, { type: 'tree', ...opts }),
};

function content_(content) {
  if (typeof content === 'string') return { text: content };
  if (Array.isArray(content)) return { values: content };
  throw new TypeError('rga content must be a string or an array of values');
}
