// Type declarations of @syncd/client (the implementation is plain ES modules).

export type TokenSource = string | (() => string | Promise<string>);

export interface ClientConfig {
  /** HTTP base URL of syncd, e.g. "http://localhost:3000". */
  baseUrl: string;
  /** Bearer token, or a function returning one (called before each connection). */
  token: TokenSource;
  namespace: string;
  fetch?: typeof fetch;
  /** HTTP calls: silence (no answer, or nothing more of it) after which one fails with a SyncdError `timeout` (status 0); default HTTP_TIMEOUT_MS. */
  timeoutMs?: number;
  WebSocket?: unknown;
  EventSource?: unknown;
}

/** Every CRDT type of the server (docs/data-model.md#types): ops, reads, history, revert and tools. */
export type CrdtType = 'gcounter' | 'pncounter' | 'orset' | 'lwwregister' | 'presence' | 'rga' | 'tree' | 'ydoc';
/** The types this client keeps local replicas of (`createReplica`, `TYPES`): a
 * `ydoc` is edited and replicated with Yjs itself (docs/yjs.md). */
export type ReplicaType = Exclude<CrdtType, 'ydoc'>;

export interface TokenClaims {
  namespace: string;
  client_id: number;
  expires_at: number;
  /** When it was issued (ms); absent in tokens from before the claim existed. */
  issued_at?: number;
  permissions: Record<string, unknown>;
  /** `tokenInfo()` only: the id of the key that signed the token. */
  key_id?: string;
}

export class SyncdError extends Error {
  constructor(code: string, message: string, extra?: { status?: number; retryAfter?: number; body?: unknown; cause?: unknown });
  /** The server's error code (docs/http-api.md#status-codes) or a client-side one (`unavailable` with status 0: no answer). */
  code: string;
  /** HTTP status, 0 when none. */
  status: number;
  /** Seconds to wait, from `Retry-After` (delay-seconds or an HTTP date). */
  retryAfter?: number;
  body?: unknown;
}
export class TokenParseError extends Error {
  code: 'token_parse';
}
export class TokenExpiredError extends Error {
  code: 'token_expired';
  expiresAt: number;
}
/** 401 `token_revoked`: an admin revoked the token (docs/permissions.md#revoking-tokens). */
export class TokenRevokedError extends SyncdError {
  constructor(message?: string, extra?: { status?: number; body?: unknown });
  code: 'token_revoked';
}

export function decodeToken(token: string): TokenClaims;
export function validateToken(token: string, options?: { now?: number }): TokenClaims;

export interface OpOptions {
  type?: CrdtType;
  opId?: string;
}
export type Op = { op: string; type?: CrdtType; op_id?: string; [field: string]: unknown };
export interface OpAnswer {
  ok: true;
  seq: number;
  applied: number;
  duplicate?: boolean;
  /** rga inserts: the new element ids, in order. */
  ids?: string[];
  state?: unknown;
}
export interface Ack {
  seq: number;
  /** As OpAnswer's: the ops applied, now or by the first message with their op_id. */
  applied: number;
  duplicate?: boolean;
  ids?: string[];
}
export interface ReadState {
  id: string;
  type: CrdtType;
  seq: number;
  epoch: string;
  value: unknown;
  [extra: string]: unknown;
}

export const ops: {
  increment(amount?: number, opts?: OpOptions): Op;
  decrement(amount?: number, opts?: OpOptions): Op;
  add(element: unknown, opts?: OpOptions): Op;
  remove(element: unknown, opts?: OpOptions): Op;
  set(value: unknown, opts?: OpOptions & { timestamp?: number }): Op;
  updatePresence(data?: Record<string, unknown>, opts?: OpOptions & { ttlMs?: number }): Op;
  leavePresence(opts?: OpOptions): Op;
  insertAt(index: number, content: string | unknown[], opts?: OpOptions): Op;
  insertAfter(after: string | null, content: string | unknown[], opts?: OpOptions): Op;
  deleteAt(index: number, count?: number, opts?: OpOptions): Op;
  deleteIds(ids: string[], opts?: OpOptions): Op;
  addNode(id: string, parent?: string, opts?: OpOptions & { data?: Record<string, unknown>; pos?: string }): Op;
  moveNode(id: string, parent: string, opts?: OpOptions & { pos?: string }): Op;
  updateNode(id: string, data: Record<string, unknown>, opts?: OpOptions): Op;
  deleteNode(id: string, opts?: OpOptions): Op;
};

