// @ts-check
/**
 * jetway.js: the browser (and Node) client of Jetway's wire protocol v1.
 *
 * One WebSocket per chat session. Requests carry client-made ids; chunks are
 * reassembled in seq order and deduplicated; a lost connection is reopened
 * with jittered exponential backoff under the same session id, and every
 * unfinished request is resumed from its last contiguous seq (or sent again
 * if the server never acknowledged it: requests are idempotent). Tokens are
 * refreshed through `getToken` before they expire, and a draining server
 * hands the session to a new connection. No dependencies: load it with
 * `<script type="module">`, import it from a bundler, or use it in Node with
 * an injected WebSocket constructor (for example the `ws` package).
 *
 *     import { connect } from './jetway.js';
 *     const client = connect({ url: 'wss://chat.example.com/v1/ws', getToken });
 *     const call = client.send({ messages: [{ role: 'user', content: 'Hello' }] });
 *     for await (const chunk of call) output.append(chunk.text);
 *     const done = await call.result; // usage, ttft_ms, latency_ms ...
 *
 * @module jetway
 */

/** The protocol version this client speaks (the WebSocket subprotocol). */
export const SUBPROTOCOL = 'jetway.v1';

// ---------------------------------------------------------------------------
// Frames (PROTOCOL.md). Every frame is a JSON text frame with a `type`.

/** @typedef {'user'|'assistant'} Role */

/**
 * One turn of the conversation: its content is a string (text only) or a
 * list of content blocks.
 * @typedef {Object} Message
 * @property {Role} role
 * @property {string|ContentBlock[]} content
 */

/**
 * @typedef {Object} TextBlock
 * @property {'text'} type
 * @property {string} text not empty
 */

/** @typedef {'png'|'jpeg'|'gif'|'webp'} ImageFormat */

/**
 * An image (at most 3.75 MiB decoded, 20 per request); make one with {@link imageBlock}.
 * @typedef {Object} ImageBlock
 * @property {'image'} type
 * @property {ImageFormat} format
 * @property {string} data standard padded base64
 */

/** @typedef {'pdf'|'csv'|'doc'|'docx'|'xls'|'xlsx'|'html'|'txt'|'md'} DocumentFormat */

/**
 * A document (at most 4.5 MiB decoded, 5 per request); make one with {@link documentBlock}.
 * @typedef {Object} DocumentBlock
 * @property {'document'} type
 * @property {DocumentFormat} format
 * @property {string} name 1-200 chars: letters, digits, single spaces, -, (), []
 * @property {string} data standard padded base64
 */

/**
 * A tool call of the model (assistant turns; an answer's blocks).
 * @typedef {Object} ToolUseBlock
 * @property {'tool_use'} type
 * @property {string} id
 * @property {string} name
 * @property {Record<string, unknown>} input
 */

/**
 * The result of a tool call (user turns); see {@link nextTurn}.
 * @typedef {Object} ToolResultBlock
 * @property {'tool_result'} type
 * @property {string} tool_use_id the id of the ToolUseBlock it answers
 * @property {Array<TextBlock|ImageBlock|DocumentBlock>} content
 * @property {'success'|'error'} [status]
 */

/**
 * A reasoning model's thinking (assistant turns; an answer's blocks). Send
 * the signature back unchanged.
 * @typedef {Object} ReasoningBlock
 * @property {'reasoning'} type
 * @property {string} text
 * @property {string} [signature]
 */

/** @typedef {TextBlock|ImageBlock|DocumentBlock|ToolUseBlock|ToolResultBlock|ReasoningBlock} ContentBlock */

/** @typedef {TextBlock|ReasoningBlock|ToolUseBlock} AnswerBlock a block of `done.blocks` */

/**
 * A function the model may call.
 * @typedef {Object} Tool
 * @property {string} name 1-64 chars of [A-Za-z0-9_-], unique
 * @property {string} [description] at most 4096 bytes
 * @property {Record<string, unknown>} input_schema a JSON Schema object
 */

/** @typedef {'auto'|'any'|{name: string}} ToolChoice */

/**
 * @typedef {Object} ReasoningOptions
 * @property {number} budget_tokens at least 1024; below max_tokens when that is given
 */

/**
 * What {@link Client#send} takes: a request without its `type`.
 * @typedef {Object} Request
 * @property {string} [request_id] client-made, 8-64 chars of [A-Za-z0-9_-], unique per user; default: a random one ({@link newId})
 * @property {Message[]} messages
 * @property {string} [system]
 * @property {string} [model] one of the app's allowed models; default: the app's default model
 * @property {number} [max_tokens]
 * @property {number} [temperature]
 * @property {Tool[]} [tools] functions the model may call (the model needs the `tools` capability)
 * @property {ToolChoice} [tool_choice] needs tools
 * @property {ReasoningOptions} [reasoning] let a reasoning model think (the `reasoning` capability)
 */

/**
 * Client -> server: ask for an answer. Idempotent per request_id.
 * @typedef {Object} RequestFrame
 * @property {'request'} type
 * @property {string} request_id
 * @property {Message[]} messages
 * @property {string} [system]
 * @property {string} [model]
 * @property {number} [max_tokens]
 * @property {number} [temperature]
 * @property {Tool[]} [tools]
 * @property {ToolChoice} [tool_choice]
 * @property {ReasoningOptions} [reasoning]
 * @property {number} [after_seq] for a request the server already knows: replay chunks after this seq
 */

/**
 * Client -> server: replay chunks with seq > after_seq, then continue live.
 * @typedef {Object} ResumeFrame
 * @property {'resume'} type
 * @property {string} request_id
 * @property {number} after_seq
 */

/**
 * Client -> server: stop generation (terminal error `cancelled`).
 * @typedef {Object} CancelFrame
 * @property {'cancel'} type
 * @property {string} request_id
 */

/**
 * Client -> server: replace the session's credentials before they expire.
 * @typedef {Object} AuthFrame
 * @property {'auth'} type
 * @property {string} token
 */

/**
 * Client -> server: application ping (browsers cannot send WebSocket pings).
 * @typedef {Object} PingFrame
 * @property {'ping'} type
 * @property {number} [t]
 */

/** @typedef {RequestFrame|ResumeFrame|CancelFrame|AuthFrame|PingFrame} ClientFrame */

/**
 * Server -> client, first frame of every connection.
 * @typedef {Object} ReadyFrame
 * @property {'ready'} type
 * @property {string} session_id
 * @property {string} user the token's `sub`
 * @property {string} tenant
 * @property {string} app
 * @property {string} protocol
 * @property {number} heartbeat_s
 * @property {string} expires_at RFC 3339 expiry of the token
 */

/**
 * The tightest quota window of the request's tenant/app/user.
 * @typedef {Object} Quota
 * @property {'minute'|'hour'|'day'|'month'|string} window
 * @property {number} limit
 * @property {number} remaining
 */

/**
 * Server -> client: the request landed (sent before any chunk).
 * @typedef {Object} AcceptedFrame
 * @property {'accepted'} type
 * @property {string} request_id
 * @property {string} model
 * @property {number} reserved_tokens
 * @property {Quota|null} [quota]
 * @property {boolean} cached
 */

/**
 * Server -> client: a piece of the answer; seq is 1, 2, 3, ... per request.
 * A chunk belongs to one content block of the answer: `block` (absent: 0)
 * and `kind` (absent: text). Only text chunks carry text.
 * @typedef {Object} ChunkFrame
 * @property {'chunk'} type
 * @property {string} request_id
 * @property {number} seq
 * @property {string} text
 * @property {number} [block]
 * @property {'reasoning'|'tool_use'} [kind]
 * @property {string} [reasoning] reasoning: a piece of the thinking
 * @property {string} [signature] reasoning: (a piece of) the block's signature
 * @property {string} [id] tool_use: the call's id (its first chunk)
 * @property {string} [name] tool_use: the tool's name (its first chunk)
 * @property {string} [input] tool_use: a fragment of the input JSON
 */

/**
 * @typedef {Object} Usage
 * @property {number} input_tokens
 * @property {number} output_tokens
 */

/**
 * Server -> client: the answer is complete.
 * @typedef {Object} DoneFrame
 * @property {'done'} type
 * @property {string} request_id
 * @property {number} chunks the last seq
 * @property {string} text the complete answer
 * @property {string} model
 * @property {boolean} cached
 * @property {Usage} usage
 * @property {string} stop_reason
 * @property {number} ttft_ms measured by the server from request arrival
 * @property {number} latency_ms measured by the server from request arrival
 * @property {AnswerBlock[]} [blocks] the complete answer block by block; present when the request used tools or reasoning or the answer has a block that is not text
 */

/**
 * @typedef {'invalid_request'|'unauthorized'|'forbidden'|'model_not_allowed'|'not_found'|'conflict'|
 *   'quota_exceeded'|'rate_limited'|'cancelled'|'internal'|'model_error'|'model_unavailable'|'busy'|
 *   'draining'|'timeout'|'interrupted'|'closed'|string} ErrorCode
 */

