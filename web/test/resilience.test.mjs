// jetway.js keeps every answer whole when the path to the gateway breaks:
// reconnect and resume, dedupe of replays, re-send without `accepted`,
// not_found on resume, and close 4008. A frame-level proxy between the
// client and live gateways does the breaking.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gateway, open, prompt, reference, startProxy, tokenSource, user, waitUntil } from './helpers.mjs';

const A = gateway('A');
const B = gateway('B');

test('a socket cut mid-answer: reconnect with the same session, resume from the last seq, identical answer', async () => {
  const messages = prompt('Is the Lisbon flight on time?');
  const want = await reference(A, messages);
  const proxy = await startProxy(A.ws);
  proxy.cutAt = { chunks: 20 };
  const c = open({ url: proxy.url, getToken: tokenSource(A.http, { sub: user('cut') }) });
  try {
    let streamed = '';
    const call = c.send({ messages }, { onChunk: (ch) => (streamed += ch.text) });
    const done = await call.result;

    assert.equal(done.text, want);
    assert.equal(streamed, want, 'the chunks alone make the whole answer, once');
    assert.equal(call.stats.duplicates, 0, 'the server replayed only what was missing');
    assert.equal(call.stats.resumes, 1);
    assert.equal(c.reconnects, 1);
    assert.equal(proxy.pairs.length, 2);
    assert.equal(proxy.pairs[0].query, proxy.pairs[1].query, 'same session_id on both connections');
    assert.match(proxy.pairs[0].query, /session_id=/);
    const resume = proxy.fromClient.find((f) => f.type === 'resume');
    assert.ok(resume, 'a resume frame was sent');
    assert.equal(resume.request_id, call.id);
    assert.equal(resume.after_seq, 20, 'resumed after the last chunk that arrived');
    assert.equal(resume.conn, 2);
    const states = c.states.map((s) => s.state);
    assert.deepEqual(states.slice(0, 3), ['connected', 'reconnecting', 'connected']);
    assert.equal(c.closes[0].code, 1006);
  } finally {
    c.close();
    proxy.close();
  }
});

test('replayed chunks and terminals are delivered once', async () => {
  const messages = prompt('Which terminal for Oslo?');
  const want = await reference(A, messages);
  const proxy = await startProxy(A.ws);
  proxy.cutAt = { chunks: 15 };
  // After the cut, ask for everything again, and say `done` twice.
  proxy.toServer = (f) => (f.type === 'resume' ? { ...f, after_seq: 0 } : undefined);
  proxy.toClient = (f) => (f.type === 'done' ? [f, f] : undefined);
  const c = open({ url: proxy.url, getToken: tokenSource(A.http, { sub: user('dedupe') }) });
  try {
    /** @type {number[]} */
    const seqs = [];
    let dones = 0;
    const call = c.send({ messages }, { onChunk: (ch) => seqs.push(ch.seq), onDone: () => dones++ });
    const done = await call.result;
    await waitUntil(() => proxy.fromServer.filter((f) => f.type === 'done').length >= 1, 'done at the proxy');
    // Let the duplicate done arrive too.
    await c.send({ messages: prompt('ping') }).result;

    assert.equal(done.text, want);
    assert.equal(call.text, want);
    assert.deepEqual(seqs, Array.from({ length: done.chunks }, (_, i) => i + 1), 'each seq once, in order');
    assert.ok(call.stats.duplicates >= 15, `duplicates ${call.stats.duplicates}`);
    assert.equal(dones, 1);
  } finally {
    c.close();
    proxy.close();
  }
});

test('a request that gets no accepted in time is sent again, and answered once', async () => {
  const messages = prompt('Can I bring a guitar on board?');
  const want = await reference(A, messages);
  const proxy = await startProxy(A.ws);
  let dropped = 0;
  proxy.toServer = (f) => (f.type === 'request' && dropped++ === 0 ? null : undefined);
  const c = open({ url: proxy.url, acceptTimeoutMs: 300, getToken: tokenSource(A.http, { sub: user('resend') }) });
  try {
    const call = c.send({ messages });
    const done = await call.result;
    assert.equal(done.text, want);
    assert.equal(call.stats.resends, 1);
    const sent = proxy.fromClient.filter((f) => f.type === 'request');
    assert.equal(sent.length, 2);
    assert.equal(sent[0].request_id, sent[1].request_id, 'the same id: idempotent');
    assert.equal(proxy.fromServer.filter((f) => f.type === 'accepted').length, 1);
  } finally {
    c.close();
    proxy.close();
  }
});

