// Shared pieces of the jetway.js tests. They run against live gateways that
// `go test ./web/ -run TestClientNode` starts (it sets the JETWAY_TEST_*
// variables); this file has no tests of its own.
import { once } from 'node:events';
import { WebSocket, WebSocketServer } from 'ws';
import { connect } from '../static/jetway.js';

/**
 * A gateway the Go test started: its WebSocket URL and page base URL.
 * @param {'A'|'B'|'C'} name
 */
export function gateway(name) {
  const ws = process.env[`JETWAY_TEST_${name}_WS`];
  const http = process.env[`JETWAY_TEST_${name}_HTTP`];
  if (!ws || !http) {
    throw new Error(`JETWAY_TEST_${name}_WS is not set: run these tests with "go test ./web/ -run TestClientNode"`);
  }
  return { ws, http, pid: Number(process.env[`JETWAY_TEST_${name}_PID`] || 0) };
}

let users = 0;
/** A user name no other test uses (per-user limits stay out of the way). */
export function user(prefix) {
  return `${prefix}-${process.pid}-${++users}`;
}

/** One user turn. */
export function prompt(text) {
  return [{ role: 'user', content: text }];
}

/**
 * Mints a dev token at POST /dev/token, as the demo page does.
 * @param {string} base page base URL
 * @param {{sub: string, tenant?: string, app?: string, ttlS?: number}} o
 */
