// Token lifetime: refresh through getToken before expires_at (the `auth`
// frame), and close 4001 when a token runs out: a fresh token, a new
// connection, the answer resumed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gateway, open, prompt, tokenSource, user, waitUntil } from './helpers.mjs';

const A = gateway('A');

test('tokens are refreshed before they expire, on the same connection', async () => {
  // 2-second tokens: the client refreshes halfway through each one.
  const getToken = tokenSource(A.http, { sub: user('refresh'), ttlS: 2 });
  const c = open({ url: A.ws, getToken });
  try {
    /** @type {string[]} */
    const oks = [];
    c.on('auth', (f) => oks.push(f.expires_at));
    const first = await c.connected();
    await waitUntil(() => oks.length >= 2, 'two auth_ok frames', 10000);
    assert.ok(Date.parse(oks[1]) > Date.parse(first.expires_at), 'the session now expires later');
    assert.ok(Date.parse(oks[1]) - Date.now() > 0, 'and has not expired yet');
    // Past the first token's expiry, the same connection still answers.
    await waitUntil(() => Date.now() > Date.parse(first.expires_at) + 300, 'the first token to expire');
    const done = await c.send({ messages: prompt('Still signed in?') }).result;
    assert.ok(done.text.length > 0);
    assert.equal(c.closes.length, 0, 'no connection was closed');
    assert.equal(c.reconnects, 0);
    const refreshes = getToken.calls.filter((x) => x.reason === 'refresh');
    assert.ok(refreshes.length >= 2 && refreshes.every((x) => x.force));
  } finally {
    c.close();
  }
});

test('close 4001 (token expired): a fresh token, a new connection, the answer resumed', async () => {
  const getToken = tokenSource(A.http, { sub: user('expired'), ttlS: 2 });
  // No refresh: the server closes the session when the token runs out.
  const c = open({ url: A.ws, refreshBeforeMs: -1, getToken });
  let callsAtClose = -1;
  c.on('close', () => {
    if (callsAtClose < 0) callsAtClose = getToken.calls.length;
  });
  try {
    const first = await c.connected();
    const exp = Date.parse(first.expires_at);
    // Start an answer that is still streaming when the token expires.
    await waitUntil(() => Date.now() > exp - 400, 'the last moments of the token', 5000);
    const call = c.send({ messages: prompt('Tell me about the long flight') });
    const done = await call.result;
    assert.ok(done.text.length > 0);
    assert.equal(c.closes[0]?.code, 4001);
    assert.equal(c.reconnects, 1);
    const after = getToken.calls.slice(callsAtClose);
    assert.ok(after.length > 0 && after[0].force && after[0].reason === 'rejected', `after the close: ${JSON.stringify(after)}`);
    assert.equal(call.text, done.text);
    assert.equal(call.stats.duplicates, 0);
  } finally {
    c.close();
  }
});
