// Background responses through the official openai client (started by
// cmd/gateway TestResponsesNodeClient): resumed with retrieve(id,
// {stream:true, starting_after}) on another server, byte-identical; the
// owning server SIGKILLed mid-answer; cancelled from another server.
// Only this file uses server 2 (the one killed).
import { test } from 'node:test';
import {
  assert, openai, wsAnswer, newSub, collect, contiguous, deltas, countType, outputText, TEXT_EVENTS, squeeze,
  refused, OpenAI, ctl, until, rawStream, sseEvents,
} from './helpers.mjs';

const T = { timeout: 150_000 };

test('background: resumed live on another server from starting_after, byte-identical to a full replay', T, async () => {
  const sub = newSub('bg');
  const prompt = 'a long story told in the background';
  const a = await openai({ server: 0, sub });
  const b = await openai({ server: 1, jwt: a.jwt });

  const started = await a.responses.create({ model: 'mock-a', input: prompt, background: true });
  assert.equal(started.background, true);
  assert.ok(['queued', 'in_progress'].includes(started.status), started.status);
  assert.match(started.id, /^resp_/);
  assert.deepEqual(started.output, []);

  // Live, on server 1, from after event 3; and raw (its bytes) at once too.
  const N = 3;
  const rawLive = rawStream(b, started.id, N);
  const { events, error } = await collect(await b.responses.retrieve(started.id, { stream: true, starting_after: N }));
  assert.equal(error, undefined);
  contiguous(events, N + 1);
  assert.equal(events.at(-1).type, 'response.completed');
  const done = events.at(-1).response;
  assert.equal(done.id, started.id);

  // A full replay once it has ended, on server 0: every event from 0, the
  // tail of which is byte for byte what the live resume got.
  const full = await rawStream(a, started.id);
  const fullEvents = sseEvents(full);
  assert.equal(await rawLive, fullEvents.slice(N + 1).join(''), 'the live resume differs from the replay after starting_after');
  assert.equal(await rawStream(b, started.id, 10), fullEvents.slice(11).join(''));
  const parsed = fullEvents.map((e) => JSON.parse(e.split('\ndata: ')[1]));
  contiguous(parsed);
  assert.deepEqual(squeeze(parsed.map((e) => e.type)), TEXT_EVENTS);
  assert.deepEqual(parsed.slice(N + 1), events, 'the SDK parsed other events than the bytes hold');
  assert.ok(fullEvents.every((e, i) => e.startsWith(`event: ${parsed[i].type}\ndata: `)));
  const ws = (await wsAnswer(sub + '-ws', 'support', 1, { prompt })).done;
  assert.equal(deltas(parsed), ws.text);
  assert.equal(outputText(done), ws.text);

  // The stored object agrees, on every server.
  for (const c of [a, b]) {
    const got = await until('the stored object', async () => {
      const r = await c.responses.retrieve(started.id);
      return r.status === 'completed' ? r : null;
    });
    assert.equal(got.output_text, ws.text);
  }

  // The last event alone; past the end or negative: 400 naming starting_after.
  const last = parsed.length - 1;
  assert.equal(await rawStream(a, started.id, last - 1), fullEvents.at(-1));
  // From the last event: nothing more (an empty stream), on an ended response.
  const empty = await collect(await b.responses.retrieve(started.id, { stream: true, starting_after: last }));
  assert.deepEqual(empty.events, []);
  assert.equal(empty.error, undefined);
  for (const bad of [last + 1, last + 5, -1]) {
    const e = await refused(b.responses.retrieve(started.id, { stream: true, starting_after: bad }), OpenAI.BadRequestError, 400, `starting_after ${bad}`);
    assert.equal(e.param, 'starting_after', JSON.stringify(e.error));
  }
  await refused(b.responses.retrieve('resp_no-such-response-77', { stream: true, starting_after: 2 }), OpenAI.NotFoundError, 404, 'resume of an unknown id');
});

