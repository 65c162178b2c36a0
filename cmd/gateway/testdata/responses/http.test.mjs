// POST /v1/responses through the official openai client (started by
// cmd/gateway TestResponsesNodeClient): text (one object, the typed event
// stream, the stream helper) equal to /v1/ws's answer, a function tool
// round trip both ways, reasoning passed back to another server, images,
// cached tokens.
import { test } from 'node:test';
import {
  assert, openai, wsAnswer, newSub, lookupTool, PNG, collect, contiguous, deltas, countType, outputText,
  TEXT_EVENTS, squeeze, refused, OpenAI, randomUUID, controlURL, ctl,
} from './helpers.mjs';

const T = { timeout: 120_000 };

test('text: one object, the event stream and stream().finalResponse() are /v1/ws\'s answer; sequence_numbers from 0', T, async () => {
  const sub = newSub('text');
  const prompt = 'tell me about the weather over the harbour';
  const ws = (await wsAnswer(sub + '-ws', 'support', 1, { prompt })).done;
  const client = await openai({ server: 0, sub });

  const key = 'text-' + randomUUID();
  const { data: whole, response: res } = await client.responses.create({ model: 'mock-a', input: prompt },
    { headers: { 'Idempotency-Key': key } }).withResponse();
  assert.equal(res.headers.get('x-request-id'), key);
  assert.equal(whole.id, 'resp_' + key);
  assert.equal(whole.object, 'response');
  assert.equal(whole.status, 'completed');
  assert.equal(whole.model, 'mock-a');
  assert.equal(whole.output_text, ws.text);
  assert.equal(outputText(whole), ws.text);
  assert.equal(whole.output.length, 1);
  assert.equal(whole.output[0].role, 'assistant');
  assert.ok(whole.usage.input_tokens > 0 && whole.usage.output_tokens > 0, JSON.stringify(whole.usage));
  assert.equal(whole.usage.total_tokens, whole.usage.input_tokens + whole.usage.output_tokens);

  const stream = await client.responses.create({ model: 'mock-a', input: prompt, stream: true });
  const { events, error } = await collect(stream);
  assert.equal(error, undefined);
  contiguous(events);
  assert.deepEqual(squeeze(events.map((e) => e.type)), TEXT_EVENTS);
  assert.equal(deltas(events), ws.text);
  const done = events.at(-1).response;
  assert.equal(done.status, 'completed');
  assert.equal(outputText(done), ws.text);
  assert.equal(events[0].response.status, 'in_progress');
  assert.equal(events[0].response.id, done.id);
  const textDone = events.find((e) => e.type === 'response.output_text.done');
  assert.equal(textDone.text, ws.text);
  const item = events.find((e) => e.type === 'response.output_item.added').item;
  for (const e of events.filter((e) => e.item_id !== undefined)) assert.equal(e.item_id, item.id, e.type);

  const helper = client.responses.stream({ model: 'mock-a', input: prompt });
  const seen = [];
  helper.on('response.output_text.delta', (e) => seen.push(e.delta));
  const final = await helper.finalResponse();
  assert.equal(final.status, 'completed');
  assert.equal(final.output_text, ws.text);
  assert.equal(seen.join(''), ws.text);
});

test('a function tool round trip: by previous_response_id, and with the whole input passed back (store:false)', T, async () => {
  const sub = newSub('tools');
  const prompt = 'find the opening hours of the museum';
  const client = await openai({ server: 0, sub, app: 'agent' });
  const ws = (await wsAnswer(sub + '-ws', 'agent', 1, { prompt, tools: true })).done;

  const first = await client.responses.create({ model: 'mock-tools', input: prompt, tools: [lookupTool] });
  assert.equal(first.status, 'completed');
  const calls = first.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(first.output));
  const [call] = calls;
  assert.equal(call.name, 'lookup');
  assert.deepEqual(JSON.parse(call.arguments), { query: 'find the opening' });
  assert.equal(call.status, 'completed');
  assert.match(call.id, /^fc_/);
  const wsCalls = (ws.blocks ?? []).filter((b) => b.type === 'tool_use');
  assert.equal(wsCalls.length, 1, JSON.stringify(ws));
  assert.equal(call.call_id, wsCalls[0].id);
  assert.equal(call.name, wsCalls[0].name);
  assert.deepEqual(JSON.parse(call.arguments), wsCalls[0].input);
  assert.equal(first.output_text, ws.text);

  const result = { type: 'function_call_output', call_id: call.call_id, output: 'open 9 to 5, closed on mondays' };
  const byId = await client.responses.create({ model: 'mock-tools', previous_response_id: first.id, input: [result], tools: [lookupTool] });
  assert.equal(byId.status, 'completed');
  assert.equal(byId.previous_response_id, first.id);
  assert.equal(byId.output.filter((o) => o.type === 'function_call').length, 0, 'the tool was called again after its output');
  assert.ok(byId.output_text.length > 0);

  // The same conversation sent whole, nothing stored: the same answer.
  const other = await openai({ server: 1, sub, app: 'agent' });
  const whole = await other.responses.create({
    model: 'mock-tools', store: false, tools: [lookupTool],
    input: [{ role: 'user', content: prompt }, ...first.output, result],
  });
  assert.equal(whole.status, 'completed');
  assert.equal(whole.store, false);
  assert.equal(whole.output_text, byId.output_text);

  // Streamed: the call's arguments arrive in deltas that add up to the done event's.
  const stream = await client.responses.create({ model: 'mock-tools', input: prompt, tools: [lookupTool], stream: true });
  const { events, error } = await collect(stream);
  assert.equal(error, undefined);
  contiguous(events);
  const args = deltas(events, 'response.function_call_arguments.delta');
  const argsDone = events.find((e) => e.type === 'response.function_call_arguments.done');
  assert.equal(args, argsDone.arguments);
  assert.equal(argsDone.arguments, call.arguments);
  assert.deepEqual(events.at(-1).response.output.map((o) => o.type), ['message', 'function_call']);

  // A tool the gateway cannot run is dropped, and named in a header.
  const { data, response } = await client.responses.create({
    model: 'mock-tools', input: 'search the web for museums', store: false,
    tools: [{ type: 'web_search' }, lookupTool],
  }).withResponse();
  assert.equal(data.status, 'completed');
  assert.equal(response.headers.get('x-jetway-dropped-tools'), 'web_search');
});