test('the same request arriving twice is followed once', async () => {
  const messages = prompt('Where is the lounge?');
  const want = await reference(A, messages);
  const proxy = await startProxy(A.ws);
  proxy.toServer = (f) => (f.type === 'request' ? [f, f] : undefined);
  const c = open({ url: proxy.url, getToken: tokenSource(A.http, { sub: user('twice') }) });
  try {
    let streamed = '';
    const call = c.send({ messages }, { onChunk: (ch) => (streamed += ch.text) });
    const done = await call.result;
    assert.equal(done.text, want);
    assert.equal(streamed, want);
  } finally {
    c.close();
    proxy.close();
  }
});

test('not_found on resume (a server that never saw the request) sends it again', async () => {
  const messages = prompt('How long is the layover in Frankfurt?');
  const want = await reference(A, messages);
  const proxy = await startProxy(A.ws);
  // The reconnect after the cut lands on a server without the request.
  proxy.cutAt = { chunks: 10, onCut: () => (proxy.target = B.ws) };
  const c = open({ url: proxy.url, getToken: tokenSource(A.http, { sub: user('notfound') }) });
  try {
    const call = c.send({ messages });
    const done = await call.result;
    assert.equal(done.text, want);
    assert.equal(call.stats.resumes, 1);
    assert.equal(call.stats.resends, 1);
    const nf = proxy.fromServer.find((f) => f.type === 'error');
    assert.equal(nf?.code, 'not_found');
    assert.equal(nf?.conn, 2);
    const again = proxy.fromClient.filter((f) => f.type === 'request' && f.conn === 2);
    assert.equal(again.length, 1);
    assert.equal(again[0].after_seq, 10, 'only what is missing');
  } finally {
    c.close();
    proxy.close();
  }
});

test('a busy refusal of a resume (no chunks) is about the attempt: resume again, one identical answer', async () => {
  const messages = prompt('Is the Porto gate open yet?');
  const want = await reference(A, messages);
  const proxy = await startProxy(A.ws);
  proxy.cutAt = { chunks: 10 };
  // The first resume is refused as a server that could not read the request's record in time refuses it.
  let refused = 0;
  proxy.toServer = (f, pair) => {
    if (f.type !== 'resume' || refused++ > 0) return undefined;
    pair.client.send(JSON.stringify({ type: 'error', request_id: f.request_id, code: 'busy', status: 503,
      message: 'server busy', retryable: true, retry_after_ms: 20 }));
    return null;
  };
  const c = open({ url: proxy.url, getToken: tokenSource(A.http, { sub: user('refused') }) });
  try {
    let streamed = '';
    const call = c.send({ messages }, { onChunk: (ch) => (streamed += ch.text) });
    const done = await call.result;
    assert.equal(done.text, want);
    assert.equal(streamed, want);
    assert.equal(call.stats.refusals, 1);
    assert.equal(call.stats.terminals, 1);
    const resumes = proxy.fromClient.filter((f) => f.type === 'resume');
    assert.equal(resumes.length, 2, 'resumed again after the refusal');
    assert.deepEqual(resumes.map((f) => f.after_seq), [10, 10]);
  } finally {
    c.close();
    proxy.close();
  }
});

test('resumes refused past retryRefusedForMs end the call with the refusal', async () => {
  const proxy = await startProxy(A.ws);
  proxy.cutAt = { chunks: 5 };
  proxy.toServer = (f, pair) => {
    if (f.type !== 'resume') return undefined;
    pair.client.send(JSON.stringify({ type: 'error', request_id: f.request_id, code: 'busy', status: 503,
      message: 'server busy', retryable: true, retry_after_ms: 20 }));
    return null;
  };
  const c = open({ url: proxy.url, retryRefusedForMs: 200, getToken: tokenSource(A.http, { sub: user('refused-long') }) });
  try {
    const call = c.send({ messages: prompt('Will the Riga flight board soon?') });
    await assert.rejects(call.result, (/** @type {any} */ e) => e.code === 'busy');
    assert.ok(call.stats.refusals >= 1, `refusals ${call.stats.refusals}`);
    assert.equal(call.stats.terminals, 1);
  } finally {
    c.close();
    proxy.close();
  }
});