export interface HistoryPage {
  id: string;
  type: CrdtType;
  epoch: string;
  seq: number;
  /** The oldest seq `at()` can read (0: from the start). */
  oldest: number;
  ops: {
    seq: number;
    client_id: number;
    ts: number;
    op: Record<string, unknown>;
    op_id?: string;
    origin?: string;
    reverts?: { client_id?: number; origin?: string; since_seq: number; until_seq: number };
    /** On the ops of a restore: the seq it restored and the last seq it took back. */
    restores?: { to_seq: number; until_seq: number };
  }[];
  /** Pass as `before` for the older page; null at the end. */
  next: number | null;
}

export interface RevertAnswer {
  ok: true;
  seq: number;
  applied?: number;
  /** The writer's ops in the span that were taken back. */
  matched?: number;
  since_seq?: number;
  until_seq?: number;
  duplicate?: true;
}

export interface RevertOptions {
  clientId?: number;
  origin?: string;
  sinceSeq?: number;
  untilSeq?: number;
  opId?: string;
}

export interface RestoreAnswer {
  ok: true;
  seq: number;
  applied?: number;
  restored: number;
  duplicate?: true;
}

/** How a Yjs root type is read (docs/data-model.md#reading). */
export type YdocRootKind = 'text' | 'map' | 'array' | 'xml';

export interface RootRead {
  id: string;
  type: 'ydoc';
  seq: number;
  epoch: string | null;
  root: string;
  as: YdocRootKind;
  value: unknown;
}

export class HttpApi {
  constructor(config: ClientConfig);
  request(method: string, path: string, init?: { body?: unknown; query?: Record<string, unknown>; headers?: Record<string, string> }): Promise<any>;
  /** The state, or null when the CRDT does not exist. */
  read(id: string, options?: { format?: 'crdt' }): Promise<ReadState | null>;
  /** One root type of a Yjs document (`yd:` ids) as JSON; `as` defaults to text. */
  readRoot(id: string, root: string, options?: { as?: YdocRootKind; at?: number }): Promise<RootRead>;
  list(options?: { prefix?: string; limit?: number; cursor?: string }): Promise<{ crdts: { id: string; type: CrdtType; seq: number }[]; next: string | null }>;
  apply(id: string, op: Op | Op[], options?: { returnState?: boolean; origin?: string }): Promise<OpAnswer>;
  deleteCrdt(id: string): Promise<void>;
  tokenInfo(): Promise<TokenClaims>;
  history(id: string, options?: { before?: number; limit?: number; clientId?: number; origin?: string }): Promise<HistoryPage>;
  /** The state right after op `seq`; rejects with SyncdError 410 `history_expired` when no longer kept. */
  at(id: string, seq: number, options?: { format?: 'crdt' }): Promise<ReadState>;
  restore(id: string, seq: number, options?: { opId?: string }): Promise<RestoreAnswer>;
  /** Take back one writer's ops (docs/revert.md); throws TypeError when it names no writer. */
  revert(id: string, options: RevertOptions): Promise<RevertAnswer>;
}

