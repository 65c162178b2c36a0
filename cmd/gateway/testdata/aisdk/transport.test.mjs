// The official `ai` package's WebSocketChatTransport (ws as its WebSocket)
// on /v1/ai-sdk, its streams assembled by readUIMessageStream (started by
// cmd/gateway TestAISDKNodeClient): answers equal to /v1/ws's, abort,
// regenerate, no-active, the quota refusal, token refresh.
import { test } from 'node:test';
import {
  assert, transport, send, read, wsAnswer, usage, until, ctl, token, expiresAt, settled, assertRefusal,
  newChatId, newSub, userMessage, textOf, reasoningOf, toolCallsOf, countType, WebSocket,
} from './helpers.mjs';

const T = { timeout: 90_000 };

// The agent app's mock-tools calls the first tool it is given with
// {"query": the first three words of the last message}.
const lookup = { name: 'lookup', description: 'looks a phrase up',
  input_schema: { type: 'object', properties: { query: { type: 'string' } } } };

test('text: the assembled message is the /v1/ws answer, with the Jetway facts in its metadata', T, async () => {
  const sub = newSub('text');
  const prompt = 'the same question through both doors';
  const t = await transport({ sub });
  const got = await read(await send(t, { chatId: newChatId(), messages: [userMessage(prompt)] }));
  t.close();
  const ws = await wsAnswer(sub + '-ws', 'support', 0, { prompt });
  assert.deepEqual(got.errors, []);
  assert.equal(textOf(got.message), ws.done.text);
  assert.equal(got.message.role, 'assistant');

  // start (a stable messageId), start-step, the text, finish-step, the
  // metadata before finish, finish last.
  const types = got.chunks.map((c) => c.type);
  assert.equal(types[0], 'start');
  assert.match(got.chunks[0].messageId, /./);
  assert.equal(got.message.id, got.chunks[0].messageId);
  assert.ok(types.indexOf('start-step') > 0 && types.indexOf('finish-step') > types.indexOf('text-end'), types.join(' '));
  assert.equal(types.at(-1), 'finish');
  assert.equal(got.chunks.at(-1).finishReason, 'stop');
  assert.ok(types.includes('message-metadata') && types.lastIndexOf('message-metadata') < types.length - 1, types.join(' '));

  const j = got.message.metadata?.jetway;
  assert.ok(j, `metadata ${JSON.stringify(got.message.metadata)}`);
  assert.match(j.request_id, /^[A-Za-z0-9_-]{8,}$/);
  assert.equal(j.model, 'mock-a');
  assert.equal(j.cached, false);
  for (const k of ['ttft_ms', 'latency_ms', 'cost_usd']) assert.equal(typeof j[k], 'number', `${k} in ${JSON.stringify(j)}`);
  assert.ok(j.cost_usd > 0);
  assert.equal(j.usage.output_tokens, ws.done.usage.output_tokens);
  assert.equal(j.usage.input_tokens, ws.done.usage.input_tokens);
  assert.equal(typeof j.usage.cache_read_input_tokens, 'number');
  assert.equal(typeof j.usage.cache_write_input_tokens, 'number');
  assert.equal(typeof j.quota.window, 'string');
  assert.ok(j.quota.remaining < j.quota.limit, JSON.stringify(j.quota));

  // Its usage record says which door it came through.
  const rec = await until('the usage record', async () => (await usage(sub)).find((r) => r.request_id === j.request_id));
  assert.equal(rec.door, 'ai-sdk');
  assert.equal(rec.output_tokens, j.usage.output_tokens);
});

test('reasoning: thinking then text, each equal to /v1/ws', T, async () => {
  const sub = newSub('reasoning');
  const prompt = 'why is the sky blue';
  const t = await transport({ sub, app: 'agent' });
  const got = await read(await send(t, { chatId: newChatId(), messages: [userMessage(prompt)],
    body: { model: 'mock-reasoning', reasoning: { budget_tokens: 1024 } } }));
  t.close();
  const ws = await wsAnswer(sub + '-ws', 'agent', 0, { prompt, model: 'mock-reasoning', reasoning: 1024 });
  assert.deepEqual(got.errors, []);
  assert.ok(ws.reasoning_text.length > 0);
  assert.equal(reasoningOf(got.message), ws.reasoning_text);
  assert.equal(textOf(got.message), ws.done.text);
  const kinds = got.message.parts.map((p) => p.type).filter((k) => k !== 'step-start');
  assert.deepEqual(kinds, ['reasoning', 'text']);
  for (const k of ['reasoning-start', 'reasoning-delta', 'reasoning-end']) assert.ok(countType(got.chunks, k) > 0, k);
  assert.equal(got.chunks.at(-1).finishReason, 'stop');
  assert.equal(got.message.metadata.jetway.model, 'mock-reasoning');
});

