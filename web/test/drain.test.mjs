// A draining server: SIGTERM to gateway C while it streams. The answer in
// flight finishes; the client opens a new connection (to the next url) and
// new work goes there.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gateway, open, prompt, reference, tokenSource, user, waitUntil } from './helpers.mjs';

const A = gateway('A');
const C = gateway('C');

test('draining: the answer in flight finishes, new work goes to the next server', async () => {
  assert.ok(C.pid > 0, 'JETWAY_TEST_C_PID');
  const messages = prompt('What time does boarding close?');
  const want = await reference(A, messages);
  // Tokens come from A, which outlives C (as a user pool outlives any task):
  // every test gateway shares one dev signing key.
  const c = open({ urls: [C.ws, A.ws], getToken: tokenSource(A.http, { sub: user('drain') }) });
  try {
    /** @type {import('../static/jetway.js').DrainingFrame[]} */
    const drains = [];
    c.on('draining', (f) => drains.push(f));
    const call = c.send({ messages });
    await waitUntil(() => call.lastSeq >= 3, 'the answer to start on C');
    assert.equal(c.url, C.ws);
    process.kill(C.pid, 'SIGTERM');

    await waitUntil(() => c.url === A.ws, 'the move to A', 10000, c);
    assert.equal(drains.length, 1);
    assert.ok(drains[0].reconnect_after_ms >= 0);
    const states = c.states.map((s) => s.state);
    // (`reconnecting` may come between if C finished before the new connection was ready.)
    assert.deepEqual(states.slice(0, 2), ['connected', 'draining']);
    assert.equal(states.at(-1), 'connected');
    assert.deepEqual(c.states.filter((s) => s.error), [], 'straight to A: no attempt on the draining server');

    // New work goes to A while C finishes what it carries.
    const next = c.send({ messages: prompt('And the gate?') });
    const [first, second] = await Promise.all([call.result, next.result]);
    assert.equal(first.text, want);
    assert.equal(call.stats.duplicates, 0);
    assert.ok(second.text.length > 0);
    assert.equal(next.stats.resends, 0, 'sent once, to A');

    // C closes with 1001 once its answers are delivered.
    await waitUntil(() => c.closes.length > 0, 'C to close the old connection', 20000, c);
    assert.equal(c.closes[0].code, 1001);
    assert.equal(c.closes[0].url, C.ws);
    assert.equal(c.state, 'connected');
  } finally {
    c.close();
  }
});