export interface Delta {
  kind: 'snapshot' | 'op' | 'deleted';
  ns: string;
  id: string;
  type?: CrdtType | null;
  seq?: number;
  epoch?: string | null;
  state?: unknown;
  client_id?: number;
  ts?: number;
  op?: Record<string, any>;
  op_id?: string | null;
}
/** The end of a subscription's start (docs/protocol.md#resuming): where it left the client. Not a delta. */
export interface SyncedMessage {
  kind: 'synced';
  ns: string;
  id: string;
  seq: number;
  epoch: string | null;
}
export type Verdict = 'snapshot' | 'first' | 'apply' | 'duplicate' | 'gap' | 'new_life' | 'deleted';
export interface Position {
  seq: number;
  epoch: string | null;
}
export function classifyDelta(pos: Position, delta: Delta): Verdict;
export function advance(pos: Position, delta: Delta, verdict: Verdict): Position;
export function resumeFields(pos: Position): { since?: number; epoch?: string };

export interface Replica {
  applyDelta(op: Record<string, any>): void;
  view(nowMs?: number): { value: unknown; [extra: string]: unknown };
}
/** Throws a SyncdError `no_replica` for a `ydoc`: a Y.Doc is its replica (docs/yjs.md). */
export function createReplica(type: ReplicaType, state?: unknown): Replica;
/** The replica type an id's prefix fixes, or null (for `yd:` ids too: no replica). */
export function typeForId(id: string): ReplicaType | null;
export const TYPES: ReplicaType[];

type Unsubscribe = () => void;

export class Emitter {
  on(event: string, handler: (...args: any[]) => void): Unsubscribe;
}

export interface ChangeEvent {
  delta: Delta;
  verdict: Verdict;
  seq: number;
  epoch: string | null;
}

export class Subscription extends Emitter {
  readonly id: string;
  type: CrdtType | null;
  seq: number;
  epoch: string | null;
  /**
   * Whether the subscription's start (a snapshot, or the replay of what it
   * missed, even when that was nothing) has all arrived since it was last
   * (re)subscribed: the server's `synced` message, which ends every start,
   * came. False from a disconnect, or from a gap (a missed delta, which
   * resubscribes), until then; each change to true emits `synced` (once per
   * connection, and once more after each gap).
   */
  synced: boolean;
  /** undefined: none asked for; null: none yet, or none of this type (a `ydoc`). */
  replica: Replica | null | undefined;
  /**
   * True once no more deltas come: the socket or stream was closed (by
   * close(), or for good by the server), the subscription was
   * unsubscribed, or the server ended or refused it (`forbidden`: the rule
   * that granted its read expired). `close` was emitted then.
   */
  closed: boolean;
  /** The local replica's read view, a copy the caller may change; null before the first snapshot or without a replica. */
  view(nowMs?: number): { value: unknown; [extra: string]: unknown } | null;
  value(nowMs?: number): any;
  resumeFields(): { since?: number; epoch?: string };
  /** For transports: the server's `synced` message for this id (sets `synced` when at this position). */
  handleSynced(message: SyncedMessage): void;
  /** For transports: the start is all in (sets `synced`, emits `synced`). */
  markSynced(): void;
  handleDelta(delta: Delta): void;
  /** For transports: no more deltas come (sets `closed`, clears `synced`, emits `close` once with `reason`). */
  end(reason: Error): void;
  /** Over a SyncSocket: apply an op to this id. */
  apply?(op: Op | Op[]): Promise<Ack>;
  unsubscribe?(): void;
  on(event: 'change', handler: (event: ChangeEvent) => void): Unsubscribe;
  on(event: 'delta', handler: (delta: Delta, verdict: Verdict) => void): Unsubscribe;
  on(event: 'gap', handler: (info: { have: number; got: number; verdict: Verdict }) => void): Unsubscribe;
  on(event: 'synced', handler: () => void): Unsubscribe;
  on(event: 'error', handler: (error: Error) => void): Unsubscribe;
  /**
   * Once, when the subscription ends (see `closed`): with a SyncdError
   * `closed`, the error that stopped its transport (a TokenRevokedError...),
   * or the server's error that ended it (`forbidden`...).
   */
  on(event: 'close', handler: (reason: Error) => void): Unsubscribe;
}

/**
 * A SyncSocket's options. Each timer option left out or `undefined` (as a
 * wrapper passes on one it was not given) is its default; any other value out
 * of its bounds below is a RangeError where the socket is made (timers would
 * take it as 1 ms).
 */
