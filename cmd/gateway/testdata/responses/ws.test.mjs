// WebSocket mode (GET /v1/responses upgraded) through the official openai
// package's own Responses WebSocket client: ResponsesWS from
// openai/resources/responses/ws (on `ws`, Authorization: Bearer <token>,
// ws://ADDR/v1/responses from the client's baseURL), with the SDK's
// ResponsesWebSocketSession lanes (openai/lib/responses/...) assembling each
// response (started by cmd/gateway TestResponsesNodeClient).
//
// What the SDK's WebSocket client does on its own when the socket drops
// (openai@7.59.0, internal/ws-connection-controller.mjs, and checked below
// in "the SDK's own reaction to a dropped socket"):
// - By default (no `reconnect` option) nothing: the drop (code 1006) is a
//   permanent `close` event (code 1006, the unsent queue); no `error`
//   event for a local terminate; the in-flight response is simply cut
//   off; a later send() is an `error` ("cannot send on a closed
//   WebSocket"). A session lane waiting in finalResponse() rejects with
//   "Responses WebSocket connection closed".
// - With `reconnect: {onReconnecting}` (opt-in) it reconnects on 1001,
//   1005, 1006, 1011-1013, 1015 to the same URL with backoff (500 ms
//   doubling, 5 tries), emits `reconnecting` / `reconnected`, and resends
//   only events still queued while it was down. It replays no request and
//   resumes no response ("No request is replayed by this helper"): the
//   lanes fail with "reconnected state must be restored explicitly", and
//   the response cut off stays cut off unless the application resumes it,
//   here with Jetway's {"type":"response.resume","response_id","starting_after"}.
import { test } from 'node:test';
import { ResponsesWebSocketSession } from 'openai/lib/responses/responses-websocket-session';
import {
  assert, openai, newSub, lookupTool, contiguous, deltas, countType, outputText, Socket, until, wsAnswer,
} from './helpers.mjs';

const T = { timeout: 240_000 };
const LIMITS = { maxLanes: 4, maxBufferedEvents: 10_000, maxBufferedBytes: 64 << 20 };

// turn sends a response.create on the lane and returns the SDK's final
// response and the raw events the socket got for it.
async function turn(s, lane, body) {
  const from = s.events.length;
  lane.create({ model: 'mock-tools', store: false, tools: [lookupTool], ...body });
  const response = await lane.finalResponse();
  const events = await s.next(from);
  contiguous(events);
  assert.equal(events[0].type, 'response.created');
  assert.equal(events.at(-1).type, 'response.completed', JSON.stringify(events.at(-1)));
  assert.equal(response.id, events[0].response.id);
  return { response, events };
}

