// Shared by the AI SDK door tests (started by cmd/gateway TestAISDKNodeClient):
// the official transport with `ws` as its WebSocket, raw `ws` sockets for
// frames the transport never sends, and the Go side's control server.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import { WebSocketChatTransport, readUIMessageStream } from 'ai';

const env = (name) => {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run through go test ./cmd/gateway -run TestAISDKNodeClient`);
  return v;
};

// urls[i] is server i's /v1/ai-sdk: 0 and 1 stay up, 2 is the one a test SIGKILLs.
export const urls = env('JETWAY_TEST_AISDK_URLS').split(',');
const control = env('JETWAY_TEST_CONTROL');
export const controlURL = control;
export const SUBPROTOCOL = 'jetway.ai-sdk.v1';

// ctl calls the Go side: GET without a body, else POST of the body as JSON.
export async function ctl(path, query = {}, body = undefined) {
  const res = await fetch(`${control}${path}?${new URLSearchParams(query)}`, body === undefined ? {} :
    { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  assert.equal(res.status, 200, `control ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

// token is a JWT of sub on app (support, dev, agent, docs; see aisdkApps).
export const token = (sub, app = 'support', ttlMs = 3600_000) => ctl('/token', { sub, app, ttl_ms: ttlMs });

// expiresAt is a JWT's exp in milliseconds.
export const expiresAt = (jwt) => JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString()).exp * 1000;

// wsAnswer is the /v1/ws done frame (and reasoning text) for the same request, from the Go client.
export const wsAnswer = (sub, app, server, body) => ctl('/ws-answer', { sub, app, server }, body);

export const usage = (user) => ctl('/usage', { user });

export const newChatId = () => 'chat-' + randomUUID();
export const newSub = (what) => `aisdk-${what}-${randomUUID().slice(0, 8)}`;

export const userMessage = (text) => ({ id: 'msg-' + randomUUID(), role: 'user', parts: [{ type: 'text', text }] });

// until polls cond (sync or async) until it holds or the deadline passes.
export async function until(what, cond, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) assert.fail(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50)); // polling with a deadline
  }
}

// A WebSocket constructor that keeps the sockets it makes, so a test can
// cut one (terminate: no close frame, as a lost network) or count them.
export function recordingWebSocket() {
  const sockets = [];
  class Recording extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols);
      this.closeEvent = null;
      this.on('close', (code, reason) => { this.closeEvent = { code, reason: reason.toString() }; });
      sockets.push(this);
    }
  }
  return { WebSocket: Recording, sockets };
}

// transport is the official WebSocketChatTransport of sub on app, on
// server, signed in with the subprotocols (as a browser must).
export async function transport({ server = 0, sub, app = 'support', ttlMs, headers, jwt } = {}) {
  jwt ??= await token(sub, app, ttlMs);
  const rec = recordingWebSocket();
  const t = new WebSocketChatTransport({
    url: urls[server], protocols: [SUBPROTOCOL, 'bearer.' + jwt], webSocket: rec.WebSocket, headers,
  });
  t.sockets = rec.sockets;
  t.jwt = jwt;
  return t;
}

export const send = (t, { chatId, messages, body, headers, abortSignal, trigger = 'submit-message', messageId }) =>
  t.sendMessages({ chatId, messages, trigger, messageId, abortSignal, body, headers, metadata: undefined });

// read assembles a UIMessageChunk stream with readUIMessageStream: the last
// message snapshot, the chunks as they came, and the errors (an `error`
// UI chunk, or the stream's own error: an `error` frame, a lost socket).
export async function read(stream, onChunk = () => {}) {
  const chunks = [];
  const errors = [];
  const tapped = stream.pipeThrough(new TransformStream({
    transform(chunk, c) { chunks.push(chunk); c.enqueue(chunk); onChunk(chunk, chunks); },
  }));
  let message;
  for await (const m of readUIMessageStream({ stream: tapped, onError: (e) => errors.push(e) })) message = m;
  return { message, chunks, errors };
}

export const textOf = (message) => (message?.parts ?? []).filter((p) => p.type === 'text').map((p) => p.text).join('');
export const reasoningOf = (message) => (message?.parts ?? []).filter((p) => p.type === 'reasoning').map((p) => p.text).join('');
export const toolCallsOf = (message) => (message?.parts ?? [])
  .filter((p) => p.type.startsWith('tool-') || p.type === 'dynamic-tool')
  .map((p) => ({ toolCallId: p.toolCallId, toolName: p.type === 'dynamic-tool' ? p.toolName : p.type.slice(5), input: p.input, state: p.state }));
export const countType = (chunks, type) => chunks.filter((c) => c.type === type).length;