export interface SocketOptions {
  /** The wire encoding; default 'msgpack'. */
  encoding?: 'msgpack' | 'json';
  /** The first reconnect delay (ms), doubled per failed attempt up to maxReconnectMs; default 100. From 0 to 2^31 - 1, or a RangeError. */
  minReconnectMs?: number;
  /** The longest reconnect delay (ms); default 5000. From 0 to 2^31 - 1, or a RangeError. */
  maxReconnectMs?: number;
  /** A ping this often (ms) keeps an idle connection open through proxies; default 15000. A positive number, Infinity for off (no pings, nor the pong check); else a RangeError. */
  pingIntervalMs?: number;
  /** A connection silent this long (ms) after a ping is taken as dead and reopened; default 10000. A positive number, Infinity for never; else a RangeError. */
  pongTimeoutMs?: number;
  /** A gap's resubscribe that brings nothing within this long (ms) is sent again; default 5000. A positive number, Infinity for never; else a RangeError. */
  resyncTimeoutMs?: number;
  /** A connection attempt not open after this long (ms) is abandoned and retried; default 10000. A positive number, Infinity for never; else a RangeError. */
  connectTimeoutMs?: number;
  /** The WebSocket class, when the client's config names none; default globalThis.WebSocket. */
  WebSocket?: unknown;
}
export interface SubscribeOptions {
  /**
   * Keep a local replica (default true). A Yjs document (`ydoc`) has none:
   * `replica` stays null and its deltas are passed on, for their Yjs updates
   * (a snapshot's `state.update`, an op's `op.update`) to go to a Y.Doc.
   * `true` for a `yd:` id throws a SyncdError `no_replica`; for an id that
   * turns out a ydoc, that error comes once on `error`, and the deltas still do.
   */
  replica?: boolean;
  onChange?: (event: ChangeEvent) => void;
  onDelta?: (delta: Delta, verdict: Verdict) => void;
  onError?: (error: Error) => void;
}

export class SyncSocket extends Emitter {
  constructor(config: ClientConfig, options?: SocketOptions);
  readonly state: 'idle' | 'connecting' | 'open' | 'closed';
  readonly pendingOps: number;
  connect(): Promise<void>;
  /**
   * While connecting or reconnecting, the subscribe goes out once the socket
   * is open. Throws a SyncdError `closed` once the socket was closed (by
   * close(), or for good after a revoked or expired fixed token), and a
   * SyncdError `already_subscribed` (status 0) for an id this socket
   * follows already: unsubscribe() it first, or use that subscription.
   */
  subscribe(id: string, options?: SubscribeOptions): Subscription & { apply(op: Op | Op[]): Promise<Ack>; unsubscribe(): void };
  unsubscribe(id: string): void;
  /**
   * The last presence `update` acked per id (until a `leave`) is sent again,
   * with a fresh op_id, after each reconnect: the server left it when the
   * old connection closed. Rejects with a SyncdError `closed` once closed,
   * and at once, unsent, with a SyncdError `bad_request` (status 400) for an
   * op the server could not read (an unpaired surrogate) or the encoding
   * cannot write (a BigInt in JSON); with a SyncdError `payload_too_large`
   * (status 413) for an op over the server's body limit (it closed the
   * connection with 1009), which is not sent again.
   */
  op(id: string, op: Op | Op[]): Promise<Ack>;
  /**
   * Close for good: no reconnect, no timer left; unacknowledged ops reject
   * and every subscription ends (`close`) with `reason` or a SyncdError `closed`.
   */
  close(reason?: Error): void;
  on(event: 'status', handler: (state: SyncSocket['state']) => void): Unsubscribe;
  on(event: 'open', handler: () => void): Unsubscribe;
  on(event: 'disconnect' | 'error', handler: (error: Error) => void): Unsubscribe;
}
export function wsUrl(baseUrl: string, namespace: string, token: string): string;
/** The close code of a token that expired or was revoked while the socket was open. */
export const CLOSE_TOKEN_ENDED: 4401;

