// An `interrupted` terminal holds what the dead owner had saved, which can be
// less than the client already received (PROTOCOL.md v1.1): jetway.js keeps
// the longer contiguous answer and never shows one shrinking. A live gateway
// can only produce such a terminal when a server dies between checkpoints, so
// a frame proxy in front of gateway A turns its `done` into the `interrupted`
// terminal a dead owner's successor would send.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gateway, open, prompt, reference, startProxy, tokenSource, user } from './helpers.mjs';

const A = gateway('A');

/**
 * A proxy that forwards the first `forward` chunks of every answer, drops
 * the rest, and replaces `done` with an interrupted terminal that saved
 * `saved` chunks.
 * @param {number} forward
 * @param {number} saved
 */
async function interruptingProxy(forward, saved) {
  const proxy = await startProxy(A.ws);
  /** @type {Map<string, string[]>} chunk texts by request id */
  const texts = new Map();
  proxy.toClient = (f) => {
    if (f.type === 'chunk') {
      const t = texts.get(f.request_id) ?? [];
      t[f.seq - 1] = f.text ?? '';
      texts.set(f.request_id, t);
      return f.seq <= forward ? undefined : null;
    }
    if (f.type !== 'done') return undefined;
    // The tests check the answer was long enough (an assertion here would
    // throw inside the proxy, not the test).
    const t = texts.get(f.request_id) ?? [];
    return { type: 'error', request_id: f.request_id, code: 'interrupted', status: 503, retryable: true,
      message: 'the server that owned this answer stopped', chunks: saved, text: t.slice(0, saved).join('') };
  };
  return { proxy, texts };
}

test('interrupted with less than the client holds: the client keeps its longer answer', async () => {
  const messages = prompt('Is the Madrid flight delayed?');
  const want = await reference(A, messages);
  const { proxy, texts } = await interruptingProxy(Infinity, 3);
  const c = open({ url: proxy.url, getToken: tokenSource(A.http, { sub: user('interrupted-less') }) });
  try {
    let streamed = '';
    const errors = [];
    const call = c.send({ messages }, { onChunk: (ch) => (streamed += ch.text), onError: (e) => errors.push(e) });
    const err = await call.result.then(() => assert.fail('resolved'), (e) => e);
    const chunks = texts.get(call.id)?.length ?? 0;
    assert.ok(chunks > 3, `the answer has ${chunks} chunks`);
    assert.equal(err.code, 'interrupted');
    assert.ok(err.interrupted && err.retryable, 'interrupted and retryable');
    assert.equal(err.text, want, 'the error holds the longer text the client received');
    assert.equal(err.chunks, chunks);
    assert.equal(err.frame.chunks, 3, 'the frame itself is kept as it came');
    assert.equal(call.text, want, 'the call never shrank');
    assert.equal(streamed, want);
    assert.equal(call.lastSeq, chunks);
    assert.deepEqual(call.blocks, [{ type: 'text', text: want }]);
    assert.equal(call.stats.keptLonger, true);
    assert.equal(call.stats.terminals, 1);
    assert.deepEqual(errors, [err]);
  } finally {
    c.close();
    proxy.close();
  }
});

test('interrupted with more than the client holds: the saved text wins', async () => {
  const messages = prompt('Is the Porto flight delayed?');
  const want = await reference(A, messages);
  const { proxy, texts } = await interruptingProxy(2, 5);
  const c = open({ url: proxy.url, getToken: tokenSource(A.http, { sub: user('interrupted-more') }) });
  try {
    const call = c.send({ messages });
    const err = await call.result.then(() => assert.fail('resolved'), (e) => e);
    const saved = (texts.get(call.id) ?? []).slice(0, 5).join('');
    assert.ok(want.startsWith(saved) && saved.length > 0);
    assert.equal(call.lastSeq, 2);
    assert.equal(err.text, saved);
    assert.equal(err.chunks, 5);
    assert.equal(call.text, saved, 'the call shows the saved answer, longer than its two chunks');
    assert.deepEqual(call.blocks, [{ type: 'text', text: saved }]);
    assert.equal(call.stats.keptLonger, false);
  } finally {
    c.close();
    proxy.close();
  }
});