/**
 * Server -> client: a request failed (terminal), or, without request_id, a
 * session-level problem.
 * @typedef {Object} ErrorFrame
 * @property {'error'} type
 * @property {string} [request_id]
 * @property {ErrorCode} code
 * @property {number} status HTTP-like
 * @property {string} message
 * @property {boolean} retryable
 * @property {number} [retry_after_ms]
 * @property {number} [chunks] what was streamed before the failure
 * @property {string} [text] what was streamed before the failure
 */

/**
 * Server -> client: this server is shutting down; move new work elsewhere.
 * @typedef {Object} DrainingFrame
 * @property {'draining'} type
 * @property {number} reconnect_after_ms
 */

/**
 * Server -> client: the `auth` frame's token was accepted.
 * @typedef {Object} AuthOkFrame
 * @property {'auth_ok'} type
 * @property {string} expires_at
 */

/**
 * @typedef {Object} PongFrame
 * @property {'pong'} type
 * @property {number} [t]
 */

/** @typedef {ReadyFrame|AcceptedFrame|ChunkFrame|DoneFrame|ErrorFrame|DrainingFrame|AuthOkFrame|PongFrame} ServerFrame */

// ---------------------------------------------------------------------------
// Client API types.

/**
 * Why the client asks for a token.
 * - `connect`: opening a connection; a cached token is fine.
 * - `refresh`: the session's token expires soon; return a new one.
 * - `rejected`: the server refused the last token (close 4001, or a failed
 *   connection); return a new one.
 * @typedef {'connect'|'refresh'|'rejected'} TokenReason
 */

/**
 * @callback GetToken
 * @param {{force: boolean, reason: TokenReason}} ctx force: the cached token will not do
 * @returns {string|Promise<string>} a JWT
 */

/**
 * A WebSocket constructor: the browser's, Node 22's global one, or `ws`.
 * @typedef {new (url: string, protocols: string[]) => WebSocketLike} WebSocketConstructor
 */

/**
 * The part of the WebSocket interface the client uses.
 * @typedef {Object} WebSocketLike
 * @property {string} protocol
 * @property {number} readyState
 * @property {(data: string) => void} send
 * @property {(code?: number, reason?: string) => void} close
 * @property {((ev: any) => void)|null} onopen
 * @property {((ev: any) => void)|null} onmessage
 * @property {((ev: any) => void)|null} onclose
 * @property {((ev: any) => void)|null} onerror
 */

/**
 * @typedef {Object} ConnectOptions
 * @property {string} [url] the gateway's WebSocket endpoint, e.g. wss://chat.example.com/v1/ws
 * @property {string[]} [urls] several endpoints: a reconnect after a failure or a drain moves to the next
 * @property {GetToken} getToken returns a bearer token; called on every connect and refresh
 * @property {string} [sessionId] the chat session's id (8-64 chars of [A-Za-z0-9_-]); default: random, kept across reconnects
 * @property {WebSocketConstructor} [WebSocket] default: globalThis.WebSocket
 * @property {number} [minBackoffMs] first reconnect delay bound (default 100); the first retry after a drop is immediate
 * @property {number} [maxBackoffMs] largest reconnect delay (default 5000)
 * @property {number} [acceptTimeoutMs] re-send a request with no `accepted` after this long (default 10000; negative: never)
 * @property {number} [retryRefusedForMs] an accepted call whose resumes are refused (a retryable `error` without `chunks`, e.g. `busy`) resumes again after `retry_after_ms` for at most this long, then ends with the refusal (default 30000)
 * @property {number} [refreshBeforeMs] send `auth` with a fresh token this long before expiry (default 60000; negative: never)
 * @property {number} [connectTimeoutMs] give up on a connection with no `ready` after this long (default 10000)
 * @property {number} [pingIntervalMs] application ping interval; default the server's heartbeat_s. A connection silent for 2.5 intervals is dropped and reopened
 * @property {number} [maxFrameBytes] largest request frame to send (default 262144, the server's default JETWAY_MAX_FRAME_BYTES)
 * @property {number} [maxAttachmentFrameBytes] largest request frame with an image or document block (default 8388608, the server's default JETWAY_MAX_ATTACHMENT_FRAME_BYTES)
 * @property {(ev: StateEvent) => void} [onState] shorthand for client.on('state', ...)
 */

/**
 * One measure of one limit in the caller's standing ({@link Client#me}):
 * exactly one of `tokens`, `requests` and `usd` is set (the limit in that
 * measure), and `used` and `remaining` are in it (dollars for usd).
 * @typedef {Object} StandingEntry
 * @property {'tenant'|'app'|'user'|string} scope whose limit: the tenant's, the app's, or this user's within the app
 * @property {'minute'|'hour'|'day'|'month'|string} window
 * @property {number} [tokens]
 * @property {number} [requests]
 * @property {number} [usd]
 * @property {number} used in the window instance holding now, requests in flight at what they reserved
 * @property {number} remaining the limit less used, never below 0
 * @property {string} resets_at RFC 3339 (UTC): the end of that window instance
 */

/**
 * The caller's own standing: `GET /v1/me` of the admin API (docs/admin.md).
 * @typedef {Object} Standing
 * @property {string} tenant
 * @property {string} app
 * @property {string} user the token's `sub`
 * @property {StandingEntry[]} limits every limit admission reserves against for this caller, one entry per measure
 * @property {boolean} disabled the user's new requests are refused
 */

/**
 * @typedef {Object} MeOptions
 * @property {string|URL} [url] where to ask; default: the gateway of the current connection (or of the
 *   next attempt), its WebSocket URL with `ws:` as `http:`, `wss:` as `https:` and the path `/v1/me`
 * @property {number} [timeoutMs] give up after this long (default 10000), with code `timeout`
 * @property {AbortSignal} [signal] abort the call (code `cancelled`)
 */

/**
 * - `connecting`: opening the first connection
 * - `connected`: ready for requests
 * - `reconnecting`: the connection was lost; trying again (see attempt, delayMs)
 * - `draining`: the server is shutting down; a new connection is being opened while the old one finishes its answers
 * - `closed`: {@link Client#close} was called
 * @typedef {'connecting'|'connected'|'reconnecting'|'draining'|'closed'} ConnectionState
 */

/**
 * @typedef {Object} StateEvent
 * @property {ConnectionState} state
 * @property {string} [url] the endpoint concerned
 * @property {number} [attempt] failed attempts so far
 * @property {number} [delayMs] wait before the next attempt
 * @property {number} [code] close code of the connection that ended
 * @property {string} [reason]
 * @property {unknown} [error]
 */

/**
 * @typedef {Object} CloseEvent
 * @property {number} code
 * @property {string} reason
 * @property {string} url
 */

/**
 * @typedef {Object} ClientEvents
 * @property {StateEvent} state connection state changes
 * @property {ReadyFrame} ready every (re)connection
 * @property {DrainingFrame} draining
 * @property {AuthOkFrame} auth a token refresh was accepted
 * @property {ErrorFrame|{code: string, message: string, error?: unknown}} error session-level errors (no request_id), token failures
 * @property {CloseEvent} close a connection ended
 */

/** @typedef {'text'|'reasoning'|'tool_use'} ChunkKind */

/**
 * A reassembled piece of an answer: the chunk frame of its seq, with its
 * block index and kind filled in.
 * @typedef {Object} Chunk
 * @property {number} seq
 * @property {string} text text chunks: the text ('' for other kinds)
 * @property {number} block the answer's content block it belongs to
 * @property {ChunkKind} kind
 * @property {string} [reasoning] reasoning chunks
 * @property {string} [signature] reasoning chunks
 * @property {string} [id] tool_use chunks: the first one of the block
 * @property {string} [name] tool_use chunks: the first one of the block
 * @property {string} [input] tool_use chunks: a fragment of the input JSON
 */

/**
 * A content block of the answer as it streams ({@link Call#blocks}). Once
 * the call is done the blocks are done.blocks'.
 * @typedef {StreamedText|StreamedReasoning|StreamedToolUse} StreamedBlock
 */

/**
 * @typedef {Object} StreamedText
 * @property {'text'} type
 * @property {string} text so far
 */

/**
 * @typedef {Object} StreamedReasoning
 * @property {'reasoning'} type
 * @property {string} text so far
 * @property {string} [signature] once streamed
 */

/**
 * @typedef {Object} StreamedToolUse
 * @property {'tool_use'} type
 * @property {string} id
 * @property {string} name
 * @property {string} inputJSON the input JSON received so far
 * @property {Record<string, unknown>} [input] the parsed input, once done
 */

/**
 * What a tool returned, for {@link nextTurn}.
 * @typedef {Object} ToolResult
 * @property {string} tool_use_id the id of the call it answers
 * @property {string|Array<TextBlock|ImageBlock|DocumentBlock>} content a string is one text block
 * @property {'success'|'error'} [status]
 */

/**
 * Callbacks a {@link Call} can be given (also settable as properties).
 * @typedef {Object} CallHandlers
 * @property {(accepted: AcceptedFrame, call: Call) => void} [onAccepted]
 * @property {(chunk: Chunk, call: Call) => void} [onChunk] once per seq, in order
 * @property {(done: DoneFrame, call: Call) => void} [onDone]
 * @property {(error: JetwayError, call: Call) => void} [onError]
 */