/**
 * The longest SSE event a stream takes (characters): past it, a SyncdError
 * `message_too_large` ends the stream. Twice the server's default
 * SERVICE_MAX_CRDT_BYTES: a snapshot of a CRDT at that limit, in base64, fits.
 */
export const MAX_EVENT_CHARS: 134217728;
export class SseParser {
  /** `maxEventChars` (default MAX_EVENT_CHARS; Infinity for none; else a positive number, or a RangeError): past it, `events()` throws a SyncdError `message_too_large`. */
  constructor(maxEventChars?: number);
  /**
   * The `message_too_large` error once an event passed the bound: thrown by
   * every later call. When the chunk that held it completed events before it,
   * those were returned and this is set (check it after handling them).
   */
  error: SyncdError | null;
  /** Each complete event: `event` is `'message'` for a delta, `'end'` for the stream's last. An event past the bound throws, after any events the same chunk completed before it were returned (see `error`). */
  events(chunk: string): { event: string; data: string }[];
  /** The data of each complete delta (unnamed) event. */
  feed(chunk: string): string[];
}
/** The error an `end` event's data stands for (TokenRevokedError for `token_revoked`). */
export function endError(data: string): SyncdError;
export function decodeSseData(data: string): Delta;
/**
 * The longest `Retry-After` a stream reconnect waits (ms): a refusal asking
 * for longer (a 429's header) is retried after this, as the Python client's
 * streams cap it.
 */
export const RETRY_AFTER_MAX_MS: 10000;
/** The default `timeoutMs` of HTTP calls (ClientConfig), as the Python client's DEFAULT_TIMEOUT_S. */
export const HTTP_TIMEOUT_MS: 10000;
/**
 * The default `readTimeoutMs` of an EventStream: a stream with nothing from
 * the server (its pings included) for this long is taken as dead and
 * reopened, resuming. The eventsource transport asks for its pings as events
 * (`?ping=event`), since an EventSource hides the `: ping` comments.
 */
export const READ_TIMEOUT_MS: 45000;
export class EventStream extends Emitter {
  constructor(
    config: ClientConfig,
    id: string,
    options?: {
      transport?: 'auto' | 'eventsource' | 'fetch';
      replica?: boolean;
      /** The first reconnect delay, doubled per failed attempt up to maxReconnectMs; default 100. From 0 to 2^31 - 1, or a RangeError. */
      minReconnectMs?: number;
      /** Default 5000. From 0 to 2^31 - 1, or a RangeError. */
      maxReconnectMs?: number;
      /** Silence (no event, no ping) after which the stream is reopened; default READ_TIMEOUT_MS, Infinity for never; else a positive number, or a RangeError. The eventsource transport asks for pings as events (`?ping=event`) to see them: against a server without them, set it to Infinity or a quiet stream is reopened each time it passes. */
      readTimeoutMs?: number;
      /** Fetch transport: the longest event taken; past it the stream ends with `message_too_large`. Default MAX_EVENT_CHARS, Infinity for none; else a positive number, or a RangeError. */
      maxEventChars?: number;
      EventSource?: unknown;
    },
  );
  readonly transport: 'eventsource' | 'fetch';
  readonly state: 'connecting' | 'open' | 'closed';
  readonly subscription: Subscription;
  /** Close for good: no reconnect; the subscription ends (`close`) with `reason` or a SyncdError `closed`. */
  close(reason?: Error): void;
}

export function formatId(client: number | bigint, counter: number | bigint): string;
/** Each part a number, or a bigint past Number.MAX_SAFE_INTEGER (exact, as the server reads ids). */
export function parseId(id: string): [client: number | bigint, counter: number | bigint];
export class RgaReplica {
  static fromState(state: unknown): RgaReplica;
  readonly length: number;
  elements: { client: number; counter: number; value: unknown; deleted: boolean }[];
  has(id: string): boolean;
  applyDelta(op: Record<string, any>): void;
  values(): unknown[];
  text(): string;
  ids(): string[];
  idAt(index: number): string;
  indexOf(id: string): number;
  view(): { value: unknown[]; text?: string };
}