test('20 chained turns with tool calls, each sending only its new input; a dropped socket resumed on another server; the chain goes on from the store', T, async () => {
  const sub = newSub('wschain');
  const a = await openai({ server: 0, sub, app: 'agent' });
  const s = await Socket.open(a);
  const session = new ResponsesWebSocketSession(s.rws, LIMITS);
  const lane = session.lane();

  // Warm-up (generate:false): created and completed, no output, no model call.
  const from = s.events.length;
  lane.create({ model: 'mock-tools', store: false, tools: [lookupTool], generate: false, input: [] });
  const warm = await lane.finalResponse();
  const warmEvents = await s.next(from);
  assert.deepEqual(warmEvents.map((e) => e.type), ['response.created', 'response.completed']);
  contiguous(warmEvents);
  assert.deepEqual(warm.output, []);

  let previous = warm.id;
  let pendingCall;
  const prompts = [];
  for (let i = 1; i <= 20; i++) {
    let input;
    if (i % 2 === 1) {
      const prompt = `question ${i} about the harbour lights`;
      prompts.push(prompt);
      input = [{ type: 'message', role: 'user', content: prompt }];
    } else {
      input = [{ type: 'function_call_output', call_id: pendingCall.call_id, output: `answer ${i} from the lookup` }];
    }
    const { response, events } = await turn(s, lane, { previous_response_id: previous, input });
    const calls = response.output.filter((o) => o.type === 'function_call');
    if (i % 2 === 1) {
      assert.equal(calls.length, 1, `turn ${i}: ${JSON.stringify(response.output)}`);
      assert.equal(calls[0].name, 'lookup');
      assert.deepEqual(JSON.parse(calls[0].arguments), { query: prompts.at(-1).split(' ').slice(0, 3).join(' ') });
      assert.notEqual(calls[0].call_id, pendingCall?.call_id, `turn ${i} repeats a call id`);
      pendingCall = calls[0];
    } else {
      assert.equal(calls.length, 0, `turn ${i} called the tool after its output`);
      assert.ok(outputText(response).length > 0);
      assert.equal(deltas(events), outputText(response));
    }
    previous = response.id;
  }

  // Turn 21 asks, turn 22 answers the call in text: cut the socket while it streams.
  const t21 = await turn(s, lane, { previous_response_id: previous, input: 'one more question about the lights' });
  const call = t21.response.output.find((o) => o.type === 'function_call');
  assert.ok(call);
  const cutFrom = s.events.length;
  lane.create({
    model: 'mock-tools', store: false, tools: [lookupTool], previous_response_id: t21.response.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'the last lookup' }],
  });
  const laneEnd = lane.finalResponse().then(() => null, (e) => e);
  await until('10 text deltas of turn 22', () => countType(s.events.slice(cutFrom), 'response.output_text.delta') >= 10);
  s.rws.socket.terminate(); // no close frame: a lost network
  await until('the close', () => s.closeEvent);
  const got = s.events.slice(cutFrom);
  assert.equal(got.filter((e) => e.type === 'response.completed').length, 0, 'turn 22 was over before the cut');
  contiguous(got);
  assert.equal(s.closeEvent.code, 1006);
  const laneError = await laneEnd;
  assert.ok(laneError, 'the lane did not see the drop');
  const id = got[0].response.id;
  const N = got.at(-1).sequence_number;

  // A new socket on server 1 finishes turn 22 from after event N.
  const b = await openai({ server: 1, jwt: a.jwt });
  const s2 = await Socket.open(b);
  const rest = await s2.turn({ type: 'response.resume', response_id: id, starting_after: N });
  contiguous(rest, N + 1);
  const end = rest.at(-1);
  assert.equal(end.type, 'response.completed', JSON.stringify(end).slice(0, 500));
  assert.equal(end.response.id, id);
  assert.equal(deltas(got) + deltas(rest), outputText(end.response), 'the resumed text does not add up to the answer');
  assert.equal(end.response.output.filter((o) => o.type === 'function_call').length, 0);

  // The chain goes on from turn 22 on this socket (store:false: kept for the resume window)...
  const session2 = new ResponsesWebSocketSession(s2.rws, LIMITS);
  const lane2 = session2.lane();
  const t23 = await turn(s2, lane2, { previous_response_id: id, input: 'and the lighthouse?' });
  assert.equal(t23.response.output.filter((o) => o.type === 'function_call').length, 1);
  // ...and on a fresh socket too, where nothing is in the socket's memory.
  const s3 = await Socket.open(b);
  const lane3 = new ResponsesWebSocketSession(s3.rws, LIMITS).lane();
  const c = t23.response.output.find((o) => o.type === 'function_call');
  const t24 = await turn(s3, lane3, { previous_response_id: t23.response.id, input: [{ type: 'function_call_output', call_id: c.call_id, output: 'it is lit' }] });
  assert.equal(t24.response.output.filter((o) => o.type === 'function_call').length, 0);
  assert.ok(outputText(t24.response).length > 0);
  for (const x of [s2, s3]) x.close();
});

test('the SDK\'s own reaction to a dropped socket: a permanent close by default; with reconnect, a new socket and nothing replayed', T, async () => {
  const sub = newSub('wsdrop');
  const a = await openai({ server: 0, sub });

  const s = await Socket.open(a);
  const from = s.events.length;
  s.send({ type: 'response.create', model: 'mock-a', input: 'a long answer to cut', store: false });
  await until('5 deltas', () => countType(s.events.slice(from), 'response.output_text.delta') >= 5);
  s.rws.socket.terminate();
  await until('the close', () => s.closeEvent);
  assert.equal(s.closeEvent.code, 1006);
  const n = s.events.length;
  await new Promise((r) => setTimeout(r, 500)); // nothing more arrives on a closed socket
  assert.equal(s.events.length, n);
  assert.equal(s.rws.socket.readyState, 3, 'the SDK opened another socket without being asked');
  const errors = s.errors.length;
  s.send({ type: 'response.create', model: 'mock-a', input: 'after the close' });
  assert.equal(s.errors.length, errors + 1);
  assert.match(s.errors.at(-1).message, /closed/);

  const reconnects = [];
  const r = await Socket.open(a, { reconnect: { onReconnecting: (ev) => { reconnects.push(ev); return {}; }, initialDelay: 50, maxRetries: 3 } });
  let reconnected = false;
  r.rws.on('reconnected', () => { reconnected = true; });
  const rFrom = r.events.length;
  r.send({ type: 'response.create', model: 'mock-a', input: 'a long answer to cut, then reconnect', store: false });
  await until('5 deltas', () => countType(r.events.slice(rFrom), 'response.output_text.delta') >= 5);
  const cutAt = r.events.length;
  r.rws.socket.terminate();
  await until('the SDK to reconnect', () => reconnected, 20_000);
  assert.equal(reconnects[0].closeCode, 1006);
  assert.equal(r.closeEvent, null);
  await new Promise((res) => setTimeout(res, 500));
  const after = r.events.slice(cutAt);
  assert.equal(countType(after, 'response.output_text.delta'), 0, 'the SDK resumed the response by itself');
  // The application resumes it: Jetway's response.resume on the new socket.
  const cut = r.events.slice(rFrom, cutAt);
  const rest = await r.turn({ type: 'response.resume', response_id: cut[0].response.id, starting_after: cut.at(-1).sequence_number });
  contiguous(rest, cut.at(-1).sequence_number + 1);
  assert.equal(rest.at(-1).type, 'response.completed');
  assert.equal(deltas(cut) + deltas(rest), outputText(rest.at(-1).response));
  r.close();
});

