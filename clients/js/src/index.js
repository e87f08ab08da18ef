// @syncd/client: the public surface.

export { SyncdClient } from './client.js';
export { HTTP_TIMEOUT_MS, HttpApi } from './http.js';
export { CLOSE_TOKEN_ENDED, SyncSocket, wsUrl } from './ws.js';
export { EventStream, MAX_EVENT_CHARS, READ_TIMEOUT_MS, RETRY_AFTER_MAX_MS, SseParser, decodeSseData, endError } from './sse.js';
export { Subscription } from './subscription.js';
export { Emitter } from './emitter.js';
export { classifyDelta, advance, resumeFields } from './stream.js';
export { createReplica, typeForId, TYPES } from './replicas.js';
export { RgaReplica, formatId, parseId } from './rga.js';
export { CollabText, diffText, codePointIndex, utf16Offset } from './text.js';
export { decodeToken, validateToken } from './token.js';
export { SyncdError, TokenExpiredError, TokenParseError, TokenRevokedError } from './errors.js';
export { ops } from './ops.js';
export { canonicalJson } from './canonical.js';
export {
  buildTools,
  createAgentTools,
  DEFAULT_CALL_TIMEOUT_MS,
  DEFAULT_MAX_RESULT_CHARS,
  executeTool,
  MAX_ORIGIN_LENGTH,
  MAX_TOOL_NAME_LENGTH,
  MIN_MAX_RESULT_CHARS,
  parseToolName,
  toolName,
  toOpenAiTools,
  TOOL_ACTIONS,
} from './tools.js';
export { base64Decode, base64urlDecode, base64urlEncode } from './base64.js';