/**
 * Delivery counters of one call, before deduplication.
 * @typedef {Object} CallStats
 * @property {number} chunksReceived chunk frames received, duplicates included
 * @property {number} duplicates chunk frames for a seq already delivered
 * @property {number} outOfOrder chunk frames that arrived after a gap
 * @property {number} resends times the request was sent again (no accepted in time, not_found, draining)
 * @property {number} resumes resume frames sent after reconnects
 * @property {number} terminals terminal frames received (replays included)
 * @property {number} refusals retryable refusals of an accepted call's resume (resumed again after retry_after_ms)
 * @property {boolean} mismatch done.text differed from the chunks joined, or done.blocks from the blocks they assembled
 * @property {boolean} keptLonger the terminal error (`interrupted`) held fewer chunks than the call had received: the call and the error keep the call's longer text
 */

// ---------------------------------------------------------------------------

const ID_RE = /^[A-Za-z0-9_-]{8,64}$/;
const MAX_TIMER_MS = 2 ** 31 - 1;
// A connection that ends sooner than this after `ready` does not reset the backoff.
const STABLE_MS = 2000;

const now = () => (globalThis.performance ? globalThis.performance.now() : Date.now());

/**
 * A random id valid for requests and sessions (22 chars, base64url).
 * @returns {string}
 */