test('bad input on the socket: each an error event with status 400, and the socket goes on', T, async () => {
  const sub = newSub('wsbad');
  const a = await openai({ server: 1, sub });
  const ws = (await wsAnswer(sub + '-ws', 'support', 0, { prompt: 'the first of two' })).done;
  const s = await Socket.open(a);
  const usable = async (what) => {
    const ev = await s.turn({ type: 'response.create', model: 'mock-a', input: `still there after ${what}?`, max_output_tokens: 5, store: false });
    assert.equal(ev.at(-1).type, 'response.incomplete', `after ${what}: ${JSON.stringify(ev.at(-1)).slice(0, 300)}`);
    assert.equal(ev.at(-1).response.incomplete_details.reason, 'max_output_tokens');
  };
  const refusedWith = async (what, send, param) => {
    const errors = s.errors.length;
    const from = s.events.length;
    send();
    const [e] = await s.next(from);
    assert.equal(e.type, 'error', `${what}: ${JSON.stringify(e).slice(0, 300)}`);
    assert.equal(e.status, 400, `${what}: ${JSON.stringify(e)}`);
    assert.equal(e.error.type, 'invalid_request_error');
    assert.equal(typeof e.error.message, 'string');
    if (param !== undefined) assert.equal(e.error.param, param, `${what}: ${JSON.stringify(e)}`);
    await until('the SDK\'s error event', () => s.errors.length > errors);
    assert.equal(s.errors.at(-1).error?.type, 'error'); // the SDK's WebSocketError keeps the event
    assert.equal(s.rws.socket.readyState, 1, `${what} closed the socket`);
    await usable(what);
    return e;
  };

  await refusedWith('not JSON', () => s.sendRaw('this is not json {'));
  await refusedWith('an unknown event type', () => s.send({ type: 'response.frobnicate' }), 'type');
  // (stream:true is taken on the socket: Codex sends it; background is not.)
  await refusedWith('background on the socket', () => s.send({ type: 'response.create', model: 'mock-a', input: 'x', background: true }), 'background');
  const big = await refusedWith('300 KiB of text', () => s.send({ type: 'response.create', model: 'mock-a', input: 'x'.repeat(300 << 10) }));
  assert.match(big.error.message, /bytes/);

  // A second response.create while one is in flight: refused, the first completes.
  const from = s.events.length;
  s.send({ type: 'response.create', model: 'mock-a', input: 'the first of two', store: false });
  await until('the first under way', () => s.events.slice(from).some((e) => e.type === 'response.output_text.delta'));
  s.send({ type: 'response.create', model: 'mock-a', input: 'the second of two', store: false });
  await until('the first to complete', () => s.events.slice(from).some((e) => e.type === 'response.completed'), 60_000);
  const evs = s.events.slice(from);
  const inFlight = evs.filter((e) => e.type === 'error');
  assert.equal(inFlight.length, 1, JSON.stringify(inFlight));
  assert.equal(inFlight[0].status, 400);
  assert.equal(inFlight[0].error.code, 'response_in_flight');
  const first = evs.filter((e) => e.type !== 'error');
  contiguous(first);
  assert.equal(deltas(first), ws.text);
  assert.equal(first.filter((e) => e.type === 'response.created').length, 1, 'the second response.create started a response');
  await usable('the in-flight refusal');
  s.close();
});
