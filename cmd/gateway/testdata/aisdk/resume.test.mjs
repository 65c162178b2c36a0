// Resume through the official transport's reconnectToStream, each from a
// new transport instance on another server (started by cmd/gateway
// TestAISDKNodeClient): after the socket was cut mid-answer, after the
// owning server was SIGKILLed, after the answer ended.
import { test } from 'node:test';
import {
  assert, transport, send, read, wsAnswer, ctl, settled, assertRefusal, newChatId, newSub, userMessage, textOf, countType,
} from './helpers.mjs';

const T = { timeout: 90_000 };

test('a socket cut mid-answer resumes on another server to the identical message, same messageId', T, async () => {
  const sub = newSub('cut');
  const prompt = 'cut me off and come back elsewhere';
  const a = await transport({ server: 0, sub });
  const chatId = newChatId();
  const first = await read(await send(a, { chatId, messages: [userMessage(prompt)] }), (c, chunks) => {
    if (c.type === 'text-delta' && countType(chunks, 'text-delta') === 10) a.sockets[0].terminate(); // no close frame: a lost network
  });
  assert.equal(countType(first.chunks, 'finish'), 0, 'the answer was over before the cut');
  assert.ok(first.errors.length > 0, 'the cut did not error the stream');
  assert.equal(first.chunks[0].type, 'start');

  const b = await transport({ server: 1, sub });
  const resumed = await read(await b.reconnectToStream({ chatId }));
  assert.deepEqual(resumed.errors, []);
  assert.equal(resumed.chunks[0].messageId, first.chunks[0].messageId);
  assert.equal(resumed.message.id, first.message.id);
  assert.deepEqual(resumed.chunks.slice(0, first.chunks.length), first.chunks, 'the replay differs from the first delivery');
  assert.equal(resumed.chunks.at(-1).type, 'finish');
  const ws = await wsAnswer(sub + '-ws', 'support', 1, { prompt });
  assert.equal(textOf(resumed.message), ws.done.text);
  b.close();

  // Once more after the end, from the first server: the same chunks, the same message.
  const c = await transport({ server: 0, sub });
  const again = await read(await c.reconnectToStream({ chatId }));
  c.close();
  assert.deepEqual(again.chunks, resumed.chunks);
  assert.deepEqual(again.message, resumed.message);
  await settled(sub, 1);
});

test('the owning server SIGKILLed mid-answer: a resume on another server gets what was saved, then the interrupted refusal', T, async () => {
  const sub = newSub('kill');
  const prompt = 'the server dies while I speak';
  const a = await transport({ server: 2, sub });
  const chatId = newChatId();
  let killed;
  const first = await read(await send(a, { chatId, messages: [userMessage(prompt)] }), (c, chunks) => {
    if (c.type === 'text-delta' && countType(chunks, 'text-delta') === 40) killed = ctl('/kill', { server: 2 }, {});
  });
  assert.ok(killed, `the answer ended after ${countType(first.chunks, 'text-delta')} text deltas, before the kill`);
  await killed;
  assert.equal(countType(first.chunks, 'finish'), 0, 'the answer was over before the kill');

  const b = await transport({ server: 0, sub });
  const resumed = await read(await b.reconnectToStream({ chatId }));
  b.close();
  assert.equal(resumed.chunks[0].type, 'start');
  assert.equal(resumed.chunks[0].messageId, first.chunks[0].messageId);
  const e = assertRefusal(resumed, 'interrupted', 503);
  assert.equal(e.retryable, true);
  // After streamed chunks, an `error` UI chunk comes before the metadata, so the partial message stays visible.
  const types = resumed.chunks.map((c) => c.type);
  const errorAt = types.indexOf('error');
  assert.ok(errorAt > 0 && errorAt < types.lastIndexOf('message-metadata'), types.join(' '));
  assert.equal(countType(resumed.chunks, 'finish'), 0);
  // What was saved is the start of what was sent, chunk for chunk (it may be shorter: the
  // last checkpoint), then its block is closed; and its text is a prefix of the whole answer.
  const n = Math.min(first.chunks.length, types.findIndex((t, i) => i > 0 && (t.endsWith('-end') || t === 'error')));
  assert.deepEqual(resumed.chunks.slice(0, n), first.chunks.slice(0, n));
  const whole = (await wsAnswer(sub + '-ws', 'support', 0, { prompt })).done.text;
  const saved = textOf(resumed.message);
  assert.ok(whole.startsWith(saved), `saved text ${JSON.stringify(saved)} is not a prefix of the answer`);

  // The interrupted ending is kept: another resume, on the other server, replays it whole.
  const c = await transport({ server: 1, sub });
  const again = await read(await c.reconnectToStream({ chatId }));
  c.close();
  assert.deepEqual(again.chunks, resumed.chunks);
  assert.deepEqual(again.errors.map(String), resumed.errors.map(String));
});

test('a resume after the answer ended replays it, on any server', T, async () => {
  const sub = newSub('ended');
  const a = await transport({ server: 0, sub });
  const chatId = newChatId();
  const first = await read(await send(a, { chatId, messages: [userMessage('finish first, replay later')] }));
  a.close();
  assert.deepEqual(first.errors, []);
  assert.equal(first.chunks.at(-1).type, 'finish');
  for (const server of [0, 1]) {
    const t = await transport({ server, sub });
    const again = await read(await t.reconnectToStream({ chatId }));
    t.close();
    assert.deepEqual(again.errors, []);
    assert.deepEqual(again.chunks, first.chunks, `replay on server ${server}`);
    assert.deepEqual(again.message, first.message);
  }
  await settled(sub, 1);
});