export function newId() {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  let s = '';
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** An error frame (or a local failure) as an Error. */
export class JetwayError extends Error {
  /**
   * @param {Partial<ErrorFrame> & {code: string}} frame
   */
  constructor(frame) {
    super(frame.message || frame.code);
    this.name = 'JetwayError';
    /** @type {ErrorCode} */
    this.code = frame.code;
    /** @type {number} */
    this.status = frame.status ?? 0;
    /** @type {boolean} */
    this.retryable = !!frame.retryable;
    /** @type {number|undefined} milliseconds until a retry can succeed (quota_exceeded: until the window resets) */
    this.retryAfterMs = frame.retry_after_ms;
    /** @type {string|undefined} */
    this.requestId = frame.request_id;
    /** @type {string|undefined} what was streamed before the failure */
    this.text = frame.text;
    /** @type {number|undefined} */
    this.chunks = frame.chunks;
    /** @type {Partial<ErrorFrame>} */
    this.frame = frame;
  }

  /**
   * The server that owned the answer died mid-answer (`interrupted`,
   * retryable): `text` is the longest answer known (the server's saved
   * text, or the call's own when it had received more). Retry by sending
   * the question again as a new request (a new request id).
   */
  get interrupted() {
    return this.code === 'interrupted';
  }
}

// ---------------------------------------------------------------------------
// Content blocks: attachments in, tool calls and reasoning out.

/** @type {Record<string, ImageFormat>} */
const IMAGE_TYPES = { 'image/png': 'png', 'image/jpeg': 'jpeg', 'image/gif': 'gif', 'image/webp': 'webp' };

/** @type {Record<string, DocumentFormat>} by file extension, then by MIME type */
const DOCUMENT_TYPES = {
  pdf: 'pdf', csv: 'csv', doc: 'doc', docx: 'docx', xls: 'xls', xlsx: 'xlsx', html: 'html', htm: 'html', txt: 'txt', md: 'md',
  'application/pdf': 'pdf', 'text/csv': 'csv', 'application/msword': 'doc',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': 'docx',
  'application/vnd.ms-excel': 'xls', 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet': 'xlsx',
  'text/html': 'html', 'text/plain': 'txt', 'text/markdown': 'md',
};

/**
 * An image block from a File, a Blob or bytes, base64-encoded.
 * @param {Blob|ArrayBuffer|ArrayBufferView} data
 * @param {ImageFormat} [format] default: the Blob's MIME type, else the bytes' signature (PNG, JPEG, GIF, WebP)
 * @returns {Promise<ImageBlock>}
 */
export async function imageBlock(data, format) {
  const bytes = await bytesOf(data);
  const f = format ?? (isBlob(data) ? IMAGE_TYPES[data.type] : undefined) ?? sniffImage(bytes);
  if (!f) throw new TypeError('jetway: not a PNG, JPEG, GIF or WebP image; pass its format');
  return { type: 'image', format: f, data: base64(bytes) };
}

/**
 * A document block from a File, a Blob or bytes, base64-encoded.
 * @param {Blob|ArrayBuffer|ArrayBufferView} data
 * @param {{name?: string, format?: DocumentFormat}} [o] name default: the
 *   File's name without its extension, made to fit Bedrock's rule (letters,
 *   digits, single spaces, -, (), []); format default: from the File's
 *   extension or MIME type
 * @returns {Promise<DocumentBlock>}
 */
export async function documentBlock(data, o = {}) {
  const fileName = isBlob(data) && 'name' in data && typeof data.name === 'string' ? data.name : '';
  const dot = fileName.lastIndexOf('.');
  const format = o.format ?? DOCUMENT_TYPES[dot > 0 ? fileName.slice(dot + 1).toLowerCase() : ''] ??
    (isBlob(data) ? DOCUMENT_TYPES[data.type] : undefined);
  if (!format) throw new TypeError('jetway: unknown document format; pass one of pdf, csv, doc, docx, xls, xlsx, html, txt, md');
  const name = (o.name ?? (dot > 0 ? fileName.slice(0, dot) : fileName))
    .replace(/[^A-Za-z0-9\-()[\] ]+/g, ' ').replace(/ +/g, ' ').trim().slice(0, 200).trim() || 'document';
  return { type: 'document', format, name, data: base64(await bytesOf(data)) };
}

/**
 * The tool calls of an answer (its tool_use blocks), in order.
 * @param {DoneFrame} done
 * @returns {ToolUseBlock[]}
 */
export function toolCalls(done) {
  return (done.blocks ?? []).filter(/** @returns {b is ToolUseBlock} */ (b) => b.type === 'tool_use');
}

/**
 * An answer's reasoning, its reasoning blocks joined ('' for none).
 * @param {DoneFrame} done
 * @returns {string}
 */
export function reasoningText(done) {
  let s = '';
  for (const b of done.blocks ?? []) if (b.type === 'reasoning') s += b.text;
  return s;
}

/**
 * An answer as the assistant message of the conversation's next request:
 * its blocks as they came (reasoning with its signature, text, tool calls),
 * else its text. Like the Go client's Done.Turn.
 * @param {DoneFrame} done
 * @returns {Message}
 */
export function assistantTurn(done) {
  if (!done.blocks) return { role: 'assistant', content: done.text };
  /** @type {ContentBlock[]} */
  const said = [];
  for (const b of done.blocks) {
    if (b.type === 'text' && b.text !== '') said.push({ type: 'text', text: b.text });
    else if (b.type === 'reasoning') said.push(b.signature ? { type: 'reasoning', text: b.text, signature: b.signature } : { type: 'reasoning', text: b.text });
    else if (b.type === 'tool_use') said.push({ type: 'tool_use', id: b.id, name: b.name, input: b.input });
  }
  return { role: 'assistant', content: said };
}

/**
 * The next two turns of a tool loop: the assistant's answer
 * ({@link assistantTurn}) and the user's results, one for each tool call.
 * Append them to the conversation and send it again with the same tools.
 * @param {DoneFrame} done an answer with stop_reason `tool_use`
 * @param {ToolResult[]} results
 * @returns {[Message, Message]}
 */
export function nextTurn(done, results) {
  const calls = toolCalls(done);
  if (calls.length === 0) throw new TypeError('jetway: the answer calls no tool');
  const answered = new Set(results.map((r) => r.tool_use_id));
  for (const c of calls) {
    if (!answered.has(c.id)) throw new TypeError(`jetway: no result for tool call ${c.id} (${c.name})`);
  }
  /** @type {ToolResultBlock[]} */
  const back = results.map((r) => {
    if (!calls.some((c) => c.id === r.tool_use_id)) throw new TypeError(`jetway: the answer has no tool call ${r.tool_use_id}`);
    if (r.content === '') throw new TypeError(`jetway: the result of tool call ${r.tool_use_id} is empty`);
    /** @type {ToolResultBlock} */
    const out = { type: 'tool_result', tool_use_id: r.tool_use_id,
      content: typeof r.content === 'string' ? [{ type: 'text', text: r.content }] : r.content };
    if (r.status) out.status = r.status;
    return out;
  });
  return [assistantTurn(done), { role: 'user', content: back }];
}

/**
 * @param {unknown} v
 * @returns {v is Blob}
 */
function isBlob(v) {
  return typeof Blob === 'function' && v instanceof Blob;
}

/**
 * @param {Blob|ArrayBuffer|ArrayBufferView} data
 * @returns {Promise<Uint8Array>}
 */
async function bytesOf(data) {
  if (isBlob(data)) return new Uint8Array(await data.arrayBuffer());
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError('jetway: attachments are a File, a Blob, an ArrayBuffer or a typed array');
}

/**
 * The image format of bytes by their signature, or undefined.
 * @param {Uint8Array} b
 * @returns {ImageFormat|undefined}
 */
function sniffImage(b) {
  const at = (/** @type {number} */ i, /** @type {string} */ s) => [...s].every((ch, k) => b[i + k] === ch.charCodeAt(0));
  if (b[0] === 0x89 && at(1, 'PNG')) return 'png';
  if (b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'jpeg';
  if (at(0, 'GIF8')) return 'gif';
  if (at(0, 'RIFF') && at(8, 'WEBP')) return 'webp';
  return undefined;
}

/**
 * Standard padded base64 of bytes.
 * @param {Uint8Array} bytes
 */
function base64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

/**
 * Opens a chat session and returns its client at once; requests sent before
 * the connection is ready are queued.
 * @param {ConnectOptions} options
 * @returns {Client}
 */
export function connect(options) {
  return new Client(options);
}

// The internal state of a Call, under a symbol: invisible to its users.
const kIn = Symbol('internal');

/**
 * @typedef {Object} CallInternals
 * @property {Client} client
 * @property {Conn|null} conn the connection the call was last sent on
 * @property {Map<number, Chunk>} pending chunks that arrived ahead of a gap
 * @property {Chunk[]} chunks delivered chunks, index seq-1
 * @property {(d: DoneFrame|null, e: JetwayError|null) => void} settle
 * @property {ReturnType<typeof setTimeout>|undefined} timer the accept timer
 * @property {Array<() => void>} waiters iterators waiting for more
 * @property {boolean} resumeOnly made by resume(): never sent as a request
 * @property {number} transmits request/resume frames sent so far
 * @property {boolean} cancel a cancel to send with the next transmit
 * @property {number|null} refusedAt first refusal of a resume since the last chunk
 */

/**
 * One request's progress and result. Use the callbacks, iterate the chunks
 * with `for await`, or await `result` (or all three).
 */
export class Call {
  /** @type {CallInternals} */
  [kIn] = { client: /** @type {any} */ (null), conn: null, pending: new Map(), chunks: [], settle: () => {},
    timer: undefined, waiters: [], resumeOnly: false, transmits: 0, cancel: false, refusedAt: null };

  /**
   * @param {Client} client
   * @param {string} id
   * @param {RequestFrame|null} request null for a call made by {@link Client#resume}
   * @param {CallHandlers} [handlers]
   */
  constructor(client, id, request, handlers = {}) {
    /** @type {string} */
    this.id = id;
    /** @type {RequestFrame|null} the request as sent (null for resume()) */
    this.request = request;
    /** @type {string} the answer reassembled so far, in seq order, without duplicates (done.text once done) */
    this.text = '';
    /**
     * The answer's content blocks so far, at their block index: text,
     * reasoning (with its signature) and tool calls (with the input JSON so
     * far; parsed once done). Done: done.blocks (or the text as one block).
     * @type {StreamedBlock[]}
     */
    this.blocks = [];
    /** @type {number} the last contiguous seq received */
    this.lastSeq = 0;
    /** @type {AcceptedFrame|null} */
    this.accepted = null;
    /** @type {DoneFrame|null} */
    this.done = null;
    /** @type {JetwayError|null} */
    this.error = null;
    /** @type {boolean} */
    this.finished = false;
    /** @type {CallStats} */
    this.stats = { chunksReceived: 0, duplicates: 0, outOfOrder: 0, resends: 0, resumes: 0, terminals: 0, refusals: 0, mismatch: false, keptLonger: false };
    /** @type {number} when send() was called (performance.now() ms) */
    this.sentAt = now();
    /** @type {number|null} */
    this.acceptedAt = null;
    /** @type {number|null} */
    this.firstChunkAt = null;
    /** @type {number|null} */
    this.finishedAt = null;
    /** @type {CallHandlers['onAccepted']|null} */
    this.onAccepted = handlers.onAccepted ?? null;
    /** @type {CallHandlers['onChunk']|null} */
    this.onChunk = handlers.onChunk ?? null;
    /** @type {CallHandlers['onDone']|null} */
    this.onDone = handlers.onDone ?? null;
    /** @type {CallHandlers['onError']|null} */
    this.onError = handlers.onError ?? null;

    /** @type {(d: DoneFrame|null, e: JetwayError|null) => void} */
    let settle = () => {};
    /** @type {Promise<DoneFrame>} resolves with the done frame, rejects with a JetwayError */
    this.result = new Promise((resolve, reject) => {
      settle = (d, e) => (e ? reject(e) : resolve(/** @type {DoneFrame} */ (d)));
    });
    // Callers who use only the callbacks must not see unhandled rejections.
    this.result.catch(() => {});

    this[kIn].client = client;
    this[kIn].settle = settle;
    this[kIn].resumeOnly = request === null;
  }

  /** Milliseconds from send() to the first chunk (client-side), or null. */
  get ttftMs() {
    return this.firstChunkAt === null ? null : Math.round(this.firstChunkAt - this.sentAt);
  }

  /** Milliseconds from send() to the terminal frame (client-side), or null. */
  get latencyMs() {
    return this.finishedAt === null ? null : Math.round(this.finishedAt - this.sentAt);
  }

  /** Asks the server to stop; the call ends with code `cancelled`. */
  cancel() {
    this[kIn].client.cancel(this.id);
  }

  /**
   * The chunks in seq order, each once, from the first (whenever the
   * iteration starts); ends after `done`, throws the JetwayError on `error`.
   * @returns {AsyncGenerator<Chunk, void, void>}
   */
  async *[Symbol.asyncIterator]() {
    let i = 0;
    for (;;) {
      const chunks = this[kIn].chunks;
      while (i < chunks.length) yield chunks[i++];
      if (this.error) throw this.error;
      if (this.finished) return;
      await new Promise((resolve) => this[kIn].waiters.push(() => resolve(undefined)));
    }
  }
}

/** One WebSocket of the session. */
class Conn {
  /**
   * @param {WebSocketLike} ws
   * @param {string} url
   * @param {string} token
   */
  constructor(ws, url, token) {
    this.ws = ws;
    this.url = url;
    this.token = token;
    this.alive = true;
    this.draining = false;
    /** @type {ReadyFrame|null} */
    this.ready = null;
    this.readyAt = 0;
    this.lastSeen = now();
    /** @type {ReturnType<typeof setTimeout>|undefined} */
    this.refreshTimer = undefined;
    /** @type {ReturnType<typeof setInterval>|undefined} */
    this.pingTimer = undefined;
  }

  /**
   * @param {ClientFrame} frame
   * @returns {boolean} whether the frame was handed to the socket
   */
  send(frame) {
    if (!this.alive) return false;
    try {
      this.ws.send(JSON.stringify(frame));
      return true;
    } catch {
      return false;
    }
  }

  stopTimers() {
    clearTimeout(this.refreshTimer);
    clearInterval(this.pingTimer);
  }
}

/** A connection attempt that failed before `ready`. */
class ConnectError extends Error {
  /**
   * @param {string} message
   * @param {{code?: number, status?: number, cause?: unknown}} [info]
   */
  constructor(message, info = {}) {
    super(message);
    this.name = 'ConnectError';
    this.code = info.code;
    this.status = info.status;
    this.cause = info.cause;
  }
}

/**
 * A chat session: one live WebSocket at a time (two while a draining server
 * finishes its answers), reopened automatically until {@link Client#close}.
 */
export class Client {
  /** @param {ConnectOptions} options */
  constructor(options) {
    const o = options || /** @type {ConnectOptions} */ ({});
    const urls = o.urls ? [...o.urls] : o.url ? [o.url] : [];
    if (urls.length === 0) throw new TypeError('jetway: connect needs url or urls');
    for (const u of urls) {
      // A bad URL would only ever fail to connect: refuse it here.
      let parsed;
      try {
        parsed = new URL(u);
      } catch {
        throw new TypeError(`jetway: ${JSON.stringify(u)} is not a URL`);
      }
      if ((parsed.protocol !== 'ws:' && parsed.protocol !== 'wss:') || !parsed.host) {
        throw new TypeError(`jetway: ${JSON.stringify(u)} is not a ws:// or wss:// URL`);
      }
    }
    if (typeof o.getToken !== 'function') throw new TypeError('jetway: connect needs getToken');
    const WS = o.WebSocket ?? /** @type {any} */ (globalThis).WebSocket;
    if (typeof WS !== 'function') {
      throw new TypeError('jetway: no WebSocket here; pass options.WebSocket (in Node: the ws package)');
    }
    if (o.sessionId !== undefined && !ID_RE.test(o.sessionId)) {
      throw new TypeError('jetway: sessionId must be 8-64 chars of [A-Za-z0-9_-]');
    }
    /** @private */
    this._o = {
      getToken: o.getToken,
      minBackoffMs: o.minBackoffMs ?? 100,
      maxBackoffMs: o.maxBackoffMs ?? 5000,
      acceptTimeoutMs: o.acceptTimeoutMs ?? 10000,
      retryRefusedForMs: o.retryRefusedForMs ?? 30000,
      refreshBeforeMs: o.refreshBeforeMs ?? 60000,
      connectTimeoutMs: o.connectTimeoutMs ?? 10000,
      pingIntervalMs: o.pingIntervalMs,
      maxFrameBytes: o.maxFrameBytes ?? 262144,
      maxAttachmentFrameBytes: o.maxAttachmentFrameBytes ?? 8388608,
    };
    /** @private @type {WebSocketConstructor} */
    this._WS = WS;
    /** @private */
    this._urls = urls;
    /** @private */
    this._urlIndex = 0;
    /** @type {string} the chat session's id, kept across reconnects */
    this.sessionId = o.sessionId ?? newId();
    /** @type {ConnectionState} */
    this.state = 'connecting';
    /** @type {ReadyFrame|null} the last `ready` frame */
    this.ready = null;
    /** @type {number} successful reconnections (the first connection not counted) */
    this.reconnects = 0;

    /** @private @type {Conn|null} where new work goes */
    this._conn = null;
    /** @private @type {Set<Conn>} every open connection (current and draining) */
    this._conns = new Set();
    /** @private @type {Map<string, Call>} unfinished calls */
    this._calls = new Map();
    /** @private @type {Map<string, Set<(ev: any) => void>>} */
    this._listeners = new Map();
    /** @private */
    this._closed = false;
    /** @private */
    this._dialing = false;
    /** @private */
    this._attempt = 0;
    /** @private consecutive connections that ended right after `ready` */
    this._flaps = 0;
    /** @private the next getToken call must return a fresh token */
    this._force = false;
    /** @private @type {string|null} the last token getToken gave */
    this._lastToken = null;
    /** @private */
    this._everConnected = false;
    /** @private @type {Array<{resolve: (r: ReadyFrame) => void, reject: (e: Error) => void}>} */
    this._readyWaiters = [];
    /** @private @type {{timer: ReturnType<typeof setTimeout>, resolve: () => void}|null} */
    this._sleeping = null;

    if (o.onState) this.on('state', o.onState);
    // Let the caller subscribe to events before the first one.
    queueMicrotask(() => this._dial('connect', 0));
  }

  /** The endpoint of the current connection (null while disconnected). */
  get url() {
    return this._conn ? this._conn.url : null;
  }

  /**
   * Subscribes to an event; returns the unsubscribe function.
   * @template {keyof ClientEvents} K
   * @param {K} type
   * @param {(ev: ClientEvents[K]) => void} listener
   * @returns {() => void}
   */
  on(type, listener) {
    let set = this._listeners.get(type);
    if (!set) this._listeners.set(type, (set = new Set()));
    set.add(listener);
    return () => this.off(type, listener);
  }

  /**
   * @template {keyof ClientEvents} K
   * @param {K} type
   * @param {(ev: ClientEvents[K]) => void} listener
   */
  off(type, listener) {
    this._listeners.get(type)?.delete(listener);
  }

  /**
   * Resolves with the `ready` frame once the client is connected (at once if it is).
   * @returns {Promise<ReadyFrame>}
   */
  connected() {
    if (this._closed) return Promise.reject(new JetwayError({ code: 'closed', message: 'client closed' }));
    const c = this._sendable();
    if (c && c.ready) return Promise.resolve(c.ready);
    return new Promise((resolve, reject) => this._readyWaiters.push({ resolve, reject }));
  }

  /**
   * Sends a request. The returned call ends in exactly one outcome: its
   * `done` frame, or a JetwayError (the server's `error` frame).
   * @param {Request} request
   * @param {CallHandlers} [handlers]
   * @returns {Call}
   */
  send(request, handlers) {
    if (this._closed) throw new JetwayError({ code: 'closed', message: 'client closed' });
    if (!request || !Array.isArray(request.messages) || request.messages.length === 0) {
      throw new TypeError('jetway: request.messages must be a non-empty array');
    }
    const id = request.request_id ?? newId();
    if (!ID_RE.test(id)) throw new TypeError('jetway: request_id must be 8-64 chars of [A-Za-z0-9_-]');
    if (this._calls.has(id)) throw new Error(`jetway: request ${id} is already in flight on this client`);
    /** @type {RequestFrame} */
    const frame = { type: 'request', request_id: id, messages: request.messages };
    if (request.system !== undefined) frame.system = request.system;
    if (request.model) frame.model = request.model;
    if (request.max_tokens !== undefined) frame.max_tokens = request.max_tokens;
    if (request.temperature !== undefined) frame.temperature = request.temperature;
    if (request.tools !== undefined) frame.tools = request.tools;
    if (request.tool_choice !== undefined) frame.tool_choice = request.tool_choice;
    if (request.reasoning !== undefined) frame.reasoning = request.reasoning;
    const call = new Call(this, id, frame, handlers);
    const size = new TextEncoder().encode(JSON.stringify(frame)).length;
    // A frame with an image or document has the server's larger bound.
    const limit = hasAttachments(frame.messages)
      ? Math.max(this._o.maxFrameBytes, this._o.maxAttachmentFrameBytes) : this._o.maxFrameBytes;
    if (size > limit) {
      // The server would close the socket (1009) and the re-send would loop: fail here.
      queueMicrotask(() =>
        this._finish(call, null, new JetwayError({ code: 'invalid_request', status: 400, request_id: id,
          message: `request is ${size} bytes; the limit is ${limit}` })));
      return call;
    }
    this._calls.set(id, call);
    const c = this._sendable();
    if (c) this._transmit(call, c);
    return call;
  }

  /**
   * Follows a request sent earlier (for example before a page reload) from
   * after_seq. An id the server does not know ends with code `not_found`.
   * @param {string} requestId
   * @param {number} [afterSeq]
   * @param {CallHandlers} [handlers]
   * @returns {Call}
   */
  resume(requestId, afterSeq = 0, handlers) {
    if (this._closed) throw new JetwayError({ code: 'closed', message: 'client closed' });
    if (!ID_RE.test(requestId)) throw new TypeError('jetway: request_id must be 8-64 chars of [A-Za-z0-9_-]');
    if (this._calls.has(requestId)) throw new Error(`jetway: request ${requestId} is already in flight on this client`);
    const call = new Call(this, requestId, null, handlers);
    call.lastSeq = afterSeq;
    this._calls.set(requestId, call);
    const c = this._sendable();
    if (c) this._transmit(call, c);
    return call;
  }

  /**
   * Asks the server to stop a request (sent as soon as there is a connection).
   * @param {string} requestId
   */
  cancel(requestId) {
    const call = this._calls.get(requestId);
    const c = call && call[kIn].conn && call[kIn].conn.alive ? call[kIn].conn : this._sendable();
    if (c) {
      c.send({ type: 'cancel', request_id: requestId });
    } else if (call) {
      call[kIn].cancel = true;
    }
  }

  /**
   * The caller's own standing (`GET /v1/me`, docs/admin.md): every limit
   * that applies to the signed-in user, with what is used and left in its
   * current window and when that window resets. Asks the gateway of the
   * current connection (the next attempt's while there is none) over HTTP,
   * with the token the socket uses as a Bearer header; a 401 asks getToken
   * for a fresh token and tries once more. Rejects with a JetwayError: the
   * gateway's `{"error": {"code", "message"}}` and its HTTP status, or
   * `unavailable` (status 0: no answer), `timeout`, `cancelled`, `token`
   * (getToken failed), `closed`.
   * @param {MeOptions} [options]
   * @returns {Promise<Standing>}
   */
  async me(options = {}) {
    if (this._closed) throw new JetwayError({ code: 'closed', message: 'client closed' });
    const fetchFn = /** @type {any} */ (globalThis).fetch;
    if (typeof fetchFn !== 'function') throw new TypeError('jetway: no fetch here (Node 18 or later has one)');
    const url = String(options.url ?? standingURL(this._sendable()?.url ?? this._urls[this._urlIndex % this._urls.length]));
    const ctl = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      ctl.abort();
    }, Math.min(options.timeoutMs ?? 10000, MAX_TIMER_MS));
    const abort = () => ctl.abort();
    options.signal?.addEventListener('abort', abort, { once: true });
    if (options.signal?.aborted) ctl.abort();
    /** @param {boolean} force */
    const token = async (force) => {
      try {
        const last = this._lastToken;
        return !force && last !== null && !expiresWithin(last, 2000) ? last : await this._token(force, force ? 'rejected' : 'connect');
      } catch (err) {
        throw new JetwayError({ code: 'token', message: `jetway: getToken failed: ${err}` });
      }
    };
    /** @param {string} bearer */
    const get = async (bearer) => {
      try {
        return await fetchFn(url, { headers: { authorization: `Bearer ${bearer}`, accept: 'application/json' }, signal: ctl.signal });
      } catch (err) {
        throw noAnswer(url, err, timedOut, !!options.signal?.aborted);
      }
    };
    try {
      let r = await get(await token(false));
      if (r.status === 401) {
        r.body?.cancel().catch(() => {}); // the refusal's body is not needed: free the connection
        r = await get(await token(true));
      }
      /** @type {any} */
      let body;
      try {
        body = await r.json();
      } catch (err) {
        if (ctl.signal.aborted) throw noAnswer(url, err, timedOut, !!options.signal?.aborted);
        body = null;
      }
      if (r.ok && body && Array.isArray(body.limits)) return body;
      const e = body?.error ?? {};
      const code = typeof e.code === 'string' && e.code ? e.code
        : r.ok ? 'internal' : (HTTP_CODES[r.status] ?? (r.status >= 500 ? 'internal' : 'invalid_request'));
      throw new JetwayError({ code, status: r.status, retryable: r.status === 429 || r.status === 503,
        message: typeof e.message === 'string' && e.message ? e.message : `GET ${url}: ${r.ok ? 'not a standing' : `status ${r.status}`}` });
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', abort);
    }
  }

  /** Sends an application ping (liveness is also checked on its own). */
  ping() {
    this._sendable()?.send({ type: 'ping', t: Date.now() });
  }

  /** Ends the session: closes the sockets; unfinished calls fail with code `closed`. */
  close() {
    if (this._closed) return;
    this._closed = true;
    if (this._sleeping) {
      clearTimeout(this._sleeping.timer);
      this._sleeping.resolve();
    }
    for (const c of this._conns) {
      c.alive = false;
      c.stopTimers();
      try {
        c.ws.close(1000, 'client closed');
      } catch {
        // already closed
      }
    }
    this._conns.clear();
    this._conn = null;
    const err = () => new JetwayError({ code: 'closed', message: 'client closed' });
    for (const call of [...this._calls.values()]) this._finish(call, null, err());
    for (const w of this._readyWaiters.splice(0)) w.reject(err());
    this._setState('closed', {});
  }

  // -------------------------------------------------------------------------
  // Connections.

  /**
   * @private
   * @param {string} type
   * @param {any} ev
   */
  _emit(type, ev) {
    for (const fn of [...(this._listeners.get(type) ?? [])]) {
      try {
        fn(ev);
      } catch (err) {
        report(err);
      }
    }
  }

  /**
   * @private
   * @param {ConnectionState} state
   * @param {Omit<StateEvent, 'state'>} extra
   */
  _setState(state, extra) {
    this.state = state;
    this._emit('state', { state, ...extra });
  }

  /** @private the connection new work may go to */
  _sendable() {
    const c = this._conn;
    return c && c.alive && !c.draining ? c : null;
  }

  /** @private */
  /** @param {number} ms */
  _sleep(ms) {
    return new Promise((resolve) => {
      const done = () => {
        this._sleeping = null;
        resolve(undefined);
      };
      this._sleeping = { timer: setTimeout(done, ms), resolve: done };
    });
  }

  /**
   * The next connection attempt goes to the url after this one. Relative to
   * the url, so that a drain and the close that ends it move only once.
   * @private
   * @param {string} url
   */
  _moveOn(url) {
    const i = this._urls.indexOf(url);
    this._urlIndex = i >= 0 ? i + 1 : this._urlIndex + 1;
  }

  /**
   * Jittered exponential backoff ("full jitter").
   * @private
   * @param {number} attempt
   */
  _backoff(attempt) {
    const cap = Math.min(this._o.maxBackoffMs, this._o.minBackoffMs * 2 ** Math.min(attempt - 1, 16));
    return Math.round(Math.random() * cap) + 1;
  }

  /**
   * @private
   * @param {boolean} force
   * @param {TokenReason} reason
   */
  async _token(force, reason) {
    let token = await this._o.getToken({ force, reason });
    if (!force && expiresWithin(token, 2000)) token = await this._o.getToken({ force: true, reason: 'rejected' });
    if (typeof token !== 'string' || token === '') throw new TypeError('jetway: getToken returned no token');
    this._lastToken = token;
    return token;
  }

  /**
   * The token for a connection attempt. When getToken fails (its server may
   * be the one that died) the last token it gave is used while it has not
   * expired, so the client still moves on to the next url; the next attempt
   * asks getToken again.
   * @private
   * @returns {Promise<string>}
   */
  async _dialToken() {
    const force = this._force;
    const last = this._lastToken;
    const fresh = this._token(force, force ? 'rejected' : 'connect');
    if (last === null || expiresWithin(last, 2000)) {
      const token = await fresh;
      this._force = false;
      return token;
    }
    // With a token in hand, a getToken that hangs counts as failed too.
    /** @type {ReturnType<typeof setTimeout>|undefined} */
    let timer;
    const slow = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`jetway: getToken took over ${this._o.connectTimeoutMs} ms`)), this._o.connectTimeoutMs);
    });
    try {
      const token = await Promise.race([fresh, slow]);
      this._force = false;
      return token;
    } catch {
      fresh.catch(() => {}); // it may still fail after the timeout
      this._force = true;
      return last;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Dials until a connection is ready (one loop at a time), then adopts it
   * as the current connection.
   * @private
   * @param {'connect'|'reconnect'|'draining'} why
   * @param {number} delayMs
   */
  async _dial(why, delayMs) {
    if (this._dialing || this._closed) return;
    this._dialing = true;
    try {
      let delay = Math.max(delayMs, this._attempt > 0 ? this._backoff(this._attempt) : 0);
      while (!this._closed) {
        if (delay > 0) await this._sleep(delay);
        if (this._closed) return;
        const url = this._urls[this._urlIndex % this._urls.length];
        try {
          const token = await this._dialToken();
          if (this._closed) return;
          await this._open(url, token);
          return;
        } catch (err) {
          if (this._closed) return;
          this._attempt++;
          this._moveOn(url);
          // A refused upgrade looks like any failure in a browser: after two
          // in a row, ask for a fresh token in case ours is the problem.
          if (/** @type {ConnectError} */ (err).status === 401 || this._attempt === 2) this._force = true;
          delay = this._backoff(this._attempt);
          // While a draining connection still delivers, the state stays `draining`.
          const state = this._conn ? this.state : this._everConnected || why !== 'connect' ? 'reconnecting' : 'connecting';
          this._setState(state, { attempt: this._attempt, delayMs: delay, url, error: err });
        }
      }
    } finally {
      this._dialing = false;
    }
  }

  /**
   * Opens one WebSocket and waits for `ready`; adopts it synchronously with
   * that frame so no later frame can slip past.
   * @private
   * @param {string} url
   * @param {string} token
   * @returns {Promise<Conn>}
   */
  _open(url, token) {
    return new Promise((resolve, reject) => {
      const u = new URL(url);
      u.searchParams.set('session_id', this.sessionId);
      /** @type {WebSocketLike} */
      let ws;
      try {
        ws = new this._WS(u.toString(), [SUBPROTOCOL, 'bearer.' + token]);
      } catch (err) {
        reject(new ConnectError(`jetway: cannot open ${url}: ${err}`, { cause: err }));
        return;
      }
      const conn = new Conn(ws, url, token);
      let settled = false;
      /** @type {unknown} */
      let lastError;
      /** @param {ConnectError} err */
      const fail = (err) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        conn.alive = false;
        try {
          ws.close();
        } catch {
          // not open yet
        }
        reject(err);
      };
      const timer = setTimeout(() => fail(new ConnectError(`jetway: no ready from ${url} within ${this._o.connectTimeoutMs} ms`)),
        this._o.connectTimeoutMs);
      ws.onopen = () => {
        if (ws.protocol !== SUBPROTOCOL) fail(new ConnectError(`jetway: server selected subprotocol "${ws.protocol}", want ${SUBPROTOCOL}`));
      };
      ws.onerror = (ev) => {
        lastError = ev && (ev.error || ev.message);
      };
      ws.onclose = (ev) => {
        if (!settled) {
          // Browsers hide a refused upgrade's status; Node's ws names it in the error.
          const m = /Unexpected server response: (\d{3})/.exec(String(lastError ?? ''));
          fail(new ConnectError(`jetway: connection to ${url} closed before ready (${ev.code}${ev.reason ? ' ' + ev.reason : ''})`,
            { code: ev.code, status: m ? Number(m[1]) : undefined, cause: lastError }));
          return;
        }
        this._lost(conn, ev.code, String(ev.reason ?? ''));
      };
      ws.onmessage = (ev) => {
        /** @type {ServerFrame} */
        let f;
        try {
          f = JSON.parse(typeof ev.data === 'string' ? ev.data : new TextDecoder().decode(ev.data));
        } catch {
          return;
        }
        conn.lastSeen = now();
        if (settled) {
          if (conn.alive) this._frame(conn, f);
          return;
        }
        if (f.type !== 'ready') {
          fail(new ConnectError(`jetway: first frame from ${url} is ${f.type}, not ready`));
          return;
        }
        settled = true;
        clearTimeout(timer);
        if (this._closed) {
          conn.alive = false;
          ws.close(1000, 'client closed');
          reject(new JetwayError({ code: 'closed', message: 'client closed' }));
          return;
        }
        conn.ready = f;
        conn.readyAt = now();
        this._adopt(conn);
        resolve(conn);
      };
    });
  }

  /**
   * Makes a ready connection the current one and sends it every call that
   * has no live connection.
   * @private
   * @param {Conn} conn
   */
  _adopt(conn) {
    const ready = /** @type {ReadyFrame} */ (conn.ready);
    this._conns.add(conn);
    this._conn = conn;
    this._attempt = this._flaps;
    this.ready = ready;
    if (this._everConnected) this.reconnects++;
    this._everConnected = true;
    const interval = this._o.pingIntervalMs ?? Math.max(1, ready.heartbeat_s || 25) * 1000;
    conn.pingTimer = setInterval(() => {
      if (now() - conn.lastSeen > interval * 2.5) {
        // Nothing heard for too long: the socket is dead even if the browser has not noticed.
        const ws = conn.ws;
        this._lost(conn, 4000, 'no heartbeat');
        try {
          ws.close(4000, 'no heartbeat');
        } catch {
          // already closed
        }
        return;
      }
      conn.send({ type: 'ping', t: Date.now() });
    }, interval);
    this._scheduleRefresh(conn, ready.expires_at);
    this._setState('connected', { url: conn.url });
    this._emit('ready', ready);
    for (const w of this._readyWaiters.splice(0)) w.resolve(ready);
    this._flush();
  }

  /**
   * A connection ended (close event, or declared dead).
   * @private
   * @param {Conn} conn
   * @param {number} code
   * @param {string} reason
   */
  _lost(conn, code, reason) {
    if (!conn.alive) return;
    conn.alive = false;
    conn.stopTimers();
    this._conns.delete(conn);
    this._emit('close', { code, reason, url: conn.url });
    if (this._closed) return;
    if (code === 4001) this._force = true; // token expired or revoked
    if (conn !== this._conn) {
      // A draining connection finished: whatever it still carried continues on the current one.
      this._flush();
      return;
    }
    this._conn = null;
    this._flaps = now() - conn.readyAt < STABLE_MS ? this._flaps + 1 : 0;
    this._attempt = this._flaps;
    if (conn.draining || code === 1001 || code === 1012 || code === 1013) this._moveOn(conn.url);
    this._setState('reconnecting', { url: conn.url, code, reason, attempt: this._attempt });
    this._dial('reconnect', 0);
  }

  /**
   * Sends every unfinished call that is not live on an open connection to
   * the current one: a resume from its last seq once accepted, else the
   * request again.
   * @private
   */
  _flush() {
    const c = this._sendable();
    if (!c) return;
    for (const call of [...this._calls.values()]) {
      const on = call[kIn].conn;
      if (on === c || (on && on.alive)) continue;
      this._transmit(call, c);
    }
  }

  /**
   * @private
   * @param {Call} call
   * @param {Conn} conn
   */
  _transmit(call, conn) {
    const again = call[kIn].transmits++ > 0;
    call[kIn].conn = conn;
    if (call.accepted || call[kIn].resumeOnly) {
      if (again) call.stats.resumes++;
      conn.send({ type: 'resume', request_id: call.id, after_seq: call.lastSeq });
    } else {
      if (again) call.stats.resends++;
      /** @type {RequestFrame} */
      const frame = { ...(/** @type {RequestFrame} */ (call.request)) };
      if (call.lastSeq > 0) frame.after_seq = call.lastSeq;
      conn.send(frame);
      this._armAccept(call);
    }
    if (call[kIn].cancel) {
      call[kIn].cancel = false;
      conn.send({ type: 'cancel', request_id: call.id });
    }
  }

  /**
   * Re-sends a request that got no `accepted` in time (safe: idempotent).
   * @private
   * @param {Call} call
   */
  _armAccept(call) {
    clearTimeout(call[kIn].timer);
    if (this._o.acceptTimeoutMs < 0) return;
    call[kIn].timer = setTimeout(() => {
      if (call.accepted || call.finished || this._closed) return;
      const c = this._sendable();
      if (c) {
        this._transmit(call, c);
      } else {
        call[kIn].conn = null; // sent with the next connection
      }
    }, this._o.acceptTimeoutMs);
  }

  /**
   * Sends `auth` with a fresh token before the current one expires.
   * @private
   * @param {Conn} conn
   * @param {string} expiresAt
   */
  _scheduleRefresh(conn, expiresAt) {
    clearTimeout(conn.refreshTimer);
    const before = this._o.refreshBeforeMs;
    const exp = Date.parse(expiresAt);
    if (before < 0 || !Number.isFinite(exp)) return;
    const left = exp - Date.now();
    let wait = left - before;
    if (wait < 1000) wait = Math.max(0, left / 2);
    conn.refreshTimer = setTimeout(() => {
      if (exp - Date.now() > before + 1000 && wait >= MAX_TIMER_MS) {
        this._scheduleRefresh(conn, expiresAt); // the timer's range ended before the refresh time
        return;
      }
      this._refresh(conn, exp);
    }, Math.min(wait, MAX_TIMER_MS));
  }

  /**
   * @private
   * @param {Conn} conn
   * @param {number} exp
   */
  async _refresh(conn, exp) {
    if (!conn.alive || this._closed) return;
    try {
      const token = await this._token(true, 'refresh');
      // The same token again would only shorten the next wait: let it
      // expire and reconnect (close 4001) with a fresh one instead.
      if (conn.alive && token !== conn.token) {
        conn.token = token;
        conn.send({ type: 'auth', token });
      }
    } catch (error) {
      this._emit('error', { code: 'token', message: `jetway: getToken failed: ${error}`, error });
      const left = exp - Date.now();
      if (conn.alive && left > 2000) conn.refreshTimer = setTimeout(() => this._refresh(conn, exp), Math.min(left / 2, 30000));
    }
  }

  // -------------------------------------------------------------------------
  // Frames.

  /**
   * @private
   * @param {Conn} conn
   * @param {ServerFrame} f
   */
  _frame(conn, f) {
    switch (f.type) {
      case 'accepted': {
        const call = this._calls.get(f.request_id);
        if (!call || call.accepted) return;
        call.accepted = f;
        call.acceptedAt = now();
        clearTimeout(call[kIn].timer);
        callback(call.onAccepted, f, call);
        return;
      }
      case 'chunk': {
        const call = this._calls.get(f.request_id);
        if (call) this._chunk(call, f);
        return;
      }
      case 'done': {
        const call = this._calls.get(f.request_id);
        if (!call) return; // a replayed terminal of a finished call
        call.stats.terminals++;
        if (call.text !== f.text || !sameBlocks(call.blocks, f)) call.stats.mismatch = true;
        this._finish(call, f, null);
        return;
      }
      case 'error':
        if (!f.request_id) {
          this._emit('error', f);
          return;
        }
        this._callError(conn, f);
        return;
      case 'draining':
        conn.draining = true;
        this._emit('draining', f);
        if (conn === this._conn) {
          this._setState('draining', { url: conn.url });
          this._moveOn(conn.url);
          // Spread a fleet's reconnects over the server's hint.
          this._dial('draining', Math.round(Math.random() * Math.max(0, f.reconnect_after_ms || 0)));
        }
        return;
      case 'auth_ok':
        this._scheduleRefresh(conn, f.expires_at);
        this._emit('auth', f);
        return;
      default:
        // pong, and frame types of later protocol versions
        return;
    }
  }

  /**
   * @private
   * @param {Call} call
   * @param {ChunkFrame} f
   */
  _chunk(call, f) {
    const seq = f.seq;
    call.stats.chunksReceived++;
    if (call.finished || seq <= call.lastSeq) {
      call.stats.duplicates++;
      return;
    }
    const pending = call[kIn].pending;
    if (seq > call.lastSeq + 1) {
      if (pending.has(seq)) {
        call.stats.duplicates++;
      } else {
        call.stats.outOfOrder++;
        pending.set(seq, chunkOf(f));
      }
      return;
    }
    if (call.firstChunkAt === null) call.firstChunkAt = now();
    call[kIn].refusedAt = null;
    /** @type {Chunk[]} */
    const fresh = [chunkOf(f)];
    call.lastSeq = seq;
    for (let c = pending.get(call.lastSeq + 1); c !== undefined; c = pending.get(call.lastSeq + 1)) {
      pending.delete(call.lastSeq + 1);
      call.lastSeq++;
      fresh.push(c);
    }
    for (const c of fresh) {
      call[kIn].chunks.push(c);
      call.text += c.text;
      assemble(call.blocks, c);
    }
    for (const c of fresh) callback(call.onChunk, c, call);
    wake(call);
  }

  /**
   * @private
   * @param {Conn} conn
   * @param {ErrorFrame} f
   */
  _callError(conn, f) {
    const call = this._calls.get(/** @type {string} */ (f.request_id));
    if (!call) return;
    if ((call.accepted || call[kIn].resumeOnly) && f.chunks == null && f.retryable && this._refused(call, f)) return;
    call.stats.terminals++;
    if (f.code === 'not_found' && !call[kIn].resumeOnly) {
      // The server has no record of it: the request never arrived there
      // (or that server's memory is gone). Sending it again is safe.
      call.stats.terminals--;
      call.accepted = null;
      const c = this._sendable();
      if (c) this._transmit(call, c);
      else call[kIn].conn = null;
      return;
    }
    if ((f.code === 'draining' || (f.code === 'busy' && f.retryable && conn.draining)) && !call.accepted) {
      // It reached a server that is shutting down, or a busy one that asked
      // this connection to move (it has room elsewhere; the draining frame
      // came first): send it to the next one.
      call.stats.terminals--;
      call[kIn].conn = null;
      const c = this._sendable();
      if (c && c !== conn) this._transmit(call, c);
      return;
    }
    const err = new JetwayError(f);
    if (f.chunks != null) keepLonger(call, err);
    this._finish(call, null, err);
  }

  /**
   * An accepted request's terminal `error` always carries `chunks`; one
   * without it refused this attempt (a resume the server could not serve
   * now) while the request runs on to its own terminal. Resumes again after
   * retry_after_ms; false once retryRefusedForMs has passed (the refusal is final).
   * @private
   * @param {Call} call
   * @param {ErrorFrame} f
   * @returns {boolean}
   */
  _refused(call, f) {
    const t = now();
    if (call[kIn].refusedAt === null) call[kIn].refusedAt = t;
    if (t - call[kIn].refusedAt >= this._o.retryRefusedForMs) return false;
    call.stats.refusals++;
    clearTimeout(call[kIn].timer);
    call[kIn].timer = setTimeout(() => {
      if (call.finished || this._closed) return;
      const c = this._sendable();
      if (c) this._transmit(call, c);
      else call[kIn].conn = null; // resumed with the next connection
    }, f.retry_after_ms || this._o.minBackoffMs);
    return true;
  }

  /**
   * @private
   * @param {Call} call
   * @param {DoneFrame|null} done
   * @param {JetwayError|null} err
   */
  _finish(call, done, err) {
    if (call.finished) return;
    call.finished = true;
    call.finishedAt = now();
    clearTimeout(call[kIn].timer);
    call[kIn].pending.clear();
    if (this._calls.get(call.id) === call) this._calls.delete(call.id);
    if (done) {
      call.done = done;
      call.text = done.text; // the server's complete answer is authoritative
      call.blocks = doneBlocks(done, call.blocks);
      call[kIn].settle(done, null);
      callback(call.onDone, done, call);
    } else {
      call.error = err;
      call[kIn].settle(null, err);
      callback(call.onError, err, call);
    }
    wake(call);
  }
}

