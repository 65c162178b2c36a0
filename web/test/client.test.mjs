// jetway.js against a live gateway: streaming, the three ways to read an
// answer, errors as the server sends them, cancel and resume by id.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { JetwayError, connect, newId } from '../static/jetway.js';
import { gateway, open, prompt, reference, tokenSource, user, waitUntil } from './helpers.mjs';

const A = gateway('A');

test('streams an answer through callbacks, the async iterator and result', async () => {
  const sub = user('stream');
  const c = open({ url: A.ws, getToken: tokenSource(A.http, { sub }) });
  try {
    /** @type {string[]} */
    const events = [];
    /** @type {number[]} */
    const seqs = [];
    let streamed = '';
    // Sent before the connection is ready: queued, then sent.
    const call = c.send({ messages: prompt('Which gate for the 9:40 to Lisbon?') }, {
      onAccepted: (a) => events.push(`accepted:${a.model}`),
      onChunk: (ch) => {
        seqs.push(ch.seq);
        streamed += ch.text;
      },
      onDone: () => events.push('done'),
      onError: (e) => events.push(`error:${e.code}`),
    });
    let iterated = '';
    for await (const ch of call) iterated += ch.text;
    const done = await call.result;

    assert.deepEqual(events, ['accepted:mock-a', 'done']);
    assert.ok(done.text.length > 0);
    assert.equal(streamed, done.text);
    assert.equal(iterated, done.text);
    assert.equal(call.text, done.text);
    assert.deepEqual(seqs, Array.from({ length: done.chunks }, (_, i) => i + 1));
    assert.equal(call.lastSeq, done.chunks);
    assert.equal(call.stats.duplicates, 0);
    assert.equal(call.stats.mismatch, false);
    assert.ok(call.accepted && call.accepted.quota && call.accepted.quota.remaining > 0, 'accepted carries the quota');
    assert.ok(/** @type {number} */ (call.ttftMs) >= 0 && /** @type {number} */ (call.latencyMs) >= /** @type {number} */ (call.ttftMs));
    assert.ok(done.ttft_ms > 0 && done.latency_ms >= done.ttft_ms);

    // An iterator started after the end still yields every chunk.
    let again = '';
    for await (const ch of call) again += ch.text;
    assert.equal(again, done.text);

    assert.equal(c.ready?.user, sub);
    assert.equal(c.ready?.tenant, 'contoso');
    assert.deepEqual(c.states.map((s) => s.state), ['connected']);
    assert.equal(c.url, A.ws);
  } finally {
    c.close();
  }
});

test('connected() resolves with ready; the session id is the one given', async () => {
  const sessionId = newId();
  const c = open({ url: A.ws, sessionId, getToken: tokenSource(A.http, { sub: user('ready') }) });
  try {
    const ready = await c.connected();
    assert.equal(ready.session_id, sessionId);
    assert.equal(ready.protocol, 'jetway.v1');
    assert.ok(ready.heartbeat_s > 0);
    assert.ok(Date.parse(ready.expires_at) > Date.now());
  } finally {
    c.close();
  }
});

test('a model outside the app allowlist fails with model_not_allowed', async () => {
  const c = open({ url: A.ws, getToken: tokenSource(A.http, { sub: user('allow') }) });
  try {
    /** @type {JetwayError[]} */
    const errs = [];
    const call = c.send({ messages: prompt('hi'), model: 'mock-cheap' }, { onError: (e) => errs.push(e) });
    await assert.rejects(call.result, (/** @type {any} */ e) => {
      assert.ok(e instanceof JetwayError);
      assert.equal(e.code, 'model_not_allowed');
      assert.equal(e.status, 403);
      assert.equal(e.retryable, false);
      return true;
    });
    assert.equal(errs.length, 1);
    await assert.rejects(async () => {
      for await (const _ of call) {
        // no chunks
      }
    }, /model|allow/i);
  } finally {
    c.close();
  }
});