export interface TextChange {
  /** Whether the change is the local user's own edit (already on screen). */
  local: boolean;
  value: string;
  /** Where a code-point index of the text before the change is now. */
  mapIndex(index: number): number;
}
export class CollabText extends Emitter {
  constructor(options: { send: (op: Op) => Promise<{ seq: number; ids?: string[] }>; clientId?: number });
  readonly value: string;
  readonly length: number;
  readonly pendingEdits: number;
  seq: number;
  epoch: string | null;
  replica: RgaReplica;
  attach(subscription: Subscription): Unsubscribe;
  receive(delta: Delta, verdict: Verdict): void;
  edit(index: number, deleteCount: number, text?: string): void;
  replace(value: string, cursor?: number): { index: number; deleteCount: number; text: string } | null;
  refAt(index: number): string | null;
  sharedRefAt(index: number): string | null;
  indexOfRef(ref: string | null | undefined): number;
  on(event: 'change', handler: (change: TextChange) => void): Unsubscribe;
  on(event: 'error', handler: (error: Error) => void): Unsubscribe;
}
export function diffText(before: string, after: string, cursor?: number): { index: number; deleteCount: number; text: string } | null;
export function codePointIndex(text: string, offset: number): number;
export function utf16Offset(text: string, index: number): number;
export function canonicalJson(value: unknown): string;

export interface ToolDefinition {
  name: string;
  description: string;
  input_schema: { type: 'object'; properties: Record<string, unknown>; required?: string[]; additionalProperties?: boolean };
}
/** Each type's tool actions beyond `read`; a ydoc has `history` and `revert`. */
export const TOOL_ACTIONS: Readonly<Record<CrdtType, readonly ToolAction[]>>;
export type ToolAction = 'read' | 'increment' | 'set' | 'add' | 'history' | 'restore' | 'revert';
export const MAX_ORIGIN_LENGTH: number;
/** Tool names are at most this long (OpenAI's and Anthropic's limit). */
export const MAX_TOOL_NAME_LENGTH: number;
/** The longest tool result by default, in characters of its JSON (docs/clients.md#large-values). */
export const DEFAULT_MAX_RESULT_CHARS: number;
/** The smallest `maxResultChars` accepted. */
export const MIN_MAX_RESULT_CHARS: number;
/** The longest one tool call takes by default (30 s) before a SyncdError `timeout` with `retryAfter`. */
export const DEFAULT_CALL_TIMEOUT_MS: number;
export function toolName(action: ToolAction, crdtId: string): string;
export function parseToolName(name: string): { action: ToolAction; crdtId: string } | null;
export function buildTools(crdts: Array<[crdtId: string, type: CrdtType]>): ToolDefinition[];
export function toOpenAiTools(tools: ToolDefinition[]): { type: 'function'; function: { name: string; description: string; parameters: ToolDefinition['input_schema'] } }[];
export function executeTool(
  http: HttpApi,
  crdts: Array<[string, CrdtType]>,
  name: string,
  input?: Record<string, unknown>,
  options?: { origin?: string; maxResultChars?: number; callTimeoutMs?: number },
): Promise<unknown>;
/**
 * With `{origin}`, every op the tools make carries that origin; `maxResultChars` bounds every result;
 * a call running longer than `callTimeoutMs` throws a SyncdError `timeout` (with `retryAfter`).
 */
export function createAgentTools(
  http: HttpApi,
  crdts: Array<[string, CrdtType]>,
  options?: { origin?: string; maxResultChars?: number; callTimeoutMs?: number },
): {
  definitions: ToolDefinition[];
  maxResultChars: number;
  callTimeoutMs: number;
  execute(name: string, input?: Record<string, unknown>): Promise<unknown>;
};

