// Bad input on /v1/ai-sdk through raw `ws` sockets (frames the transport
// never sends), each answered as PROTOCOL.md ("The AI SDK door") says,
// with nothing charged or lost (started by cmd/gateway TestAISDKNodeClient).
import { test } from 'node:test';
import { safeValidateWebSocketChatTransportRequest } from 'ai';
import {
  assert, Raw, sendFrame, resumeFrame, chunksOf, settled, ctl, controlURL, newChatId, newSub, userMessage, randomUUID, WebSocket,
} from './helpers.mjs';

const T = { timeout: 90_000 };

const valid = async (frame) => (await safeValidateWebSocketChatTransportRequest({ value: frame })).success;

// refusalOf checks a refused send's frames on a raw socket (PROTOCOL.md:
// a message-metadata chunk with jetway.error, then `error` with
// errorText = message) and returns jetway.error.
function refusalOf(frames) {
  const chunks = chunksOf(frames);
  assert.equal(chunks.length, 1, `frames ${JSON.stringify(frames).slice(0, 2000)}`);
  const e = chunks[0].messageMetadata?.jetway?.error;
  assert.equal(chunks[0].type, 'message-metadata');
  assert.ok(e, JSON.stringify(chunks[0]));
  for (const k of ['code', 'message']) assert.equal(typeof e[k], 'string', `${k} in ${JSON.stringify(e)}`);
  assert.equal(typeof e.status, 'number');
  assert.equal(typeof e.retryable, 'boolean');
  const last = frames.at(-1);
  assert.equal(last.type, 'error');
  assert.equal(last.errorText, e.message);
  return e;
}

// answered sends a small valid request on rc and checks that it is answered whole: the socket still serves.
async function answered(rc, prompt = 'still serving?') {
  const f = sendFrame({ messages: [userMessage(prompt)], body: { max_tokens: 5 } });
  rc.send(f);
  const frames = await rc.terminal(f.requestId);
  assert.equal(frames.at(-1).type, 'end', JSON.stringify(frames.at(-1)));
  assert.equal(chunksOf(frames).at(-1).type, 'finish');
  return frames;
}

// whole resumes chatId on a new socket and checks that the answer is there, finished.
async function whole(sub, chatId, server = 1, app = 'support') {
  const rc = await Raw.open({ server, sub, app });
  const f = resumeFrame({ chatId });
  rc.send(f);
  const frames = await rc.terminal(f.requestId);
  rc.close();
  assert.equal(frames[0].type, 'start');
  assert.equal(frames.at(-1).type, 'end', JSON.stringify(frames.at(-1)));
  const chunks = chunksOf(frames);
  assert.equal(chunks.at(-1).type, 'finish', 'the answer in flight was lost');
  return chunks;
}

// inFlight sends a request on rc and waits for its first text delta.
async function inFlight(rc, prompt = 'an answer in flight') {
  const f = sendFrame({ messages: [userMessage(prompt)] });
  rc.send(f);
  await untilFrames(rc, () => rc.for(f.requestId).some((x) => x.chunk?.type === 'text-delta'));
  return f;
}

async function untilFrames(rc, cond, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (rc.closeEvent) assert.fail(`socket closed ${JSON.stringify(rc.closeEvent)}`);
    if (Date.now() > deadline) assert.fail(`not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20)); // polling with a deadline
  }
}

test('not JSON, or failing the transport\'s request schema (unknown type included): close 1008', T, async () => {
  const sub = newSub('bad-schema');
  const ok = { messages: [userMessage('hello')] };
  const cases = {
    'not JSON': 'this is not JSON {',
    'a JSON array': '[1,2,3]',
    'a JSON string': '"send"',
    'unknown type': { ...sendFrame(ok), type: 'hello' },
    'no type': { ...sendFrame(ok), type: undefined },
    'send without headers': { ...sendFrame(ok), headers: undefined },
    'send with a non-string header': { ...sendFrame(ok), headers: { authorization: 7 } },
    'send with a bad trigger': { ...sendFrame(ok), trigger: 'resume-stream' },
    'send with no messages': sendFrame({ messages: [] }),
    'a message with no parts': sendFrame({ messages: [{ id: 'm1', role: 'user', parts: [] }] }),
    'a message of an unknown role': sendFrame({ messages: [{ id: 'm1', role: 'robot', parts: [{ type: 'text', text: 'x' }] }] }),
    'a numeric requestId': { ...sendFrame(ok), requestId: 42 },
    'resume with a negative lastSequence': { ...resumeFrame({ chatId: newChatId() }), lastSequence: -1 },
    'abort without requestId': { type: 'abort' },
  };
  // Every case is tried; the failures are reported together.
  const wrong = [];
  for (const [name, frame] of Object.entries(cases)) {
    const text = typeof frame === 'string' ? frame : JSON.stringify(frame);
    let parsed;
    try { parsed = JSON.parse(text); } catch { parsed = undefined; }
    if (parsed !== undefined) assert.equal(await valid(parsed), false, `${name}: the transport's schema accepts it`);
    const rc = await Raw.open({ sub });
    rc.send(text);
    try {
      const closed = await rc.closed(10_000, name);
      if (closed.code !== 1008) wrong.push(`${name}: close ${JSON.stringify(closed)}`);
    } catch {
      wrong.push(`${name}: not closed; frames ${JSON.stringify(rc.frames)}`);
      rc.close();
    }
  }
  assert.deepEqual(wrong, [], `frames failing the transport's request schema, not closed 1008:\n${wrong.join('\n')}`);
  await settled(sub, 0);
});