test('a tool call: streamed input, tool-input-available with the parsed input, equal to /v1/ws; its output is answered', T, async () => {
  const sub = newSub('tool');
  const prompt = 'international timezone conversion for Paris please';
  const t = await transport({ sub, app: 'agent' });
  const chatId = newChatId();
  const user = userMessage(prompt);
  const got = await read(await send(t, { chatId, messages: [user], body: { model: 'mock-tools', tools: [lookup] } }));
  const ws = await wsAnswer(sub + '-ws', 'agent', 0, { prompt, model: 'mock-tools', tools: true });
  assert.deepEqual(got.errors, []);
  const wsCalls = ws.done.blocks.filter((b) => b.type === 'tool_use');
  assert.equal(wsCalls.length, 1);
  assert.equal(textOf(got.message), ws.done.text);
  assert.deepEqual(toolCallsOf(got.message), [{ toolCallId: wsCalls[0].id, toolName: 'lookup', input: wsCalls[0].input, state: 'input-available' }]);
  const start = got.chunks.find((c) => c.type === 'tool-input-start');
  assert.equal(start.toolCallId, wsCalls[0].id);
  assert.equal(start.toolName, 'lookup');
  const deltas = got.chunks.filter((c) => c.type === 'tool-input-delta').map((c) => c.inputTextDelta).join('');
  assert.deepEqual(JSON.parse(deltas), wsCalls[0].input);
  const available = got.chunks.find((c) => c.type === 'tool-input-available');
  assert.deepEqual(available.input, wsCalls[0].input);
  assert.equal(got.chunks.at(-1).finishReason, 'tool-calls');

  // The client ran the tool (addToolOutput): the next turn carries its output and is answered in text.
  const assistant = structuredClone(got.message);
  const part = assistant.parts.find((p) => p.toolCallId === wsCalls[0].id);
  Object.assign(part, { state: 'output-available', output: 'UTC+1' });
  const next = await read(await send(t, { chatId, messages: [user, assistant],
    body: { model: 'mock-tools', tools: [lookup] } }));
  t.close();
  assert.deepEqual(next.errors, []);
  assert.deepEqual(toolCallsOf(next.message), []);
  assert.ok(textOf(next.message).length > 0);
  assert.equal(next.chunks.at(-1).finishReason, 'stop');
});

test('abort: the stream stops, the response is charged, and a later resume shows it ended', T, async () => {
  const sub = newSub('abort');
  const prompt = 'a long answer to stop';
  const t = await transport({ sub });
  const chatId = newChatId();
  const ac = new AbortController();
  const got = await read(await send(t, { chatId, messages: [userMessage(prompt)], abortSignal: ac.signal }), (c, chunks) => {
    if (c.type === 'text-delta' && countType(chunks, 'text-delta') === 10) ac.abort();
  });
  assert.equal(countType(got.chunks, 'finish'), 0, 'the answer was over before the abort');
  const seen = textOf(got.message);
  assert.ok(seen.length > 0);

  // Charged for what was generated (less than the whole answer).
  const rec = await until('the aborted request\'s usage record', async () => (await usage(sub)).find((r) => r.outcome === 'cancelled'));
  assert.equal(rec.door, 'ai-sdk');
  assert.ok(rec.output_tokens > 0 && rec.output_tokens < 300, JSON.stringify(rec));

  // The chat's response ended with an abort chunk, then end.
  const full = (await wsAnswer(sub + '-ws', 'support', 0, { prompt })).done.text;
  const replay = await read(await t.reconnectToStream({ chatId }));
  t.close();
  assert.deepEqual(replay.errors, []);
  assert.equal(replay.chunks.at(-1).type, 'abort', replay.chunks.map((c) => c.type).join(' '));
  assert.equal(countType(replay.chunks, 'finish'), 0);
  assert.equal(replay.message.id, got.message.id);
  const text = textOf(replay.message);
  assert.ok(text.startsWith(seen) && full.startsWith(text) && text.length < full.length,
    `seen ${seen.length} chars, replay ${text.length}, whole ${full.length}`);
  assert.deepEqual(replay.chunks.slice(0, got.chunks.length), got.chunks);
});

test('regenerate: a regenerate-message send answers again and replaces the last assistant message', T, async () => {
  const sub = newSub('regen');
  const prompt = 'say it once more';
  const t = await transport({ sub });
  const chatId = newChatId();
  const user = userMessage(prompt);
  const first = await read(await send(t, { chatId, messages: [user] }));
  assert.deepEqual(first.errors, []);
  // As Chat.regenerate sends it: the history up to the user message, and the id of the message replaced.
  const second = await read(await send(t, { chatId, messages: [user], trigger: 'regenerate-message', messageId: first.message.id }));
  assert.deepEqual(second.errors, []);
  assert.equal(textOf(second.message), textOf(first.message));
  assert.equal(second.chunks.at(-1).finishReason, 'stop');
  // With the replaced assistant message still in the history, it is replaced, not continued:
  // the answer is the one to the user's message alone.
  const third = await read(await send(t, { chatId, messages: [user, second.message], trigger: 'regenerate-message',
    messageId: second.message.id }));
  assert.deepEqual(third.errors, []);
  assert.equal(textOf(third.message), textOf(first.message));
  // The chat's latest response is the regenerated one.
  const resumed = await read(await t.reconnectToStream({ chatId }));
  t.close();
  assert.deepEqual(resumed.message, third.message);
  const recs = await settled(sub, 3);
  assert.equal(new Set(recs.map((r) => r.request_id)).size, 3);
});