export class SyncdClient {
  constructor(config: ClientConfig, options?: { socket?: SocketOptions });
  readonly config: ClientConfig;
  readonly http: HttpApi;
  /** Claims of a string token (decoded locally), else null. */
  readonly claims: TokenClaims | null;
  /** The shared WebSocket, created on first use. */
  readonly socket: SyncSocket;
  read(id: string, options?: { format?: 'crdt' }): Promise<ReadState | null>;
  readRoot(id: string, root: string, options?: { as?: YdocRootKind; at?: number }): Promise<RootRead>;
  list(options?: { prefix?: string; limit?: number; cursor?: string }): ReturnType<HttpApi['list']>;
  apply(id: string, op: Op | Op[], options?: { returnState?: boolean; origin?: string }): Promise<OpAnswer>;
  deleteCrdt(id: string): Promise<void>;
  tokenInfo(): Promise<TokenClaims>;
  history(id: string, options?: { before?: number; limit?: number; clientId?: number; origin?: string }): Promise<HistoryPage>;
  at(id: string, seq: number, options?: { format?: 'crdt' }): Promise<ReadState>;
  restore(id: string, seq: number, options?: { opId?: string }): Promise<RestoreAnswer>;
  revert(id: string, options: RevertOptions): Promise<RevertAnswer>;
  increment(id: string, amount?: number, opts?: OpOptions): Promise<OpAnswer>;
  decrement(id: string, amount?: number, opts?: OpOptions): Promise<OpAnswer>;
  add(id: string, element: unknown, opts?: OpOptions): Promise<OpAnswer>;
  remove(id: string, element: unknown, opts?: OpOptions): Promise<OpAnswer>;
  set(id: string, value: unknown, opts?: OpOptions & { timestamp?: number }): Promise<OpAnswer>;
  /** Over HTTP: the entry is not tied to a connection (it lasts its TTL) and is not announced again on reconnect; send `ops.updatePresence` over the socket for that. */
  updatePresence(id: string, data?: Record<string, unknown>, opts?: OpOptions & { ttlMs?: number }): Promise<OpAnswer>;
  leavePresence(id: string, opts?: OpOptions): Promise<OpAnswer>;
  insertAt(id: string, index: number, content: string | unknown[], opts?: OpOptions): Promise<OpAnswer>;
  insertAfter(id: string, after: string | null, content: string | unknown[], opts?: OpOptions): Promise<OpAnswer>;
  deleteAt(id: string, index: number, count?: number, opts?: OpOptions): Promise<OpAnswer>;
  deleteIds(id: string, ids: string[], opts?: OpOptions): Promise<OpAnswer>;
  addNode(id: string, nodeId: string, parent?: string, opts?: OpOptions & { data?: Record<string, unknown>; pos?: string }): Promise<OpAnswer>;
  moveNode(id: string, nodeId: string, parent: string, opts?: OpOptions & { pos?: string }): Promise<OpAnswer>;
  updateNode(id: string, nodeId: string, data: Record<string, unknown>, opts?: OpOptions): Promise<OpAnswer>;
  deleteNode(id: string, nodeId: string, opts?: OpOptions): Promise<OpAnswer>;
  /** See SyncSocket#subscribe: queued while reconnecting, a SyncdError `closed` after close(), `already_subscribed` for an id followed already. */
  subscribe(id: string, options?: SubscribeOptions): ReturnType<SyncSocket['subscribe']>;
  send(id: string, op: Op | Op[]): Promise<Ack>;
  /** An SSE stream, closed by close(); throws a SyncdError `closed` after close(). */
  events(id: string, options?: ConstructorParameters<typeof EventStream>[2]): EventStream;
  agentTools(
    crdts: Array<[string, CrdtType]>,
    options?: { origin?: string; maxResultChars?: number; callTimeoutMs?: number },
  ): ReturnType<typeof createAgentTools>;
  /** Close the socket (even one not made yet) and every stream events() made, for good; HTTP calls still work. */
  close(): void;
}

export function base64Decode(text: string): Uint8Array;
export function base64urlDecode(text: string): Uint8Array;
export function base64urlEncode(bytes: Uint8Array): string;
