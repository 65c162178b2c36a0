// jetway.js with content blocks against a live gateway and its mock model:
// attachments in, tool calls and reasoning out (streamed in order, assembled
// while they stream, equal to done.blocks), a tool loop to its text answer,
// and a cut in the middle of a tool call's input healed by a resume.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { JetwayError, assistantTurn, documentBlock, imageBlock, nextTurn, reasoningText, toolCalls } from '../static/jetway.js';
import { gateway, open, prompt, startProxy, tokenSource, user } from './helpers.mjs';

const A = gateway('A');
const B = gateway('B');

/** A 1x1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');

/** @type {import('../static/jetway.js').Tool} */
const lookup = {
  name: 'flight_status',
  description: 'The status of a flight',
  input_schema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
};

/**
 * Sends a request on a fresh client straight to gateway g and returns the
 * call once done, with every chunk as delivered.
 * @param {{ws: string, http: string}} g
 * @param {import('../static/jetway.js').Request} request
 * @param {string} [url] connect here instead (a proxy)
 */
async function run(g, request, url) {
  const c = open({ url: url ?? g.ws, getToken: tokenSource(g.http, { sub: user('blocks') }) });
  try {
    /** @type {import('../static/jetway.js').Chunk[]} */
    const chunks = [];
    /** @type {string[]} blocks as the onChunk handler saw them, JSON */
    const seen = [];
    const call = c.send(request, {
      onChunk: (ch, cl) => {
        chunks.push(ch);
        seen.push(JSON.stringify(cl.blocks[ch.block]));
      },
    });
    const done = await call.result;
    return { call, done, chunks, seen, client: c };
  } finally {
    c.close();
  }
}

test('a tool call streams in order, block by block, and equals done.blocks', async () => {
  const { call, done, chunks, seen } = await run(A, { model: 'mock-tools', tools: [lookup], messages: prompt('TP 1234 Lisbon status please') });

  assert.equal(done.stop_reason, 'tool_use');
  assert.deepEqual(chunks.map((c) => c.seq), Array.from({ length: done.chunks }, (_, i) => i + 1), 'each seq once, in order');
  // Text first (block 0), then the tool call (block 1); never back to an earlier block.
  assert.deepEqual([...new Set(chunks.map((c) => `${c.block}:${c.kind}`))], ['0:text', '1:tool_use']);
  const first = chunks.find((c) => c.kind === 'tool_use');
  assert.ok(first?.id && first.name === 'flight_status', 'the tool_use block starts with its id and name');
  assert.equal(chunks.map((c) => c.text).join(''), done.text, 'only text chunks carry text');
  assert.equal(chunks.filter((c) => c.kind === 'tool_use').map((c) => c.input ?? '').join(''), JSON.stringify({ query: 'TP 1234 Lisbon' }));
  // While it streamed, the tool call's input grew and was not parsed yet.
  const partial = seen.map((s) => JSON.parse(s)).filter((b) => b.type === 'tool_use');
  assert.ok(partial.length >= 2 && partial.every((b) => b.input === undefined));
  assert.ok(partial.some((b) => b.inputJSON.length > 0 && b.inputJSON.length < partial.at(-1).inputJSON.length), 'the input JSON arrived in fragments');

  assert.deepEqual(done.blocks, [
    { type: 'text', text: done.text },
    { type: 'tool_use', id: first.id, name: 'flight_status', input: { query: 'TP 1234 Lisbon' } },
  ]);
  assert.deepEqual(call.blocks, [
    { type: 'text', text: done.text },
    { type: 'tool_use', id: first.id, name: 'flight_status', inputJSON: '{"query":"TP 1234 Lisbon"}', input: { query: 'TP 1234 Lisbon' } },
  ]);
  assert.equal(call.stats.mismatch, false, 'the streamed blocks are done.blocks');
  assert.deepEqual(toolCalls(done), [done.blocks?.[1]]);
  assert.equal(reasoningText(done), '');
});

