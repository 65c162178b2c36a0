// Shared by the Responses door tests (started by cmd/gateway
// TestResponsesNodeClient): the official openai client (HTTP), its own
// Responses WebSocket client (ResponsesWS, on `ws`), and the Go side's
// control server (the AI SDK tests' newAISDKControl).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';

const env = (name) => {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run through go test ./cmd/gateway -run TestResponsesNodeClient`);
  return v;
};

// urls[i] is server i's http://ADDR/v1: 0 and 1 stay up, 2 is the one a test SIGKILLs.
export const urls = env('JETWAY_TEST_RESPONSES_URLS').split(',');
export const controlURL = env('JETWAY_TEST_CONTROL');

// ctl calls the Go side: GET without a body, else POST of the body as JSON.
export async function ctl(path, query = {}, body = undefined) {
  const res = await fetch(`${controlURL}${path}?${new URLSearchParams(query)}`, body === undefined ? {} :
    { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  assert.equal(res.status, 200, `control ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

// token is a JWT of sub on app (support, dev, agent, docs; see aisdkApps).
export const token = (sub, app = 'support') => ctl('/token', { sub, app });

// wsAnswer is the /v1/ws done frame (and reasoning text) for the same
// prompt, from the Go client: {done: {text, ...}, reasoning_text}.
export const wsAnswer = (sub, app, server, body) => ctl('/ws-answer', { sub, app, server }, body);

export const newSub = (what) => `resp-${what}-${randomUUID().slice(0, 8)}`;

// openai is the official client of sub on app, on server (no retries: every
// refusal is seen as it is).
export async function openai({ server = 0, sub, app = 'support', jwt } = {}) {
  jwt ??= await token(sub, app);
  const c = new OpenAI({ baseURL: urls[server], apiKey: jwt, maxRetries: 0, timeout: 60_000 });
  c.jwt = jwt;
  return c;
}

// The tool the tests offer (the Go tests' lookupTool).
export const lookupTool = {
  type: 'function', name: 'lookup', description: 'looks a phrase up',
  parameters: { type: 'object', properties: { query: { type: 'string' } } },
};

// A 1x1 PNG.
export const PNG = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

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

// collect reads an SDK event stream to its end (onEvent may break off by
// returning true); it returns the events and the error that ended it.
export async function collect(stream, onEvent = () => false) {
  const events = [];
  let error;
  try {
    for await (const ev of stream) {
      events.push(ev);
      if (onEvent(ev, events)) break;
    }
  } catch (e) {
    error = e;
  }
  return { events, error };
}

// contiguous checks sequence_numbers from `from`, one apart.
export function contiguous(events, from = 0) {
  events.forEach((e, i) => assert.equal(e.sequence_number, from + i,
    `event ${i} (${e.type}) has sequence_number ${e.sequence_number}, want ${from + i}`));
}

export const deltas = (events, type = 'response.output_text.delta') => events.filter((e) => e.type === type).map((e) => e.delta).join('');
export const countType = (events, type) => events.filter((e) => e.type === type).length;
export const outputText = (response) => (response?.output ?? []).filter((o) => o.type === 'message')
  .flatMap((o) => o.content).filter((c) => c.type === 'output_text').map((c) => c.text).join('');

// The event types of a one-message text answer, in order (the deltas once).
export const TEXT_EVENTS = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
  'response.output_text.delta', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed'];
export const squeeze = (types) => types.filter((t, i) => !(t.endsWith('.delta') && types[i - 1] === t));

// sseEvents splits raw SSE text into its events ("event: ...\ndata: ...\n\n").
export function sseEvents(text) {
  assert.ok(text.endsWith('\n\n'), `the stream does not end with an event: ${JSON.stringify(text.slice(-200))}`);
  return text.slice(0, -2).split('\n\n').map((e) => e + '\n\n');
}

// rawStream is a GET /v1/responses/{id}?stream=true (starting_after) as
// the SDK sends it, read as its bytes: the SDK's own request, its raw
// response (asResponse).
export async function rawStream(client, id, startingAfter) {
  const q = { stream: true };
  if (startingAfter !== undefined) q.starting_after = startingAfter;
  const res = await client.responses.retrieve(id, q).asResponse();
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
  return res.text();
}

// statusOf asserts an SDK error of class cls with status, and returns it.
export async function refused(promise, cls, status, what = '') {
  let err;
  try {
    const v = await promise;
    assert.fail(`${what}: want ${cls.name} ${status}, got ${JSON.stringify(v)?.slice(0, 500)}`);
  } catch (e) {
    err = e;
  }
  if (err instanceof assert.AssertionError) throw err;
  assert.ok(err instanceof cls, `${what}: want ${cls.name}, got ${err?.constructor?.name}: ${err?.message} ${JSON.stringify(err?.error)}`);
  assert.equal(err.status, status, `${what}: ${err.message}`);
  assert.equal(typeof err.message, 'string');
  return err;
}

// Socket is the SDK's own Responses WebSocket client (ResponsesWS) of a
// client, keeping every event it got (error events included) and its close.
export class Socket {
  static async open(client, options = {}) {
    const s = new Socket();
    s.events = [];
    s.errors = [];
    s.closeEvent = null;
    s.rws = new ResponsesWS(client, options);
    s.rws.on('event', (ev) => s.events.push(ev));
    // Without an error listener the SDK rejects a stray promise for every error event.
    s.rws.on('error', (e) => s.errors.push(e));
    s.rws.on('close', (code, reason) => { s.closeEvent = { code, reason: String(reason ?? '') }; });
    await until('the socket to open', () => {
      if (s.closeEvent) assert.fail(`socket closed before it opened: ${JSON.stringify(s.closeEvent)} ${s.errors.map(String)}`);
      return s.rws.socket.readyState === 1;
    }, 20_000);
    return s;
  }

  send(event) { this.rws.send(event); }

  sendRaw(data) { this.rws.sendRaw(data); }

  // next waits for the events after index `from` to hold a terminal one
  // (response.completed/failed/incomplete, or an error event) and returns
  // them up to and including it.
  async next(from, ms = 60_000) {
    const terminal = (e) => ['response.completed', 'response.failed', 'response.incomplete', 'error'].includes(e.type);
    await until(`a terminal event after event ${from}`, () => {
      if (this.events.slice(from).some(terminal)) return true;
      if (this.closeEvent) assert.fail(`socket closed ${JSON.stringify(this.closeEvent)} before a terminal event; events ${JSON.stringify(this.events.slice(from)).slice(0, 1500)}`);
      return false;
    }, ms);
    const rest = this.events.slice(from);
    return rest.slice(0, rest.findIndex(terminal) + 1);
  }

  // turn sends one event and returns its events up to its terminal one.
  async turn(event, ms) {
    const from = this.events.length;
    this.send(event);
    return this.next(from, ms);
  }

  close() { this.rws.close({ code: 1000, reason: 'done' }); }
}

export { assert, randomUUID, OpenAI, ResponsesWS };