test('no-active: an unknown chat, and another user\'s chat, resolve reconnectToStream to null', T, async () => {
  const owner = newSub('owner');
  const t = await transport({ sub: owner });
  const chatId = newChatId();
  const got = await read(await send(t, { chatId, messages: [userMessage('mine alone')] }));
  t.close();
  assert.deepEqual(got.errors, []);

  for (const [server, who] of [[0, { sub: newSub('stranger') }], [1, { sub: newSub('stranger') }],
    [1, { sub: owner, app: 'dev' }]]) { // the same sub in another app is another user
    const other = await transport({ server, ...who });
    assert.equal(await other.reconnectToStream({ chatId: newChatId() }), null, 'an unknown chat');
    assert.equal(await other.reconnectToStream({ chatId }), null, `${JSON.stringify(who)} on server ${server}: another user's chat`);
    other.close();
  }
  // The owner still gets it, from any server.
  const mine = await transport({ server: 1, sub: owner });
  const again = await read(await mine.reconnectToStream({ chatId }));
  mine.close();
  assert.deepEqual(again.message, got.message);
});

test('quota: used up on /v1/ws, the AI SDK door refuses with the machine-readable refusal, charging nothing', T, async () => {
  const sub = newSub('quota');
  const t = await transport({ sub, app: 'docs' }); // 20,000 tokens an hour for the app
  const ok = await read(await send(t, { chatId: newChatId(), messages: [userMessage('a small question first')], body: { max_tokens: 10 } }));
  assert.deepEqual(ok.errors, []);
  const q = ok.message.metadata.jetway.quota;
  assert.equal(q.window, 'hour');
  assert.equal(q.limit, 20000);
  assert.ok(q.remaining < 20000, JSON.stringify(q));

  // Another user of the same app spends the app's quota through /v1/ws.
  const spent = await ctl('/spend', { sub: sub + '-ws', app: 'docs', server: 0 }, {});
  const refused = await read(await send(t, { chatId: newChatId(), messages: [userMessage(spent.refused_prompt)], body: { max_tokens: 10 } }));
  t.close();
  const e = assertRefusal(refused, 'quota_exceeded', 429);
  assert.equal(e.message, 'Token quota exceeded');
  assert.equal(e.retryable, true);
  assert.ok(e.retry_after_ms > 0, JSON.stringify(e));
  assert.deepEqual(refused.chunks.map((c) => c.type), ['message-metadata'], 'a refusal before the answer started: the metadata chunk alone');
  await settled(sub, 1);
});

test('token refresh through headers: the socket\'s token expires and the socket stays usable', T, async () => {
  const sub = newSub('refresh');
  const short = await token(sub, 'support', 3000);
  let fresh = 0;
  const t = await transport({ sub, jwt: short, headers: async () => {
    fresh++;
    return { authorization: 'Bearer ' + await token(sub) };
  } });
  const before = await read(await send(t, { chatId: newChatId(), messages: [userMessage('before the expiry')], body: { max_tokens: 20 } }));
  assert.deepEqual(before.errors, []);
  await until('the first token to expire', () => Date.now() > expiresAt(short) + 1500, 20_000); // the expiry is this test's input
  const after = await read(await send(t, { chatId: newChatId(), messages: [userMessage('after the expiry')] }));
  assert.deepEqual(after.errors, []);
  assert.equal(after.chunks.at(-1).finishReason, 'stop');
  assert.equal(fresh, 2);
  assert.equal(t.sockets.length, 1, 'the transport opened another socket');
  assert.equal(t.sockets[0].readyState, WebSocket.OPEN);
  t.close();

  // Without a refresh, the same expiry closes the socket 4001.
  const plain = await transport({ sub, ttlMs: 3000 });
  const short2 = await read(await send(plain, { chatId: newChatId(), messages: [userMessage('no refresh')], body: { max_tokens: 5 } }));
  assert.deepEqual(short2.errors, []);
  const closed = await until('the expired socket to close', () => plain.sockets[0].closeEvent, 20_000);
  assert.equal(closed.code, 4001, JSON.stringify(closed));

  // Another user's token in headers: the unauthorized refusal, and close 4001.
  const other = await transport({ sub });
  const r = await read(await send(other, { chatId: newChatId(), messages: [userMessage('not my token')],
    headers: { authorization: 'Bearer ' + await token(newSub('someone-else')) } }));
  assertRefusal(r, 'unauthorized', 401);
  const closed2 = await until('the socket to close', () => other.sockets[0].closeEvent, 20_000);
  assert.equal(closed2.code, 4001, JSON.stringify(closed2));
  await settled(sub, 3); // before, after, no refresh
});