test('requestId reuse: one in use on the socket is refused conflict, the answer in flight goes on; nothing runs twice', T, async () => {
  const sub = newSub('bad-reuse');
  const rc = await Raw.open({ sub });
  // A requestId in flight sent again, for another chat.
  const running = await inFlight(rc, 'an answer whose requestId is reused');
  const before = rc.for(running.requestId).length;
  const reuse = sendFrame({ requestId: running.requestId, messages: [userMessage('reusing a live id')] });
  assert.ok(await valid(reuse));
  rc.send(reuse);
  await untilFrames(rc, () => rc.for(running.requestId).slice(before).some((f) => f.type === 'error' ||
    f.chunk?.messageMetadata?.jetway?.error));
  const refusal = rc.for(running.requestId).slice(before).filter((f) => f.type === 'error' || f.chunk?.messageMetadata?.jetway?.error);
  const e = refusal.find((f) => f.type === 'chunk')?.chunk.messageMetadata.jetway.error;
  assert.equal(e?.code, 'conflict', JSON.stringify(refusal));
  assert.equal(refusal.at(-1).type, 'error');
  assert.equal(refusal.at(-1).errorText, e.message);
  // The reused frame's chat never ran.
  const probe = resumeFrame({ chatId: reuse.id });
  rc.send(probe);
  assert.deepEqual((await rc.terminal(probe.requestId)).map((f) => f.type), ['no-active']);
  // The answer in flight is whole, on a resume from another socket.
  await whole(sub, running.id);

  // A finished requestId is no longer in use: sent again, for another chat, it is a new response of its own.
  const first = sendFrame({ messages: [userMessage('the first use')], body: { max_tokens: 5 } });
  rc.send(first);
  assert.equal((await rc.terminal(first.requestId)).at(-1).type, 'end');
  const seen = rc.for(first.requestId).length;
  const again = sendFrame({ requestId: first.requestId, messages: [userMessage('the second use')], body: { max_tokens: 5 } });
  rc.send(again);
  await untilFrames(rc, () => rc.for(first.requestId).slice(seen).some((f) => ['end', 'error', 'no-active'].includes(f.type)));
  const second = rc.for(first.requestId).slice(seen);
  assert.equal(second.at(-1).type, 'end', JSON.stringify(second.at(-1)));
  assert.equal(chunksOf(second).at(-1).type, 'finish');
  assert.equal(rc.closeEvent, null);
  rc.close();
  await settled(sub, 3); // the answer in flight, the first use, the second use
});

test('an abort of an unknown requestId is ignored', T, async () => {
  const sub = newSub('bad-abort');
  const rc = await Raw.open({ sub });
  rc.send({ type: 'abort', requestId: 'never-sent-' + randomUUID() });
  await answered(rc);
  assert.equal(rc.closeEvent, null);
  rc.close();
  await settled(sub, 1);
});

// png is a 1x1 PNG.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

test('10,000 parts in a message: refused, socket open, nothing charged', T, async () => {
  const sub = newSub('bad-parts');
  const rc = await Raw.open({ sub, app: 'agent' }); // mock-tools takes images
  // The file part makes it a frame with an attachment, so the frame is under its bound and is read.
  const parts = [{ type: 'file', mediaType: 'image/png', url: `data:image/png;base64,${png}` },
    ...Array.from({ length: 9999 }, () => ({ type: 'text', text: 'x' }))];
  const f = sendFrame({ messages: [{ id: 'm1', role: 'user', parts }] });
  assert.ok(await valid(f));
  rc.send(f);
  const e = refusalOf(await rc.terminal(f.requestId));
  assert.equal(e.code, 'invalid_request', JSON.stringify(e));
  assert.equal(e.status, 400);
  await answered(rc);
  assert.equal(rc.closeEvent, null);
  rc.close();
  await settled(sub, 1);
});