/**
 * An accepted call's terminal error holds the text streamed before it
 * ended; an `interrupted` one holds what the dead owner had saved, which
 * can be less than this call received (PROTOCOL.md v1.1). The longer
 * contiguous answer wins, in the call (text, blocks) and in the error (text,
 * chunks), so an answer never shrinks.
 * @param {Call} call
 * @param {JetwayError} err
 */
function keepLonger(call, err) {
  const saved = err.chunks ?? 0;
  if (call.lastSeq > saved) {
    err.text = call.text;
    err.chunks = call.lastSeq;
    call.stats.keptLonger = true;
  } else if (saved > call.lastSeq && typeof err.text === 'string') {
    // Chunks this call never saw (a resume of an answer that had ended).
    call.text = err.text;
    if (call.blocks.every((b) => b.type === 'text')) call.blocks = err.text ? [{ type: 'text', text: err.text }] : [];
  }
}

/**
 * Whether a request's messages carry an image or document block (in a
 * tool result too): such a frame has the server's larger bound.
 * @param {Message[]} messages
 */
function hasAttachments(messages) {
  /** @param {any} b */
  const attached = (b) => b?.type === 'image' || b?.type === 'document' ||
    (b?.type === 'tool_result' && Array.isArray(b.content) && b.content.some(attached));
  return messages.some((m) => Array.isArray(m?.content) && m.content.some(attached));
}