test('the owning server SIGKILLed mid-answer: the resume on another server ends response.incomplete (interrupted) with the saved text', T, async () => {
  const sub = newSub('kill');
  const prompt = 'the server dies while I speak in the background';
  const doomed = await openai({ server: 2, sub });
  const a = await openai({ server: 0, jwt: doomed.jwt });
  const b = await openai({ server: 1, jwt: doomed.jwt });

  // Streamed and in the background: the answer outlives its client.
  let killed;
  const first = await collect(await doomed.responses.create({ model: 'mock-a', input: prompt, background: true, stream: true }), (ev, evs) => {
    if (ev.type === 'response.output_text.delta' && countType(evs, 'response.output_text.delta') === 40) {
      killed = ctl('/kill', { server: 2 }, {});
      return true; // read no further: the client knows events 0..N
    }
    return false;
  });
  assert.ok(killed, `the answer ended after ${countType(first.events, 'response.output_text.delta')} deltas, before the kill`);
  await killed;
  const id = first.events[0].response.id;
  contiguous(first.events);
  const N = first.events.at(-1).sequence_number;

  // A full replay on server 0: what was saved, then the interrupted ending.
  const replay = await collect(await a.responses.retrieve(id, { stream: true }));
  assert.equal(replay.error, undefined);
  contiguous(replay.events);
  const end = replay.events.at(-1);
  assert.equal(end.type, 'response.incomplete', squeeze(replay.events.map((e) => e.type)).join(' '));
  assert.equal(end.response.status, 'incomplete');
  assert.deepEqual(end.response.incomplete_details, { reason: 'interrupted' });
  const saved = outputText(end.response);
  assert.equal(saved, deltas(replay.events));
  assert.ok(saved.length > 0, 'nothing was saved');
  const whole = (await wsAnswer(sub + '-ws', 'support', 0, { prompt })).done.text;
  assert.ok(whole.startsWith(saved), `the saved text ${JSON.stringify(saved)} is not a prefix of the answer`);
  assert.ok(saved.length < whole.length);
  assert.deepEqual(squeeze(replay.events.map((e) => e.type)),
    ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
      'response.output_text.delta', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
  assert.equal(replay.events.find((e) => e.type === 'response.output_item.done').item.status, 'incomplete');
  // The replay begins with what the client was sent (the checkpoint may be behind it).
  const savedDeltas = replay.events.findIndex((e) => e.type === 'response.output_text.done');
  const k = Math.min(first.events.length, savedDeltas);
  assert.ok(k > 4);
  assert.deepEqual(replay.events.slice(0, k), first.events.slice(0, k));

  // Resumed from the last event the client got: the tail of the replay
  // when the checkpoint holds it; when the checkpoint is behind it, 400 naming starting_after.
  if (N < replay.events.length - 1) {
    const tail = await collect(await a.responses.retrieve(id, { stream: true, starting_after: N }));
    assert.deepEqual(tail.events, replay.events.slice(N + 1));
  } else {
    const e = await refused(a.responses.retrieve(id, { stream: true, starting_after: N }), OpenAI.BadRequestError, 400, 'resume past the saved end');
    assert.equal(e.param, 'starting_after');
  }
  // From within what was saved: exactly the replay's tail, on server 1 too.
  const tail = await collect(await b.responses.retrieve(id, { stream: true, starting_after: k - 2 }));
  assert.deepEqual(tail.events, replay.events.slice(k - 1));

  // GET on server 1: incomplete, with the saved text.
  const got = await until('GET says incomplete', async () => {
    const r = await b.responses.retrieve(id);
    return r.status === 'incomplete' ? r : null;
  }, 60_000);
  assert.deepEqual(got.incomplete_details, { reason: 'interrupted' });
  assert.equal(got.output_text, saved);
  assert.equal(got.background, true);
});

test('cancel from another server stops a background response; a foreground one cannot be cancelled', T, async () => {
  const sub = newSub('cancel');
  const prompt = 'a long answer nobody will wait for';
  const a = await openai({ server: 0, sub });
  const b = await openai({ server: 1, jwt: a.jwt });

  const started = await a.responses.create({ model: 'mock-a', input: prompt, background: true });
  // Under way: a few deltas seen from server 1.
  await collect(await b.responses.retrieve(started.id, { stream: true }), (ev, evs) => countType(evs, 'response.output_text.delta') >= 5);
  const cancelled = await b.responses.cancel(started.id);
  assert.equal(cancelled.id, started.id);
  assert.equal(cancelled.status, 'cancelled', JSON.stringify(cancelled).slice(0, 500));
  assert.equal(cancelled.error, null);
  const whole = (await wsAnswer(sub + '-ws', 'support', 1, { prompt })).done.text;
  assert.ok(outputText(cancelled).length < whole.length, 'the whole answer came');
  assert.ok(whole.startsWith(outputText(cancelled)));

  const got = await until('GET says cancelled on server 0', async () => {
    const r = await a.responses.retrieve(started.id);
    return r.status === 'cancelled' ? r : null;
  });
  assert.equal(got.background, true);
  // Its stream ends as cancelled too.
  const { events } = await collect(await a.responses.retrieve(started.id, { stream: true }));
  assert.equal(events.at(-1).response.status, 'cancelled');
  // Cancelling it again answers the same ending.
  assert.equal((await a.responses.cancel(started.id)).status, 'cancelled');

  const fg = await a.responses.create({ model: 'mock-a', input: 'a short foreground answer', max_output_tokens: 10 });
  const e = await refused(b.responses.cancel(fg.id), OpenAI.BadRequestError, 400, 'cancel of a foreground response');
  assert.match(e.message, /background/);
  await refused(b.responses.cancel('resp_no-such-response-99'), OpenAI.NotFoundError, 404, 'cancel of an unknown id');
});

test('the stream\'s response objects say nothing false of the request: what they cannot know they leave out, whole answers echo it', T, async () => {
  // The events are the log's (byte-identical on every server), and the log
  // knows the answer only: store and background are left out of them, never
  // said false; the creation answer and GET echo the request.
  const a = await openai({ server: 0, sub: newSub('echo') });
  const started = await a.responses.create({ model: 'mock-a', input: 'echo my flags', background: true, max_output_tokens: 10 });
  assert.equal(started.background, true);
  assert.equal(started.store, true);
  const { events } = await collect(await a.responses.retrieve(started.id, { stream: true }));
  const got = await a.responses.retrieve(started.id);
  assert.equal(got.store, true);
  assert.equal(got.background, true);
  for (const e of [events[0], events.at(-1)]) {
    assert.equal(e.response.store, undefined, `${e.type} says store ${e.response.store}`);
    assert.equal(e.response.background, undefined, `${e.type} says background ${e.response.background}`);
    assert.equal(e.response.id, started.id);
  }
  const streamed = await collect(await a.responses.create({ model: 'mock-a', input: 'echo my flags', max_output_tokens: 10, stream: true }));
  assert.equal(streamed.events.at(-1).response.store, undefined);
});