test('a file part with an http: or https: URL: refused, never fetched', T, async () => {
  const sub = newSub('bad-url');
  const rc = await Raw.open({ sub, app: 'agent' });
  for (const url of [`${controlURL}/never-fetch/cat.png`, `${controlURL.replace('http:', 'https:')}/never-fetch/cat.png`]) {
    const f = sendFrame({ messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'what is in this picture?' },
      { type: 'file', mediaType: 'image/png', url }] }] });
    assert.ok(await valid(f));
    rc.send(f);
    const e = refusalOf(await rc.terminal(f.requestId));
    assert.equal(e.status, 400, JSON.stringify(e));
    assert.equal(e.code, 'invalid_request', JSON.stringify(e));
  }
  await answered(rc);
  assert.equal(rc.closeEvent, null);
  rc.close();
  assert.equal(await ctl('/fetched'), 0, 'a gateway fetched the URL');
  await settled(sub, 1);
});

test('a 9 MiB data URL: over the attachment frame bound, close 1009; the answer in flight is not lost', T, async () => {
  const sub = newSub('bad-9mib');
  const rc = await Raw.open({ sub, app: 'agent' });
  const running = await inFlight(rc);
  const big = Buffer.alloc((9 << 20) / 4 * 3).toString('base64'); // a data URL of 9 MiB
  const f = sendFrame({ messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'a big picture' },
    { type: 'file', mediaType: 'image/png', url: `data:image/png;base64,${big}` }] }] });
  rc.send(f);
  const closed = await rc.closed();
  assert.equal(closed.code, 1009, JSON.stringify(closed));
  await whole(sub, running.id, 1, 'agent');
  await settled(sub, 1);
});

test('a messages history of 1 MB: refused for its requestId, the socket stays open, the answer in flight goes on', T, async () => {
  // PROTOCOL.md: a well-formed frame that Jetway refuses (an oversized history) gets the refusal; the socket stays open.
  const sub = newSub('bad-1mb');
  const rc = await Raw.open({ sub });
  const running = await inFlight(rc);
  const turn = 'a long conversation '.repeat(1000); // 20 KB
  const messages = Array.from({ length: 50 }, (_, i) => ({ id: `m${i}`, role: i % 2 ? 'assistant' : 'user', parts: [{ type: 'text', text: turn }] }));
  messages.push(userMessage('and one more question'));
  const f = sendFrame({ messages });
  assert.ok(JSON.stringify(f).length > 1_000_000);
  assert.ok(await valid(f));
  rc.send(f);
  const e = refusalOf(await rc.terminal(f.requestId));
  assert.equal(e.code, 'invalid_request', JSON.stringify(e));
  assert.equal(e.status, 400);
  // The answer in flight on the same socket ends whole, and the socket still serves.
  const frames = await rc.terminal(running.requestId);
  assert.equal(frames.at(-1).type, 'end');
  assert.equal(chunksOf(frames).at(-1).type, 'finish');
  await answered(rc);
  assert.equal(rc.closeEvent, null);
  rc.close();
  await settled(sub, 2);
});

test('a resume storm: 200 resumes of one chat at once mid-answer, every one answered whole, none lost', T, async () => {
  const sub = newSub('bad-storm');
  const rc = await Raw.open({ sub });
  const running = await inFlight(rc, 'everyone wants this answer');
  const ids = Array.from({ length: 200 }, () => randomUUID());
  for (const requestId of ids) rc.send(resumeFrame({ requestId, chatId: running.id }));
  const sendFrames = await rc.terminal(running.requestId, 60_000);
  assert.equal(sendFrames.at(-1).type, 'end');
  const want = chunksOf(sendFrames);
  let ended = 0;
  const refused = [];
  for (const id of ids) {
    const frames = await rc.terminal(id, 60_000);
    const last = frames.at(-1);
    if (last.type === 'end') {
      assert.equal(frames[0].type, 'start');
      assert.deepEqual(chunksOf(frames), want, `resume ${id} differs from the answer`);
      ended++;
    } else {
      // Only a failed attempt, refused as PROTOCOL.md says and retryable, may stand in for the replay.
      assert.equal(last.type, 'error', `resume ${id}: ${JSON.stringify(last)}`);
      const e = refusalOf(frames.filter((f) => f.type !== 'start'));
      assert.equal(e.retryable, true, JSON.stringify(e));
      refused.push(e.code);
    }
  }
  assert.equal(ended + refused.length, 200);
  assert.ok(ended > 0, `every resume refused: ${refused.join(' ')}`);
  assert.equal(rc.closeEvent, null, 'the storm closed the socket');
  assert.equal(rc.ws.readyState, WebSocket.OPEN);
  await answered(rc);
  rc.close();
  await settled(sub, 2);
  if (refused.length) console.log(`# resume storm: ${ended} replayed, ${refused.length} refused (${[...new Set(refused)]})`);
});
