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
  await assert.rejects(client().chat.completions.create(ask('tools', {
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
  })), (err) => err instanceof OpenAI.BadRequestError && err.param === 'tools');
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