// jetwayError is the machine-readable refusal of PROTOCOL.md: the
// message-metadata chunk's jetway.error.
export const jetwayError = (chunks) => chunks.find((c) => c.type === 'message-metadata' && c.messageMetadata?.jetway?.error)
  ?.messageMetadata.jetway.error;

// assertRefusal checks a refusal as PROTOCOL.md has it: a message-metadata
// chunk with jetway.error {code, status, message, retryable,
// retry_after_ms}, then the `error` frame with errorText = message.
export function assertRefusal({ chunks, errors }, code, status) {
  const e = jetwayError(chunks);
  assert.ok(e, `no jetway.error in the chunks ${JSON.stringify(chunks)} (errors ${errors.map(String)})`);
  assert.equal(e.code, code, JSON.stringify(e));
  assert.equal(e.status, status, JSON.stringify(e));
  assert.equal(typeof e.message, 'string');
  assert.equal(typeof e.retryable, 'boolean');
  assert.ok(errors.some((x) => x.message === e.message), `errors ${errors.map(String)}, want one with errorText ${e.message}`);
  return e;
}

// settled waits until the user's usage records hold `done` answered
// requests, then checks that nothing else was charged: every other record
// has no tokens. It returns the records.
export async function settled(user, done) {
  const recs = await until(`${done} done usage records of ${user}`, async () => {
    const r = await usage(user);
    return r.filter((x) => x.outcome === 'done').length >= done ? r : null;
  });
  assert.equal(recs.filter((x) => x.outcome === 'done').length, done, JSON.stringify(recs));
  for (const r of recs) {
    if (r.outcome !== 'done') {
      assert.equal(r.input_tokens + r.output_tokens + r.cache_read_input_tokens + r.cache_write_input_tokens, 0,
        `charged for a refusal: ${JSON.stringify(r)}`);
    }
    assert.equal(r.door, 'ai-sdk', JSON.stringify(r));
  }
  return recs;
}

// Raw is a plain `ws` socket on /v1/ai-sdk, for frames the transport never
// sends; it keeps every frame and the close.
export class Raw {
  static async open({ server = 0, sub, app = 'support' }) {
    const r = new Raw();
    r.frames = [];
    r.closeEvent = null;
    r.ws = new WebSocket(urls[server], [SUBPROTOCOL, 'bearer.' + await token(sub, app)]);
    r.ws.on('message', (data) => r.frames.push(JSON.parse(data.toString())));
    r.ws.on('close', (code, reason) => { r.closeEvent = { code, reason: reason.toString() }; });
    await new Promise((resolve, reject) => { r.ws.once('open', resolve); r.ws.once('error', reject); });
    r.ws.on('error', (e) => { r.error = e; }); // the close says what happened
    assert.equal(r.ws.protocol, SUBPROTOCOL);
    return r;
  }

  // send ignores a send after the close: the close is what the tests check.
  send(frame) { this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame), () => {}); }

  for(requestId) { return this.frames.filter((f) => f.requestId === requestId); }

  // terminal waits for requestId's end, error or no-active, and returns its frames.
  async terminal(requestId, ms = 30_000) {
    await until(`a terminal frame for ${requestId}`, () => {
      if (this.for(requestId).some((f) => ['end', 'error', 'no-active'].includes(f.type))) return true;
      if (this.closeEvent) assert.fail(`socket closed ${JSON.stringify(this.closeEvent)} before ${requestId} ended`);
      return false;
    }, ms);
    return this.for(requestId);
  }

  async closed(ms = 30_000, what = '') {
    try {
      return await until('the socket to close', () => this.closeEvent, ms);
    } catch (e) {
      e.message += ` (${what}; frames ${JSON.stringify(this.frames).slice(0, 1500)})`;
      throw e;
    }
  }

  close() { this.ws.close(1000); }
}

// sendFrame is a send frame as the transport makes it.
export const sendFrame = ({ requestId = randomUUID(), chatId = newChatId(), messages, body = {}, trigger = 'submit-message', messageId }) =>
  ({ type: 'send', requestId, id: chatId, trigger, messageId, messages, headers: {}, body, metadata: undefined });

export const resumeFrame = ({ requestId = randomUUID(), chatId }) =>
  ({ type: 'resume', requestId, id: chatId, lastSequence: undefined, headers: {}, body: {}, metadata: undefined });

// chunksOf checks a request's frames on a raw socket: chunks with
// sequence 0, 1, 2, ... (contiguous), and returns the UI chunks.
export function chunksOf(frames) {
  const cs = frames.filter((f) => f.type === 'chunk');
  cs.forEach((f, i) => assert.equal(f.sequence, i, `chunk ${i} has sequence ${f.sequence}`));
  return cs.map((f) => f.chunk);
}

export { assert, randomUUID, WebSocket };