export async function mintToken(base, o) {
  const r = await fetch(`${base}/dev/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ sub: o.sub, tenant: o.tenant ?? 'contoso', app: o.app ?? 'support-assistant', ttl_s: o.ttlS ?? 3600 }),
  });
  if (!r.ok) throw new Error(`/dev/token: ${r.status} ${await r.text()}`);
  return (await r.json()).token;
}

/**
 * A getToken for the client that caches its token unless forced, and
 * records every call.
 * @param {string} base
 * @param {{sub: string, tenant?: string, app?: string, ttlS?: number}} o
 */
export function tokenSource(base, o) {
  /** @type {Array<{force: boolean, reason: string}>} */
  const calls = [];
  /** @type {string|undefined} */
  let cached;
  const getToken = async (/** @type {{force: boolean, reason: string}} */ ctx) => {
    calls.push(ctx);
    if (!cached || ctx.force) cached = await mintToken(base, o);
    return cached;
  };
  return Object.assign(getToken, { calls });
}

/**
 * connect() with the ws package, recording state events. Close it when done.
 * @param {import('../static/jetway.js').ConnectOptions} o
 */
export function open(o) {
  const client = connect({ WebSocket: /** @type {any} */ (WebSocket), ...o });
  /** @type {import('../static/jetway.js').StateEvent[]} */
  const states = [];
  /** @type {Array<{code: number, reason: string, url: string}>} */
  const closes = [];
  const t0 = Date.now();
  client.on('state', (e) => states.push({ ...e, at: Date.now() - t0 }));
  client.on('close', (e) => closes.push({ ...e, at: Date.now() - t0 }));
  return Object.assign(client, { states, closes });
}

/**
 * The answer to messages from a fresh client straight to gateway g (no
 * proxy): what every disturbed delivery must reproduce, the mock model being
 * deterministic.
 * @param {{ws: string, http: string}} g
 * @param {import('../static/jetway.js').Message[]} messages
 */
export async function reference(g, messages) {
  const c = open({ url: g.ws, getToken: tokenSource(g.http, { sub: user('reference') }) });
  try {
    return (await c.send({ messages }).result).text;
  } finally {
    c.close();
  }
}

/**
 * Polls cond until it holds.
 * @param {() => boolean} cond
 * @param {string} what
 * @param {number} [ms]
 * @param {{states: any[], closes: any[]}} [client] its events go into the failure message
 */
export async function waitUntil(cond, what, ms = 15000, client) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) {
      const events = client ? `\nstates: ${describe(client.states)}\ncloses: ${JSON.stringify(client.closes)}` : '';
      throw new Error(`timed out after ${ms} ms waiting for ${what}${events}`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** @param {any[]} states */
function describe(states) {
  return JSON.stringify(states.map((s) => ({ ...s, at: s.at, error: s.error ? String(s.error.message ?? s.error) : undefined })));
}

const SENDABLE_CLOSE = new Set([1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014]);

/**
 * @typedef {Object} Pair
 * @property {number} n connection number (1, 2, ...)
 * @property {string} query the client's query string (session_id)
 * @property {WebSocket} client
 * @property {WebSocket} up
 * @property {number} chunks chunk frames forwarded to the client
 * @property {boolean} cutting
 */

/**
 * A WebSocket proxy in front of a gateway, frame by frame: the test can
 * drop, rewrite or duplicate frames and cut connections the way networks,
 * load balancers and server faults do. Hooks return undefined (forward),
 * null (drop), a frame or an array of frames (forward those instead).
 * @param {string} target upstream WebSocket URL
 */
export async function startProxy(target) {
  const wss = new WebSocketServer({
    host: '127.0.0.1',
    port: 0,
    handleProtocols: (protocols) => (protocols.has('jetway.v1') ? 'jetway.v1' : false),
  });
  await once(wss, 'listening');
  const addr = /** @type {import('node:net').AddressInfo} */ (wss.address());
  const p = {
    url: `ws://127.0.0.1:${addr.port}/v1/ws`,
    target,
    /** @type {((f: any, pair: Pair) => any)|null} */
    toServer: null,
    /** @type {((f: any, pair: Pair) => any)|null} */
    toClient: null,
    /** @type {{chunks: number, code?: number, conn?: number, onCut?: () => void}|null} cut (or close with code) once a connection forwarded this many chunks; onCut runs first */
    cutAt: null,
    /** @type {any[]} */
    fromClient: [],
    /** @type {any[]} */
    fromServer: [],
    /** @type {Pair[]} */
    pairs: [],
    /** Cuts every connection without a close frame. */
    cut() {
      for (const pair of p.pairs) {
        pair.client.terminate();
        pair.up.terminate();
      }
    },
    /** @param {number} code */
    closeClients(code, reason = '') {
      for (const pair of p.pairs) {
        pair.client.close(code, reason);
        pair.up.terminate();
      }
    },
    close() {
      p.cut();
      wss.close();
    },
  };
  /** @param {any} r @param {string} text */
  const outgoing = (r, text) => (r === undefined ? [text] : r === null ? [] : (Array.isArray(r) ? r : [r]).map((x) => JSON.stringify(x)));

  wss.on('connection', (client, req) => {
    const url = String(req.url);
    const query = url.includes('?') ? url.slice(url.indexOf('?')) : '';
    const protocols = String(req.headers['sec-websocket-protocol'] ?? '').split(',').map((s) => s.trim()).filter(Boolean);
    const up = new WebSocket(p.target + query, protocols);
    /** @type {Pair} */
    const pair = { n: p.pairs.length + 1, query, client, up, chunks: 0, cutting: false };
    p.pairs.push(pair);
    /** @type {string[]} */
    const backlog = [];
    client.on('message', (data) => {
      const text = data.toString();
      const f = JSON.parse(text);
      p.fromClient.push({ ...f, conn: pair.n });
      for (const s of outgoing(p.toServer ? p.toServer(f, pair) : undefined, text)) {
        if (up.readyState === WebSocket.OPEN) up.send(s);
        else backlog.push(s);
      }
    });
    up.on('open', () => {
      for (const s of backlog.splice(0)) up.send(s);
    });
    up.on('message', (data) => {
      if (pair.cutting) return;
      const text = data.toString();
      const f = JSON.parse(text);
      p.fromServer.push({ ...f, conn: pair.n });
      for (const s of outgoing(p.toClient ? p.toClient(f, pair) : undefined, text)) {
        const isChunk = JSON.parse(s).type === 'chunk';
        if (isChunk) pair.chunks++;
        const cutAt = p.cutAt;
        if (isChunk && cutAt && (cutAt.conn ?? 1) === pair.n && pair.chunks >= cutAt.chunks) {
          pair.cutting = true;
          p.cutAt = null;
          cutAt.onCut?.();
          client.send(s, () => {
            if (cutAt.code) client.close(cutAt.code, 'proxy');
            else client.terminate();
            up.terminate();
          });
          return;
        }
        client.send(s);
      }
    });
    up.on('close', (code, reason) => {
      if (client.readyState !== WebSocket.OPEN) return;
      if (SENDABLE_CLOSE.has(code) || (code >= 3000 && code <= 4999)) client.close(code, reason.toString());
      else client.terminate();
    });
    up.on('error', () => client.terminate());
    client.on('close', () => {
      if (up.readyState === WebSocket.OPEN) up.close();
      else up.terminate();
    });
    client.on('error', () => {});
  });
  return p;
}
