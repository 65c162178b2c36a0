// The official `@anthropic-ai/sdk` package against a live Jetway (started by
// cmd/gateway TestAnthropicNodeClient): the JWT is the API key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';

const baseURL = process.env.JETWAY_TEST_BASE_URL;
assert.ok(baseURL, 'JETWAY_TEST_BASE_URL is not set: run through go test ./cmd/gateway -run TestAnthropicNodeClient');

const client = (token = process.env.JETWAY_TEST_TOKEN) => new Anthropic({ baseURL, apiKey: token, authToken: null, maxRetries: 0 });
const ask = (content, extra = {}) => ({ model: 'mock-a', max_tokens: 1000, messages: [{ role: 'user', content }], ...extra });

test('streaming: the events in order, the text, stop_reason and usage', async () => {
  const stream = await client().messages.create(ask('stream me', { stream: true }));
  const types = [];
  let text = '';
  let usage = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta') text += ev.delta.text;
    if (ev.type === 'message_delta') {
      assert.equal(ev.delta.stop_reason, 'end_turn');
      usage = ev.usage;
    }
  }
  // (The package's iterator keeps ping events to itself.)
  assert.deepEqual(types.slice(0, 2), ['message_start', 'content_block_start']);
  assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  assert.equal(types.filter((t) => t === 'content_block_delta').length, 300);
  assert.ok(text.length > 0);
  assert.equal(usage.output_tokens, 300);
  assert.ok(usage.input_tokens > 0);
});

test('the stream helper and a whole answer agree; request-id', async () => {
  const final = await client().messages.stream(ask('stream me')).finalMessage();
  const { data, response } = await client().messages.create(ask('stream me')).withResponse();
  assert.equal(data.type, 'message');
  assert.equal(data.role, 'assistant');
  assert.equal(data.content[0].text, final.content[0].text);
  assert.equal(data.stop_reason, 'end_turn');
  assert.equal(data.usage.output_tokens, 300);
  assert.equal(data.id, 'msg_' + response.headers.get('request-id'));
});

test('a quota refusal is a RateLimitError with retry-after', async () => {
  await assert.rejects(client(process.env.JETWAY_TEST_TOKEN_TINY).messages.create(ask('too big for the tiny app')), (err) => {
    assert.ok(err instanceof Anthropic.RateLimitError, `got ${err}`);
    assert.equal(err.status, 429);
    assert.equal(err.error.error.type, 'rate_limit_error');
    assert.ok(Number(err.headers.get('retry-after')) >= 1, `retry-after ${err.headers.get('retry-after')}`);
    assert.match(err.message, /minute window/);
    return true;
  });
});

test('bad input is a BadRequestError naming the field; an unknown model is NotFoundError; a forged key AuthenticationError', async () => {
  await assert.rejects(client().messages.create(ask('q', { top_k: 5 })), (err) => {
    assert.ok(err instanceof Anthropic.BadRequestError, `got ${err}`);
    assert.equal(err.error.error.type, 'invalid_request_error');
    assert.match(err.error.error.message, /^top_k: /);
    return true;
  });
  await assert.rejects(client().messages.create({ ...ask('q'), messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } }] }] }),
  (err) => err instanceof Anthropic.BadRequestError && /^messages\[0\]\.content\[0\]\.source\.type: .*does not fetch URLs/.test(err.error.error.message));
  await assert.rejects(client().messages.create({ ...ask('q'), model: 'mock-cheap' }),
    (err) => err instanceof Anthropic.NotFoundError && err.error.error.type === 'not_found_error');
  await assert.rejects(client('forged').messages.create(ask('q')),
    (err) => err instanceof Anthropic.AuthenticationError && err.error.error.type === 'authentication_error');
});

test('models and count_tokens', async () => {
  const ids = [];
  for await (const m of client().models.list()) {
    assert.equal(m.type, 'model');
    ids.push(m.id);
  }
  assert.deepEqual(ids, ['mock-a', 'mock-b', 'mock-stall', 'mock-fail-after-5', 'mock-throttle', 'mock-unavailable']);
  const { input_tokens: n } = await client().messages.countTokens({ model: 'mock-a', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(n, 9);
});

// The agent app's mock-tools calls the first tool it is given with
// {"query": the first three words of the last message}.
const lookup = { name: 'lookup', description: 'looks a phrase up',
  input_schema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } };

test('a tool round trip: the call streams through the helper, the result is answered in text', async () => {
  const agent = client(process.env.JETWAY_TEST_TOKEN_AGENT);
  const prompt = 'international timezone conversion for Paris';
  const body = { model: 'mock-tools', max_tokens: 1000, tools: [lookup], messages: [{ role: 'user', content: prompt }] };
  const msg = await agent.messages.stream(body).finalMessage();
  assert.equal(msg.stop_reason, 'tool_use');
  const call = msg.content.at(-1);
  assert.equal(call.type, 'tool_use');
  assert.equal(call.name, 'lookup');
  assert.deepEqual(call.input, { query: 'international timezone conversion' });
  const next = await agent.messages.create({ ...body, messages: [...body.messages, { role: 'assistant', content: msg.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'UTC+1' }] }] });
  assert.equal(next.stop_reason, 'end_turn');
  assert.ok(next.content[0].text.length > 0);
});

test('a dropped stream resumes with Idempotency-Key and Last-Event-ID to the identical text', async () => {
  const headers = { 'Idempotency-Key': 'resume-' + randomUUID() };
  const first = await client().messages.create(ask('resume me', { stream: true }), { headers });
  let text = '';
  let seen = 0; // each chunk is one content_block_delta: its id is its seq
  for await (const ev of first) {
    if (ev.type !== 'content_block_delta') continue;
    text += ev.delta.text;
    if (++seen === 20) {
      first.controller.abort(); // the connection drops mid-answer
      break;
    }
  }
  const rest = await client().messages.create(ask('resume me', { stream: true }),
    { headers: { ...headers, 'Last-Event-ID': String(seen) } });
  let stop = null;
  for await (const ev of rest) {
    if (ev.type === 'content_block_delta') text += ev.delta.text;
    if (ev.type === 'message_delta') stop = ev.delta.stop_reason;
  }
  assert.equal(stop, 'end_turn');
  const whole = await client().messages.create(ask('resume me'), { headers });
  assert.equal(text, whole.content[0].text);
});