test('close 4008 (slow consumer): reconnect at once and resume', async () => {
  const messages = prompt('Is there wifi on the plane?');
  const want = await reference(A, messages);
  const proxy = await startProxy(A.ws);
  proxy.cutAt = { chunks: 12, code: 4008 };
  const c = open({ url: proxy.url, getToken: tokenSource(A.http, { sub: user('slow') }) });
  try {
    const call = c.send({ messages });
    const done = await call.result;
    assert.equal(done.text, want);
    assert.equal(c.closes[0].code, 4008);
    assert.equal(c.reconnects, 1);
    assert.equal(call.stats.resumes, 1);
    assert.equal(call.stats.duplicates, 0);
    const retry = c.states.find((s) => s.state === 'reconnecting');
    assert.equal(retry?.code, 4008);
  } finally {
    c.close();
    proxy.close();
  }
});

test('unreachable servers: jittered exponential backoff between attempts, moving through the urls', async () => {
  const dead = [];
  for (let i = 0; i < 3; i++) {
    const proxy = await startProxy(A.ws);
    proxy.close(); // nothing listens there any more
    dead.push(proxy.url);
  }
  const c = open({ urls: [...dead, A.ws], minBackoffMs: 20, maxBackoffMs: 1000, getToken: tokenSource(A.http, { sub: user('backoff') }) });
  try {
    await c.send({ messages: prompt('Any seats by the window?') }).result;
    assert.equal(c.url, A.ws);
    const failures = c.states.filter((s) => s.attempt !== undefined && s.error);
    assert.deepEqual(failures.map((s) => [s.state, s.attempt, s.url]), [
      ['connecting', 1, dead[0]],
      ['connecting', 2, dead[1]],
      ['connecting', 3, dead[2]],
    ]);
    failures.forEach((s, i) => {
      const cap = 20 * 2 ** i + 1;
      assert.ok(/** @type {number} */ (s.delayMs) >= 1 && /** @type {number} */ (s.delayMs) <= cap, `attempt ${i + 1}: ${s.delayMs} ms > ${cap}`);
    });
  } finally {
    c.close();
  }
});

test('the token server dies with the gateway: the next url with the token in hand, identical answer', { timeout: 20000 }, async () => {
  // As the demo page whose own origin (its /dev/token) is the gateway that
  // died: every getToken fails from the cut on, forced or not.
  const messages = prompt('Is the Bergen flight boarding yet?');
  const want = await reference(A, messages);
  const proxy = await startProxy(A.ws);
  const source = tokenSource(A.http, { sub: user('token-down') });
  let down = false;
  const getToken = async (/** @type {{force: boolean, reason: string}} */ ctx) => {
    if (down) {
      source.calls.push(ctx);
      throw new Error('the token server is down');
    }
    return source(ctx);
  };
  proxy.cutAt = { chunks: 20, onCut: () => {
    down = true;
    proxy.close(); // nothing listens there any more
  } };
  const c = open({ urls: [proxy.url, A.ws], minBackoffMs: 20, maxBackoffMs: 200, getToken });
  try {
    const call = c.send({ messages });
    const done = await call.result;
    assert.equal(done.text, want);
    assert.equal(call.stats.duplicates, 0);
    assert.equal(c.url, A.ws);
    const failed = source.calls.slice(1);
    assert.ok(failed.length >= 2, `getToken asked on every attempt after the cut: ${JSON.stringify(failed)}`);
    assert.ok(failed.some((x) => x.force), 'a fresh token was asked for after two failures');
    const failures = c.states.filter((s) => s.error);
    assert.ok(failures.length >= 1 && failures.every((s) => s.url === proxy.url), `only the dead url failed: ${JSON.stringify(failures.map((s) => s.url))}`);
  } finally {
    c.close();
    proxy.close();
  }
});