test('a tool loop: the next turn carries the call and its result, and the model answers in text', async () => {
  const c = open({ url: A.ws, getToken: tokenSource(A.http, { sub: user('loop') }) });
  try {
    const messages = prompt('TP 1234 Lisbon status please');
    const first = await c.send({ model: 'mock-tools', tools: [lookup], messages }).result;
    const [use] = toolCalls(first);
    assert.equal(use.name, 'flight_status');
    assert.throws(() => nextTurn(first, []), /no result for tool call/);

    const turn = nextTurn(first, [{ tool_use_id: use.id, content: 'On time, gate 14' }]);
    assert.deepEqual(turn, [
      { role: 'assistant', content: [{ type: 'text', text: first.text }, { type: 'tool_use', id: use.id, name: 'flight_status', input: use.input }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: 'On time, gate 14' }] }] },
    ]);
    const call = c.send({ model: 'mock-tools', tools: [lookup], messages: [...messages, ...turn] });
    const done = await call.result;
    // The request used tools, so even a text answer comes with its blocks.
    assert.deepEqual(done.blocks, [{ type: 'text', text: done.text }]);
    assert.deepEqual(assistantTurn(done), { role: 'assistant', content: done.blocks });
    assert.deepEqual(assistantTurn({ ...done, blocks: undefined }), { role: 'assistant', content: done.text }, 'without blocks: the text');
    assert.notEqual(done.stop_reason, 'tool_use');
    assert.ok(done.text.length > 0);
    assert.deepEqual(toolCalls(done), []);
    assert.ok(call.blocks.every((b) => b.type === 'text'));
    assert.equal(call.stats.mismatch, false);
  } finally {
    c.close();
  }
});

test('reasoning streams before the text, with its signature, and goes back unchanged', async () => {
  const { call, done, chunks } = await run(A, { model: 'mock-reasoning', reasoning: { budget_tokens: 1024 }, messages: prompt('Which gate for Oslo?') });

  const kinds = chunks.map((c) => c.kind);
  assert.equal(kinds[0], 'reasoning');
  assert.ok(kinds.lastIndexOf('reasoning') < kinds.indexOf('text'), 'all reasoning, then the text');
  const sig = chunks.filter((c) => c.signature);
  assert.equal(sig.length, 1);
  assert.equal(sig[0].signature, 'mock-signature');
  assert.equal(sig[0].block, 0);
  const thought = chunks.map((c) => c.reasoning ?? '').join('');
  assert.ok(thought.length > 0);
  assert.equal(reasoningText(done), thought);
  assert.deepEqual(done.blocks, [{ type: 'reasoning', text: thought, signature: 'mock-signature' }, { type: 'text', text: done.text }]);
  assert.deepEqual(call.blocks, done.blocks);
  assert.equal(call.stats.mismatch, false);
  assert.equal(chunks.map((c) => c.text).join(''), done.text, 'a text-only reader still gets the text');

  // The reasoning goes back with its signature (the history of a later turn).
  assert.deepEqual(assistantTurn(done), { role: 'assistant', content: done.blocks });
  assert.throws(() => nextTurn(done, []), /calls no tool/);
});

test('an image and a document go as blocks; a model without the capability refuses them by name', async () => {
  const image = await imageBlock(PNG);
  assert.deepEqual(image, { type: 'image', format: 'png', data: PNG.toString('base64') });
  const doc = await documentBlock(new File(['Gate 14 boards at 9:10.'], 'boarding notes (v2).txt', { type: 'text/plain' }));
  assert.deepEqual(doc, { type: 'document', format: 'txt', name: 'boarding notes (v2)', data: Buffer.from('Gate 14 boards at 9:10.').toString('base64') });

  const text = await run(A, { messages: prompt('What is in this picture?') });
  const withImage = await run(A, { messages: [{ role: 'user', content: [image, doc, { type: 'text', text: 'What is in this picture?' }] }] });
  assert.ok(withImage.done.text.length > 0);
  assert.equal(withImage.done.blocks, undefined, 'a text answer has no blocks');
  assert.ok(/** @type {import('../static/jetway.js').AcceptedFrame} */ (withImage.call.accepted).reserved_tokens >=
    /** @type {import('../static/jetway.js').AcceptedFrame} */ (text.call.accepted).reserved_tokens + 4000, 'an image is counted in the reservation');

  const c = open({ url: A.ws, getToken: tokenSource(A.http, { sub: user('noimages'), tenant: 'fabrikam', app: 'tiny-quota' }) });
  try {
    const err = await c.send({ messages: [{ role: 'user', content: [image, { type: 'text', text: 'And this?' }] }] }).result.then(
      () => assert.fail('an image to a model without the images capability was answered'), (e) => e);
    assert.ok(err instanceof JetwayError);
    assert.equal(err.code, 'invalid_request');
    assert.match(err.message, /images/);
  } finally {
    c.close();
  }
});