/**
 * Calls a user callback; its exceptions are reported, never break the client.
 * @param {Function|null|undefined} fn
 * @param {...any} args
 */
function callback(fn, ...args) {
  if (!fn) return;
  try {
    fn(...args);
  } catch (err) {
    report(err);
  }
}

/** @param {unknown} err */
function report(err) {
  const g = /** @type {any} */ (globalThis);
  if (typeof g.reportError === 'function') g.reportError(err);
  else console.error(err);
}

/** @param {Call} call */
function wake(call) {
  for (const w of call[kIn].waiters.splice(0)) w();
}

/** The error codes of HTTP statuses whose answer does not say its own (not the admin API's shape). */
/** @type {Record<number, ErrorCode>} */
const HTTP_CODES = { 400: 'invalid_request', 401: 'unauthorized', 403: 'forbidden', 404: 'not_found', 405: 'invalid_request',
  409: 'conflict', 429: 'rate_limited', 503: 'unavailable' };

/**
 * The standing's URL of the gateway at a WebSocket URL: ws: -> http:,
 * wss: -> https:, the path's /v1/ws (after any prefix) -> /v1/me.
 * @param {string} wsURL
 */
function standingURL(wsURL) {
  const u = new URL(wsURL);
  u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
  const prefix = /\/v1\/ws\/?$/.test(u.pathname) ? u.pathname.replace(/\/v1\/ws\/?$/, '') : '';
  u.pathname = `${prefix}/v1/me`;
  u.search = '';
  u.hash = '';
  return u.href;
}

