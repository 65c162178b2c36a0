// jetway.js's client.me() against a live gateway: the caller's standing
// (GET /v1/me) from the gateway the socket is on, with the socket's token;
// the admin API's errors as JetwayErrors.
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { JetwayError } from '../static/jetway.js';
import { gateway, open, prompt, tokenSource, user } from './helpers.mjs';

const A = gateway('A');

test('me() is the standing of the socket\'s user, from its gateway, with its token', async () => {
  const sub = user('me');
  const getToken = tokenSource(A.http, { sub });
  const c = open({ url: A.ws, getToken });
  try {
    await c.connected();
    const calls = getToken.calls.length;
    const before = await c.me();
    assert.equal(getToken.calls.length, calls, 'me() asked for a token although the socket had one');
    assert.equal(before.tenant, 'contoso');
    assert.equal(before.app, 'support-assistant');
    assert.equal(before.user, sub);
    assert.equal(before.disabled, false);
    // web/testdata/jetway.yaml: the tenant's month, then the app's hour, in tokens.
    assert.deepEqual(before.limits.map((l) => [l.scope, l.window, l.tokens]), [['tenant', 'month', 100000000], ['app', 'hour', 2000000]]);
    for (const l of before.limits) {
      assert.equal(l.used + l.remaining, l.tokens, `used + remaining of ${JSON.stringify(l)}`);
      assert.ok(Date.parse(l.resets_at) > Date.now(), `resets_at ${l.resets_at} is not ahead`);
    }

    // Once the request settled, its charge is in every limit's used.
    // Other tests share the app and the tenant, so used only has a floor.
    const done = await c.send({ messages: prompt('How much have I used?') }).result;
    const charged = done.usage.input_tokens + done.usage.output_tokens;
    assert.ok(charged > 0);
    const deadline = Date.now() + 30000;
    for (;;) {
      const after = await c.me();
      if (after.limits.every((l, i) => l.used >= charged && l.used + l.remaining === before.limits[i].tokens)) break;
      assert.ok(Date.now() < deadline, `after a request charged ${charged} tokens: ${JSON.stringify(after.limits)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    c.close();
  }
});

test('me() surfaces the gateway\'s error code and message, after one fresh token for a 401', async () => {
  const calls = [];
  const c = open({ url: A.ws, getToken: async (ctx) => { calls.push(ctx); return 'not-a-jwt'; }, minBackoffMs: 1000, maxBackoffMs: 5000 });
  try {
    const err = await c.me().then(() => null, (e) => e);
    assert.ok(err instanceof JetwayError, `${err}`);
    assert.equal(err.code, 'unauthorized');
    assert.equal(err.status, 401);
    assert.ok(err.message.length > 0 && err.message !== 'unauthorized', `message ${err.message}`);
    assert.equal(err.retryable, false);
    assert.ok(calls.some((ctx) => ctx.force && ctx.reason === 'rejected'), `getToken calls ${JSON.stringify(calls)}: no fresh token asked for`);
  } finally {
    c.close();
  }
});

test('me() with no gateway answering is unavailable (retryable, status 0)', async () => {
  const srv = createServer();
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = /** @type {import('node:net').AddressInfo} */ (srv.address()).port;
  await new Promise((resolve) => srv.close(resolve));
  const c = open({ url: A.ws, getToken: tokenSource(A.http, { sub: user('me-nowhere') }) });
  try {
    const err = await c.me({ url: `http://127.0.0.1:${port}/v1/me` }).then(() => null, (e) => e);
    assert.ok(err instanceof JetwayError, `${err}`);
    assert.equal(err.code, 'unavailable');
    assert.equal(err.status, 0);
    assert.equal(err.retryable, true);
    assert.ok(err.message.includes(`127.0.0.1:${port}/v1/me`), err.message);
  } finally {
    c.close();
  }
});