test('reasoning: summary events, an encrypted reasoning item, passed back on another server', T, async () => {
  const sub = newSub('reason');
  const prompt = 'think hard about the tides';
  const client = await openai({ server: 0, sub, app: 'agent' });
  const ws = await wsAnswer(sub + '-ws', 'agent', 1, { prompt, model: 'mock-reasoning', reasoning: 1024 });
  const body = { model: 'mock-reasoning', input: prompt, reasoning: { effort: 'low', summary: 'auto' }, include: ['reasoning.encrypted_content'] };

  const { events, error } = await collect(await client.responses.create({ ...body, stream: true }));
  assert.equal(error, undefined);
  contiguous(events);
  const types = squeeze(events.map((e) => e.type));
  assert.deepEqual(types.slice(0, 5), ['response.created', 'response.in_progress', 'response.output_item.added',
    'response.reasoning_summary_part.added', 'response.reasoning_summary_text.delta']);
  assert.ok(types.indexOf('response.reasoning_summary_text.done') < types.indexOf('response.output_text.delta'), types.join(' '));
  assert.ok(types.includes('response.reasoning_summary_part.done'));
  const summary = deltas(events, 'response.reasoning_summary_text.delta');
  assert.equal(summary, ws.reasoning_text);
  assert.equal(events.find((e) => e.type === 'response.reasoning_summary_text.done').text, summary);
  const done = events.at(-1).response;
  assert.equal(done.status, 'completed');
  const [reasoning] = done.output;
  assert.equal(reasoning.type, 'reasoning');
  assert.deepEqual(reasoning.summary, [{ type: 'summary_text', text: summary }]);
  assert.equal(typeof reasoning.encrypted_content, 'string');
  assert.ok(reasoning.encrypted_content.length > 0);
  assert.ok(!reasoning.encrypted_content.includes(summary.slice(0, 20)), 'the reasoning is not sealed');
  assert.equal(done.output[1].type, 'message');
  assert.ok(done.usage.output_tokens_details.reasoning_tokens > 0, JSON.stringify(done.usage));
  assert.equal(deltas(events), ws.done.text);

  // The same answer as one object (non-streaming), sealed to the same bytes.
  const whole = await client.responses.create(body);
  assert.deepEqual(whole.output[0].encrypted_content, reasoning.encrypted_content);
  assert.equal(whole.output_text, ws.done.text);

  // Passed back whole to server 1: the key is the fleet's, the turn is answered.
  const other = await openai({ server: 1, sub, app: 'agent' });
  const next = await other.responses.create({
    ...body, store: false, input: [{ role: 'user', content: prompt }, ...done.output, { role: 'user', content: 'and the moon?' }],
  });
  assert.equal(next.status, 'completed');
  assert.equal(next.output[0].type, 'reasoning');
  assert.ok(next.output_text.length > 0);
  // By previous_response_id on server 1 too.
  const chained = await other.responses.create({ ...body, previous_response_id: whole.id, input: 'and the moon?' });
  assert.equal(chained.status, 'completed');
  assert.equal(chained.output_text, next.output_text);
});

test('images: a data URL is answered; a remote URL is refused naming the parameter', T, async () => {
  const sub = newSub('image');
  const client = await openai({ server: 0, sub, app: 'agent' });
  const r = await client.responses.create({
    model: 'mock-tools', store: false,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'what is in this picture?' }, { type: 'input_image', image_url: PNG, detail: 'auto' }] }],
  });
  assert.equal(r.status, 'completed');
  assert.ok(r.output_text.length > 0);
  assert.ok(r.usage.input_tokens > 0);

  const e = await refused(client.responses.create({
    model: 'mock-tools',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'and this one?' }, { type: 'input_image', image_url: `${controlURL}/never-fetch/cat.png`, detail: 'auto' }] }],
  }), OpenAI.BadRequestError, 400, 'a remote image');
  assert.equal(e.param, 'input[0].content[1].image_url', JSON.stringify(e.error));
  assert.equal(e.type, 'invalid_request_error');
  assert.match(e.message, /data URL/);
  assert.equal(await ctl('/fetched'), 0, 'the gateway fetched the image URL');
});

test('cached tokens are reported (these apps have no prompt cache: present and 0)', T, async () => {
  // jetway.yaml's only prompt-cached models (claude-cached, cached-throttle)
  // are in the chat apps, which the control server does not sign in to.
  const sub = newSub('cache');
  const client = await openai({ server: 0, sub });
  const long = 'a long and repeated preamble about harbours and tides. '.repeat(300);
  for (let i = 0; i < 2; i++) {
    const r = await client.responses.create({ model: 'mock-a', input: long, max_output_tokens: 5, store: false });
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(r.usage.input_tokens_details.cached_tokens, 0, JSON.stringify(r.usage));
    assert.ok(r.usage.input_tokens > 1024, JSON.stringify(r.usage));
  }
  const { events } = await collect(await client.responses.create({ model: 'mock-a', input: long, max_output_tokens: 5, store: false, stream: true }));
  assert.equal(events.at(-1).type, 'response.incomplete');
  assert.equal(events.at(-1).response.usage.input_tokens_details.cached_tokens, 0);
});