test('a quota smaller than the request is a 429 with the time until the window resets', async () => {
  const c = open({ url: A.ws, getToken: tokenSource(A.http, { sub: user('quota'), tenant: 'fabrikam', app: 'tiny-quota' }) });
  try {
    const call = c.send({ messages: prompt('Summarise the flight manual') });
    const err = await call.result.then(() => null, (e) => e);
    assert.ok(err instanceof JetwayError);
    assert.equal(err.code, 'quota_exceeded');
    assert.equal(err.status, 429);
    assert.ok(err.retryAfterMs > 0 && err.retryAfterMs <= 3600_000, `retry_after_ms ${err.retryAfterMs}`);
    assert.equal(call.accepted, null);
  } finally {
    c.close();
  }
});

test('cancel ends the call with cancelled and what was streamed', async () => {
  const c = open({ url: A.ws, getToken: tokenSource(A.http, { sub: user('cancel') }) });
  try {
    const call = c.send({ messages: prompt('Tell me about every runway') });
    await waitUntil(() => call.lastSeq >= 3, 'three chunks');
    call.cancel();
    const err = await call.result.then(() => null, (e) => e);
    assert.equal(err?.code, 'cancelled');
    assert.ok(call.text.length > 0);
  } finally {
    c.close();
  }
});

test('resume(id) lets another client (a reloaded page) follow a request; unknown ids are not_found', async () => {
  const sub = user('reload');
  const messages = prompt('Where do I collect my bags?');
  const want = await reference(A, messages);
  const first = open({ url: A.ws, getToken: tokenSource(A.http, { sub }) });
  const call = first.send({ messages });
  await waitUntil(() => call.lastSeq >= 5, 'five chunks');
  const id = call.id;
  first.close();
  await assert.rejects(call.result, /closed/);

  const second = open({ url: A.ws, getToken: tokenSource(A.http, { sub }) });
  try {
    const resumed = second.resume(id, 0);
    const done = await resumed.result;
    assert.equal(done.text, want);
    assert.equal(resumed.text, want);

    const unknown = second.resume(newId());
    const err = await unknown.result.then(() => null, (e) => e);
    assert.equal(err?.code, 'not_found');
    assert.equal(err?.status, 404);
  } finally {
    second.close();
  }
});

test('bad input fails before it reaches the server', async () => {
  const c = open({ url: A.ws, getToken: tokenSource(A.http, { sub: user('input') }) });
  try {
    assert.throws(() => c.send({ messages: [] }), TypeError);
    assert.throws(() => c.send({ request_id: 'bad id!', messages: prompt('x') }), TypeError);
    const big = c.send({ messages: prompt('x'.repeat(300_000)) });
    const err = await big.result.then(() => null, (e) => e);
    assert.equal(err?.code, 'invalid_request');
    const ok = c.send({ messages: prompt('still open?') });
    assert.ok((await ok.result).text.length > 0, 'the socket survived');
    // An image has the larger bound (8 MiB): 300 KB of it is sent and answered.
    const image = { type: 'image', format: 'png', data: Buffer.alloc(225_000).toString('base64') };
    const seen = c.send({ messages: [{ role: 'user', content: [{ type: 'text', text: 'what is this?' }, image] }] });
    assert.ok((await seen.result).text.length > 0, 'an image frame over 256 KiB is served');
    const huge = c.send({ messages: [{ role: 'user', content: [{ type: 'image', format: 'png', data: 'A'.repeat(8_400_000) }] }] });
    assert.match((await huge.result.then(() => null, (e) => e))?.message ?? '', /the limit is 8388608/);
  } finally {
    c.close();
  }
  for (const url of ['ws://', 'http://127.0.0.1/v1/ws', 'not a url', '/v1/ws']) {
    assert.throws(() => connect({ url, getToken: () => 't', WebSocket: /** @type {any} */ (function () {}) }), TypeError, url);
  }
  if (!('WebSocket' in globalThis)) {
    // Node 20 has no global WebSocket: the constructor must be injected.
    assert.throws(() => connect({ url: A.ws, getToken: () => 't' }), /WebSocket/);
  }
});
