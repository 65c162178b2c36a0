// Refusals as the official openai client maps them (started by cmd/gateway
// TestResponsesNodeClient): 400, 401, 404, 409 and a cross-door 429; and
// the stored responses: store:false, DELETE, input_items.
import { test } from 'node:test';
import { assert, openai, ctl, newSub, refused, OpenAI, randomUUID, until } from './helpers.mjs';

const T = { timeout: 120_000 };

test('400: a bad parameter is a BadRequestError naming it', T, async () => {
  const client = await openai({ server: 0, sub: newSub('400') });
  let e = await refused(client.responses.create({ model: 'mock-a', input: 'hi', max_output_tokens: 0 }), OpenAI.BadRequestError, 400, 'max_output_tokens 0');
  assert.equal(e.param, 'max_output_tokens', JSON.stringify(e.error));
  assert.equal(e.code, 'invalid_request');
  assert.equal(e.type, 'invalid_request_error');
  e = await refused(client.responses.create({ model: 'mock-a', input: 'hi', conversation: 'conv_1' }), OpenAI.BadRequestError, 400, 'conversation');
  assert.equal(e.param, 'conversation');
  assert.equal(e.code, 'unsupported_parameter');
  e = await refused(client.responses.create({ model: 'mock-a', input: 'hi', previous_response_id: 'resp_never-was-one-1234' }), OpenAI.BadRequestError, 400, 'unknown previous_response_id');
  assert.equal(e.param, 'previous_response_id');
  e = await refused(client.responses.create({ model: 'mock-a', input: [{ type: 'function_call_output', call_id: 'call_nowhere', output: 'x' }] }),
    OpenAI.BadRequestError, 400, 'an output of no call');
  assert.equal(e.param, 'input[0].call_id');
  assert.ok(e.requestID || e.error?.request_id, 'no request id in the refusal');
});

test('401: a bad token is an AuthenticationError', T, async () => {
  const client = await openai({ server: 1, jwt: 'not-a-jwt' });
  const e = await refused(client.responses.create({ model: 'mock-a', input: 'hi' }), OpenAI.AuthenticationError, 401, 'bad token');
  assert.equal(e.type, 'authentication_error');
  await refused(client.responses.retrieve('resp_anything-at-all-1'), OpenAI.AuthenticationError, 401, 'GET with a bad token');
});

test('404: a model the app does not allow, an unknown response id', T, async () => {
  const client = await openai({ server: 0, sub: newSub('404') });
  const e = await refused(client.responses.create({ model: 'mock-reasoning', input: 'hi' }), OpenAI.NotFoundError, 404, 'a model not allowed');
  assert.equal(e.code, 'model_not_allowed');
  assert.equal(e.param, 'model');
  const g = await refused(client.responses.retrieve('resp_no-such-response-42'), OpenAI.NotFoundError, 404, 'GET of an unknown id');
  assert.equal(g.type, 'not_found_error');
  await refused(client.responses.inputItems.list('resp_no-such-response-42'), OpenAI.NotFoundError, 404, 'input_items of an unknown id');
  await refused(client.responses.delete('resp_no-such-response-42'), OpenAI.NotFoundError, 404, 'DELETE of an unknown id');
});

test('409: an Idempotency-Key reused with another body is a ConflictError; with the same body, the same response', T, async () => {
  const client = await openai({ server: 0, sub: newSub('409') });
  const key = 'idem-' + randomUUID();
  const opts = { headers: { 'Idempotency-Key': key } };
  const first = await client.responses.create({ model: 'mock-a', input: 'the first body', max_output_tokens: 20 }, opts);
  assert.equal(first.id, 'resp_' + key);
  // The same body again, on another server: the same response.
  const other = await openai({ server: 1, jwt: client.jwt });
  const again = await other.responses.create({ model: 'mock-a', input: 'the first body', max_output_tokens: 20 }, opts);
  assert.equal(again.id, first.id);
  assert.equal(again.output_text, first.output_text);
  const e = await refused(other.responses.create({ model: 'mock-a', input: 'another body', max_output_tokens: 20 }, opts), OpenAI.ConflictError, 409, 'the key with another body');
  assert.equal(e.type, 'conflict_error');
  // The 409 names the header the client sent, not /v1/ws's request_id.
  assert.equal(e.param, 'Idempotency-Key', `the 409 does not name the Idempotency-Key header: ${JSON.stringify(e.error)}`);
  assert.doesNotMatch(e.message, /request_id/, 'the 409 names /v1/ws\'s request_id, not the Idempotency-Key header');
});

