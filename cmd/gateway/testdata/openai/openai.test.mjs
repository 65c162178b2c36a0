// The official `openai` package against a live Jetway (started by
// cmd/gateway TestOpenAINodeClient): the JWT is the API key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';

const baseURL = process.env.JETWAY_TEST_BASE_URL;
assert.ok(baseURL, 'JETWAY_TEST_BASE_URL is not set: run through go test ./cmd/gateway -run TestOpenAINodeClient');

const client = (token = process.env.JETWAY_TEST_TOKEN) => new OpenAI({ baseURL, apiKey: token, maxRetries: 0 });
const ask = (content, extra = {}) => ({ model: 'mock-a', messages: [{ role: 'user', content }], ...extra });

test('streaming: chunks in order, finish_reason stop, usage in the last chunk', async () => {
  const stream = await client().chat.completions.create(ask('stream me', { stream: true, stream_options: { include_usage: true } }));
  let text = '';
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.ok(text.length > 0);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'stop');
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 300);
  assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + 300);
});

test('non-streaming: one body, same answer as the stream, x-request-id', async () => {
  const { data, response } = await client().chat.completions.create(ask('stream me')).withResponse();
  const stream = await client().chat.completions.create(ask('stream me', { stream: true }));
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(data.choices[0].message.content, text);
  assert.equal(data.choices[0].finish_reason, 'stop');
  assert.equal(data.usage.completion_tokens, 300);
  assert.match(response.headers.get('x-request-id'), /^[A-Za-z0-9_-]{8,64}$/);
});

test('a quota refusal is a RateLimitError with retry-after', async () => {
  await assert.rejects(client(process.env.JETWAY_TEST_TOKEN_TINY).chat.completions.create(ask('too big for the tiny app')), (err) => {
    assert.ok(err instanceof OpenAI.RateLimitError, `got ${err}`);
    assert.equal(err.status, 429);
    assert.equal(err.code, 'quota_exceeded');
    assert.ok(Number(err.headers.get('retry-after')) >= 1, `retry-after ${err.headers.get('retry-after')}`);
    assert.match(err.message, /minute window/);
    return true;
  });
});

test('an unsupported parameter is a 400 naming it', async () => {
  await assert.rejects(client().chat.completions.create(ask('two answers', { n: 2 })), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `got ${err}`);
    assert.equal(err.code, 'unsupported_parameter');
    assert.equal(err.param, 'n');
    return true;
  });
  await assert.rejects(client().chat.completions.create(ask('one call at a time', { parallel_tool_calls: false })),
    (err) => err instanceof OpenAI.BadRequestError && err.code === 'unsupported_parameter' && err.param === 'parallel_tool_calls');
  // Tools for a model configured without the tools capability.
  await assert.rejects(client().chat.completions.create(ask('tools', {
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
  })), (err) => err instanceof OpenAI.BadRequestError && err.code === 'invalid_request' && err.param === 'tools');
});

test('a model outside the app allowlist is refused (404) and /v1/models lists the allowlist', async () => {
  await assert.rejects(client().chat.completions.create({ ...ask('cheap please'), model: 'mock-cheap' }), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, `got ${err}`);
    assert.equal(err.code, 'model_not_allowed');
    assert.equal(err.param, 'model');
    return true;
  });
  const ids = [];
  for await (const m of client().models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['mock-a', 'mock-b', 'mock-stall', 'mock-fail-after-5', 'mock-throttle', 'mock-unavailable']);
});

test('requests over the per-user in-flight cap are refused at once, never queued', async () => {
  const c = client(process.env.JETWAY_TEST_TOKEN_BUSY);
  const running = [await c.chat.completions.create(ask('one', { stream: true })),
    await c.chat.completions.create(ask('two', { stream: true }))];
  await assert.rejects(c.chat.completions.create(ask('three')), (err) => {
    assert.ok(err instanceof OpenAI.RateLimitError, `got ${err}`);
    assert.equal(err.code, 'rate_limited');
    assert.ok(Number(err.headers.get('retry-after')) >= 1);
    return true;
  });
  for (const s of running) for await (const _ of s) { /* drain */ }
});

test('a dropped stream resumes with Idempotency-Key and Last-Event-ID to the identical text', async () => {
  const key = 'resume-' + randomUUID();
  const headers = { 'Idempotency-Key': key };
  const first = await client().chat.completions.create(ask('resume me', { stream: true }), { headers });
  let text = '';
  let seen = 0; // one event per chunk: its id is its seq
  for await (const chunk of first) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (++seen === 20) {
      first.controller.abort(); // the connection drops mid-answer
      break;
    }
  }
  assert.equal(seen, 20);
  const rest = await client().chat.completions.create(ask('resume me', { stream: true }),
    { headers: { ...headers, 'Last-Event-ID': String(seen) } });
  let finish = null;
  for await (const chunk of rest) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'stop');
  // The whole answer, once more, from the same request (no second model call).
  const whole = await client().chat.completions.create(ask('resume me'), { headers });
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(whole.id, 'chatcmpl-' + key);
  // The same key with another body is a conflict.
  await assert.rejects(client().chat.completions.create(ask('something else'), { headers }),
    (err) => err instanceof OpenAI.ConflictError && err.param === 'Idempotency-Key');
});

// The agent app's default model, mock-tools, calls the first tool it is
// given with {"query": the first three words of the last message}, and
// answers in text once the last message holds a tool result.
const agent = () => client(process.env.JETWAY_TEST_TOKEN_AGENT);
const lookup = { type: 'function', function: { name: 'lookup', description: 'looks a phrase up',
  parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } } };
const toolAsk = (content, extra = {}) => ({ model: 'mock-tools', tools: [lookup], messages: [{ role: 'user', content }], ...extra });

// collect reads a stream: its text, its tool calls assembled by index, its finish_reason and event count.
// A resumed stream continues `out` of the stream it resumes.
async function collect(stream, stopAfter = Infinity, out = { text: '', calls: [], finish: null, events: 0 }) {
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    out.text += choice?.delta?.content ?? '';
    for (const tc of choice?.delta?.tool_calls ?? []) {
      if (tc.id) {
        assert.equal(tc.type, 'function');
        out.calls[tc.index] = { id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: tc.function.arguments ?? '' } };
      } else {
        assert.ok(out.calls[tc.index], `arguments for tool call ${tc.index} before its start`);
        out.calls[tc.index].function.arguments += tc.function.arguments;
      }
    }
    out.finish = choice?.finish_reason ?? out.finish;
    if (++out.events === stopAfter) {
      stream.controller.abort();
      break;
    }
  }
  return out;
}

test('a tool round trip: the call streams and arrives whole, the result is answered in text', async () => {
  const prompt = 'international timezone conversion for Paris';
  const streamed = await collect(await agent().chat.completions.create(toolAsk(prompt, { stream: true })));
  assert.equal(streamed.finish, 'tool_calls');
  assert.ok(streamed.text.length > 0, 'mock-tools says something before its call');
  assert.deepEqual(streamed.calls, [{ id: 'tooluse_mock_1', type: 'function',
    function: { name: 'lookup', arguments: JSON.stringify({ query: 'international timezone conversion' }) } }]);

  const whole = await agent().chat.completions.create(toolAsk(prompt, { tool_choice: 'required' }));
  const msg = whole.choices[0].message;
  assert.equal(whole.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(msg.tool_calls, streamed.calls);
  assert.equal(msg.content, streamed.text);

  // The next turn: the assistant's message as received, then the tool's result.
  const call = msg.tool_calls[0];
  const args = JSON.parse(call.function.arguments);
  const next = await agent().chat.completions.create({ model: 'mock-tools', tools: [lookup], messages: [
    { role: 'user', content: prompt }, msg,
    { role: 'tool', tool_call_id: call.id, content: `${args.query}: UTC+1` }] });
  assert.equal(next.choices[0].finish_reason, 'stop');
  assert.equal(next.choices[0].message.tool_calls, undefined);
  assert.ok(next.choices[0].message.content.length > 0);
});

test('a stream dropped inside a tool call resumes with Last-Event-ID to the same call', async () => {
  const key = 'toolresume-' + randomUUID();
  const body = toolAsk('supercalifragilistic expialidocious antidisestablishmentarianism', { stream: true });
  // 4 text chunks, the call's start, then its arguments: stop after the first fragment.
  const first = await collect(await agent().chat.completions.create(body, { headers: { 'Idempotency-Key': key } }), 6);
  assert.equal(first.events, 6);
  assert.equal(first.calls.length, 1);
  const textBefore = first.text;
  const all = await collect(await agent().chat.completions.create(body,
    { headers: { 'Idempotency-Key': key, 'Last-Event-ID': String(first.events) } }), Infinity, first);
  const whole = await agent().chat.completions.create({ ...body, stream: false }, { headers: { 'Idempotency-Key': key } });
  assert.equal(all.finish, 'tool_calls');
  assert.ok(all.text === textBefore, 'no text after the call started');
  assert.equal(all.text, whole.choices[0].message.content);
  assert.deepEqual(all.calls, whole.choices[0].message.tool_calls);
  assert.equal(whole.choices[0].message.tool_calls[0].function.arguments,
    JSON.stringify({ query: 'supercalifragilistic expialidocious antidisestablishmentarianism' }));
});

// png is a 1x1 PNG.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
const imageAsk = (url, extra = {}) => ({ messages: [{ role: 'user', content: [
  { type: 'text', text: 'what is in this picture?' }, { type: 'image_url', image_url: { url } }] }], ...extra });

test('an image as a data URL reaches a model with the images capability', async () => {
  const res = await agent().chat.completions.create(imageAsk(`data:image/png;base64,${png}`, { model: 'mock-tools' }));
  assert.equal(res.choices[0].finish_reason, 'stop');
  assert.ok(res.choices[0].message.content.length > 0);
  assert.ok(res.usage.prompt_tokens > 0);
  // The support app's default model takes text only.
  await assert.rejects(client().chat.completions.create(imageAsk(`data:image/png;base64,${png}`)),
    (err) => err instanceof OpenAI.BadRequestError && err.code === 'invalid_request' && /images/.test(err.message));
});

test('refusals name the parameter: a remote image URL, a tool result for no call', async () => {
  await assert.rejects(agent().chat.completions.create(imageAsk('https://example.com/cat.png', { model: 'mock-tools' })), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `got ${err}`);
    assert.equal(err.code, 'unsupported_parameter');
    assert.equal(err.param, 'messages[0].content[1].image_url.url');
    assert.match(err.message, /does not fetch URLs/);
    return true;
  });
  await assert.rejects(agent().chat.completions.create({ model: 'mock-tools', tools: [lookup], messages: [
    { role: 'user', content: 'look it up' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'call_2', content: 'found' }] }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `got ${err}`);
    assert.equal(err.param, 'messages[2].tool_call_id');
    return true;
  });
});