/**
 * A fetch that got no answer as a JetwayError.
 * @param {string} url
 * @param {unknown} err
 * @param {boolean} timedOut
 * @param {boolean} cancelled
 */
function noAnswer(url, err, timedOut, cancelled) {
  if (cancelled) return new JetwayError({ code: 'cancelled', message: `GET ${url}: aborted` });
  if (timedOut) return new JetwayError({ code: 'timeout', retryable: true, message: `GET ${url}: no answer in time` });
  const why = err instanceof Error ? err.message : String(err);
  return new JetwayError({ code: 'unavailable', retryable: true, message: `GET ${url}: ${why}` });
}

/**
 * Whether a JWT's `exp` is within ms from now (false when unreadable).
 * @param {unknown} token
 * @param {number} ms
 */
function expiresWithin(token, ms) {
  if (typeof token !== 'string') return false;
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const exp = JSON.parse(atob(part + '='.repeat((4 - (part.length % 4)) % 4))).exp;
    return typeof exp === 'number' && exp * 1000 - Date.now() < ms;
  } catch {
    return false;
  }
}

/**
 * A chunk frame as the Chunk the call delivers.
 * @param {ChunkFrame} f
 * @returns {Chunk}
 */
function chunkOf(f) {
  /** @type {Chunk} */
  const c = { seq: f.seq, text: f.text ?? '', block: f.block ?? 0, kind: f.kind ?? 'text' };
  if (f.reasoning !== undefined) c.reasoning = f.reasoning;
  if (f.signature !== undefined) c.signature = f.signature;
  if (f.id !== undefined) c.id = f.id;
  if (f.name !== undefined) c.name = f.name;
  if (f.input !== undefined) c.input = f.input;
  return c;
}