test('attachment helpers: formats from the MIME type or the bytes, clear errors otherwise', async () => {
  assert.equal((await imageBlock(new Blob([PNG], { type: 'image/png' }))).format, 'png');
  assert.equal((await imageBlock(new Uint8Array([0xff, 0xd8, 0xff, 0xe0]))).format, 'jpeg');
  assert.equal((await imageBlock(new TextEncoder().encode('GIF89a'))).format, 'gif');
  assert.equal((await imageBlock(new TextEncoder().encode('RIFF\0\0\0\0WEBPVP8 '))).format, 'webp');
  assert.equal((await imageBlock(PNG.buffer.slice(PNG.byteOffset, PNG.byteOffset + PNG.length), 'png')).data, PNG.toString('base64'));
  await assert.rejects(imageBlock(new TextEncoder().encode('not an image')), /not a PNG, JPEG, GIF or WebP/);
  await assert.rejects(documentBlock(new Uint8Array([1])), /unknown document format/);
  const named = await documentBlock(new Uint8Array([1, 2, 3]), { format: 'pdf', name: 'Q3/2025: results*final' });
  assert.equal(named.name, 'Q3 2025 results final');
  // Bytes beyond the argument limit of String.fromCharCode still encode.
  const big = new Uint8Array(200_001).map((_, i) => i % 251);
  assert.equal((await imageBlock(big, 'png')).data, Buffer.from(big).toString('base64'));
});

/**
 * A tool call cut in the middle of its input: the client reconnects and
 * resumes; its blocks are those of an uninterrupted run.
 * @param {string} target where the reconnect goes: A again, or B, which never saw the request
 */
async function cutMidToolInput(target) {
  const request = { model: 'mock-tools', tools: [lookup], messages: prompt('Status of TP 1234 Lisbon to Paris') };
  const want = await run(A, request);
  const proxy = await startProxy(A.ws);
  let fragments = 0;
  let cutAfterSeq = 0;
  proxy.toClient = (f, pair) => {
    // Cut right after the second fragment of the call's input.
    if (pair.n === 1 && f.type === 'chunk' && f.kind === 'tool_use' && f.input && ++fragments === 2) {
      cutAfterSeq = f.seq;
      proxy.cutAt = { chunks: pair.chunks + 1, onCut: () => (proxy.target = target) };
    }
    return undefined;
  };
  try {
    const got = await run(A, request, proxy.url);
    assert.equal(got.client.reconnects, 1);
    assert.equal(got.call.stats.resumes, 1);
    const resume = proxy.fromClient.find((f) => f.conn === 2 && (f.type === 'resume' || f.type === 'request'));
    assert.equal(resume?.after_seq, cutAfterSeq, 'resumed after the fragment that arrived');
    assert.ok(cutAfterSeq < got.done.chunks, 'the cut was inside the input');
    assert.deepEqual(got.chunks.map((c) => c.seq), Array.from({ length: got.done.chunks }, (_, i) => i + 1), 'each seq once, in order');
    assert.deepEqual(got.chunks, want.chunks, 'the same chunks as an uninterrupted run');
    assert.deepEqual(got.call.blocks, want.call.blocks, 'the same blocks as an uninterrupted run');
    assert.deepEqual(got.done.blocks, want.done.blocks);
    assert.equal(got.call.stats.mismatch, false);
    return proxy;
  } finally {
    proxy.close();
  }
}

test('a cut in the middle of a tool call input: resumed on the same gateway, the same blocks', async () => {
  const proxy = await cutMidToolInput(A.ws);
  assert.equal(proxy.fromServer.filter((f) => f.type === 'accepted').length, 1, 'one model call');
});

test('a cut in the middle of a tool call input, reconnected to a gateway that never saw it: sent again, the same blocks', async () => {
  const proxy = await cutMidToolInput(B.ws);
  assert.equal(proxy.fromServer.find((f) => f.conn === 2 && f.type === 'error')?.code, 'not_found');
});