test('429: a quota used up on /v1/ws refuses the Responses door (quota_exceeded, retry-after)', T, async () => {
  const sub = newSub('quota');
  const spent = await ctl('/spend', { sub, app: 'docs', server: 1 }, {});
  assert.ok(spent.answered >= 1, JSON.stringify(spent));
  for (const server of [0, 1]) {
    const client = await openai({ server, sub: sub + '-other', app: 'docs' });
    // The prompt /v1/ws refused (a short one may still fit in what is left).
    const e = await refused(client.responses.create({ model: 'mock-a', input: spent.refused_prompt, max_output_tokens: 10 }), OpenAI.RateLimitError, 429, `quota on server ${server}`);
    assert.equal(e.code, 'quota_exceeded', JSON.stringify(e.error));
    assert.equal(e.type, 'rate_limit_error');
    const after = Number(e.headers.get('retry-after'));
    const afterMs = Number(e.headers.get('retry-after-ms'));
    assert.ok(after >= 1 && after <= 3600, `retry-after ${e.headers.get('retry-after')}`);
    assert.ok(afterMs > 0 && afterMs <= 3600_000, `retry-after-ms ${e.headers.get('retry-after-ms')}`);
    assert.ok(Math.abs(after * 1000 - afterMs) <= 1000, `retry-after ${after} s and retry-after-ms ${afterMs} disagree`);
    assert.equal(e.error.retry_after_ms > 0, true, JSON.stringify(e.error));
    // Streamed: the same refusal before any event.
    await refused(client.responses.create({ model: 'mock-a', input: spent.refused_prompt, max_output_tokens: 10, stream: true }), OpenAI.RateLimitError, 429, 'streamed');
  }
});

test('store:false is not retrievable; DELETE removes a stored one; input_items lists the own input', T, async () => {
  const sub = newSub('store');
  const client = await openai({ server: 0, sub });
  const other = await openai({ server: 1, jwt: client.jwt });

  const unstored = await client.responses.create({ model: 'mock-a', input: 'do not keep this', store: false, max_output_tokens: 10 });
  assert.equal(unstored.store, false);
  await refused(other.responses.retrieve(unstored.id), OpenAI.NotFoundError, 404, 'GET of store:false');
  await refused(other.responses.inputItems.list(unstored.id), OpenAI.NotFoundError, 404, 'input_items of store:false');

  const first = await client.responses.create({
    model: 'mock-a', max_output_tokens: 10, metadata: { case: 'store' },
    input: [{ role: 'developer', content: 'be brief' }, { role: 'user', content: 'keep this one' }],
  });
  assert.equal(first.store, true);
  const got = await until('the stored response on server 1', async () => {
    const r = await other.responses.retrieve(first.id);
    return r.status === 'incomplete' || r.status === 'completed' ? r : null;
  });
  assert.equal(got.id, first.id);
  assert.equal(got.output_text, first.output_text);
  assert.deepEqual(got.metadata, { case: 'store' });

  const second = await other.responses.create({ model: 'mock-a', max_output_tokens: 10, previous_response_id: first.id, input: 'and this one' });
  assert.equal(second.previous_response_id, first.id);
  const items = [];
  for await (const it of client.responses.inputItems.list(second.id)) items.push(it);
  assert.equal(items.length, 1, JSON.stringify(items));
  assert.equal(items[0].role, 'user');
  assert.equal(items[0].type, 'message');
  assert.ok(items[0].id);
  const firstItems = [];
  for await (const it of client.responses.inputItems.list(first.id, { order: 'asc' })) firstItems.push(it);
  assert.deepEqual(firstItems.map((i) => i.role), ['developer', 'user']);
  const desc = (await client.responses.inputItems.list(first.id)).data;
  assert.deepEqual(desc.map((i) => i.role), ['user', 'developer']);

  const del = await other.responses.delete(first.id);
  if (del !== undefined && del !== null && typeof del === 'object') assert.equal(del.deleted ?? true, true);
  await refused(client.responses.retrieve(first.id), OpenAI.NotFoundError, 404, 'GET after DELETE');
  await refused(client.responses.delete(first.id), OpenAI.NotFoundError, 404, 'DELETE after DELETE');
  // Another user's response is not found either.
  const stranger = await openai({ server: 0, sub: sub + '-stranger' });
  await refused(stranger.responses.retrieve(second.id), OpenAI.NotFoundError, 404, "another user's response");
});