/**
 * Adds a chunk to the streamed blocks (chunks of kinds this version does
 * not know are skipped).
 * @param {StreamedBlock[]} blocks
 * @param {Chunk} c
 */
function assemble(blocks, c) {
  let b = blocks[c.block];
  if (!b || b.type !== c.kind) {
    switch (c.kind) {
      case 'text':
        b = { type: 'text', text: '' };
        break;
      case 'reasoning':
        b = { type: 'reasoning', text: '' };
        break;
      case 'tool_use':
        b = { type: 'tool_use', id: '', name: '', inputJSON: '' };
        break;
      default:
        return;
    }
    blocks[c.block] = b;
  }
  switch (b.type) {
    case 'text':
      b.text += c.text;
      return;
    case 'reasoning':
      b.text += c.reasoning ?? '';
      if (c.signature) b.signature = (b.signature ?? '') + c.signature;
      return;
    case 'tool_use':
      if (c.id) b.id = c.id;
      if (c.name) b.name = c.name;
      b.inputJSON += c.input ?? '';
  }
}

/**
 * A done call's blocks: done.blocks (tool calls keep the input JSON as
 * streamed), or its text as one block.
 * @param {DoneFrame} done
 * @param {StreamedBlock[]} streamed
 * @returns {StreamedBlock[]}
 */
function doneBlocks(done, streamed) {
  if (!done.blocks) return done.text ? [{ type: 'text', text: done.text }] : [];
  return done.blocks.map((b, i) => {
    switch (b.type) {
      case 'reasoning':
        return b.signature ? { type: 'reasoning', text: b.text, signature: b.signature } : { type: 'reasoning', text: b.text };
      case 'tool_use': {
        const s = streamed[i];
        return { type: 'tool_use', id: b.id, name: b.name, input: b.input,
          inputJSON: s && s.type === 'tool_use' ? s.inputJSON : JSON.stringify(b.input) };
      }
      default:
        return { type: 'text', text: b.text ?? '' };
    }
  });
}

/**
 * Whether the streamed blocks say what done.blocks says.
 * @param {StreamedBlock[]} streamed
 * @param {DoneFrame} done
 */
function sameBlocks(streamed, done) {
  if (!done.blocks) return streamed.every((b) => b.type === 'text');
  const want = doneBlocks(done, streamed);
  if (want.length !== streamed.length) return false;
  return want.every((w, i) => {
    const g = streamed[i];
    if (!g || g.type !== w.type) return false;
    if (g.type === 'tool_use' && w.type === 'tool_use') {
      let parsed;
      try {
        parsed = JSON.parse(g.inputJSON);
      } catch {
        return false;
      }
      return g.id === w.id && g.name === w.name && canonical(parsed) === canonical(w.input);
    }
    if (g.type === 'reasoning' && w.type === 'reasoning') return g.text === w.text && (g.signature ?? '') === (w.signature ?? '');
    return g.type === 'text' && w.type === 'text' && g.text === w.text;
  });
}

/**
 * JSON with object keys sorted, to compare values.
 * @param {unknown} v
 * @returns {string}
 */
function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    const o = /** @type {Record<string, unknown>} */ (v);
    return `{${Object.keys(o).sort().map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}
