// @ts-check
// The Jetway demo chat page: sign in (dev tokens, or the Cognito hosted UI
// in production), then chat over jetway.js. Everything a frontend needs to
// show is here: streamed text, time to first token and latency, the quota,
// plain errors (a 429 with the time until the window resets), the
// connection state, and the app's model allowlist.
//
// Query parameters: ws=<url>[,<url>...] gateway WebSocket endpoints
// (default: this page's host); ttl=<seconds> dev token lifetime.
import { connect } from './jetway.js';

/** @typedef {import('./jetway.js').Client} Client */
/** @typedef {import('./jetway.js').Call} Call */
/** @typedef {import('./jetway.js').Message} Message */
/** @typedef {import('./jetway.js').JetwayError} JetwayError */
/** @typedef {import('./jetway.js').StateEvent} StateEvent */
/** @typedef {import('./jetway.js').GetToken} GetToken */

/**
 * @typedef {Object} DevApp
 * @property {string} tenant
 * @property {string} app
 * @property {string[]} models the app's allowlist
 */

/**
 * @typedef {Object} CognitoSettings
 * @property {string} [domain] https://<prefix>.auth.<region>.amazoncognito.com
 * @property {string} [client_id]
 * @property {string} [redirect_uri] default: this page
 * @property {string} [scopes] default: openid
 */

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const params = new URLSearchParams(location.search);
const wsURLs = (params.get('ws') ?? '').split(',').map((s) => s.trim()).filter(Boolean);
if (wsURLs.length === 0) wsURLs.push(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws`);
const devTTL = Number(params.get('ttl')) || 3600;

/** What the page is doing, for people debugging it (and the browser tests). */
const demo = {
  /** @type {string[]} every connection state, in order */
  states: [],
  /** @type {Client|null} */
  client: null,
};
/** @type {any} */ (window).jetwayDemo = demo;

/** @type {Client|null} */
let client = null;
/** @type {Message[]} the turns that completed, sent with every request */
let turns = [];

start();

async function start() {
  // /config.json says which mode the gateway runs in; a page hosted
  // elsewhere may not have it, and then /dev/apps decides.
  /** @type {{dev?: boolean, cognito?: CognitoSettings}|null} */
  const cfg = await getJSON('/config.json');
  /** @type {DevApp[]|null} */
  const apps = cfg?.dev === false ? null : ((await getJSON('/dev/apps'))?.apps ?? null);
  $('loading').hidden = true;
  if (apps) showDevSignIn(apps);
  else await showCognito(cfg?.cognito ?? {});
}

/**
 * GETs a JSON document; null when it is not there.
 * @param {string} path
 */
async function getJSON(path) {
  try {
    const r = await fetch(path);
    return r.ok ? await r.json() : null;
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------
// Sign-in.

/** @param {DevApp[]} apps */
function showDevSignIn(apps) {
  const select = /** @type {HTMLSelectElement} */ ($('app'));
  for (const a of apps) select.add(new Option(`${a.tenant} · ${a.app}`, `${a.tenant}/${a.app}`));
  $('signin').hidden = false;
  $('signin-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const sub = /** @type {HTMLInputElement} */ ($('user')).value.trim();
    const app = apps.find((a) => `${a.tenant}/${a.app}` === select.value);
    if (!sub || !app) return;
    /** @type {{value: string, exp: number}|null} */
    let cached = null;
    const getToken = async (/** @type {{force: boolean}} */ { force }) => {
      if (!force && cached && cached.exp - Date.now() > 60_000) return cached.value;
      const r = await fetch('/dev/token', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ sub, tenant: app.tenant, app: app.app, ttl_s: devTTL }),
      });
      if (!r.ok) throw new Error(`sign-in failed: ${await errorText(r)}`);
      const body = await r.json();
      cached = { value: body.token, exp: Date.now() + body.expires_in * 1000 };
      return cached.value;
    };
    $('signin').hidden = true;
    startChat(getToken, app.models);
  });
  /** @type {HTMLInputElement} */ ($('user')).focus();
}

/** @param {CognitoSettings} cfg */
async function showCognito(cfg) {
  const redirect = cfg.redirect_uri || `${location.origin}${location.pathname}`;
  const scopes = cfg.scopes || 'openid';
  const shown = { domain: cfg.domain, client_id: cfg.client_id, redirect_uri: redirect, scopes };
  for (const dd of $('cognito-settings').querySelectorAll('dd')) {
    const v = shown[/** @type {keyof typeof shown} */ (/** @type {HTMLElement} */ (dd).dataset.key)];
    dd.textContent = v || 'not set';
    dd.classList.toggle('unset', !v);
  }
  const button = /** @type {HTMLButtonElement} */ ($('cognito-signin'));
  $('cognito').hidden = false;
  if (!cfg.domain || !cfg.client_id) {
    $('cognito-missing').hidden = false;
    button.disabled = true;
    return;
  }
  const domain = cfg.domain.replace(/\/+$/, '');
  const clientId = cfg.client_id;
  button.addEventListener('click', async () => {
    // Authorization code flow with PKCE: no client secret in the page.
    const verifier = randomString(48);
    const state = randomString(16);
    sessionStorage.setItem('jetway.pkce', JSON.stringify({ verifier, state }));
    const challenge = base64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
    const q = new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: redirect, scope: scopes,
      state, code_challenge: challenge, code_challenge_method: 'S256' });
    location.assign(`${domain}/oauth2/authorize?${q}`);
  });
  const code = params.get('code');
  const saved = JSON.parse(sessionStorage.getItem('jetway.pkce') ?? 'null');
  if (!code || !saved || params.get('state') !== saved.state) return;
  sessionStorage.removeItem('jetway.pkce');
  history.replaceState(null, '', location.pathname + (params.get('ws') ? `?ws=${encodeURIComponent(params.get('ws') ?? '')}` : ''));
  /** @param {Record<string, string>} form */
  const tokenCall = async (form) => {
    const r = await fetch(`${domain}/oauth2/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ client_id: clientId, ...form }),
    });
    if (!r.ok) throw new Error(`Cognito token endpoint: ${r.status}`);
    return r.json();
  };
  try {
    const first = await tokenCall({ grant_type: 'authorization_code', code, redirect_uri: redirect, code_verifier: saved.verifier });
    let access = { value: first.access_token, exp: Date.now() + first.expires_in * 1000 };
    const refreshToken = first.refresh_token;
    const getToken = async (/** @type {{force: boolean}} */ { force }) => {
      if (!force && access.exp - Date.now() > 60_000) return access.value;
      const next = await tokenCall({ grant_type: 'refresh_token', refresh_token: refreshToken });
      access = { value: next.access_token, exp: Date.now() + next.expires_in * 1000 };
      return access.value;
    };
    $('cognito').hidden = true;
    startChat(getToken, []);
  } catch (err) {
    showBanner(`Sign-in failed: ${err instanceof Error ? err.message : err}`);
  }
}

// ---------------------------------------------------------------------------
// Chat.

/**
 * @param {GetToken} getToken
 * @param {string[]} models the app's allowlist (empty: unknown, app default only)
 */
function startChat(getToken, models) {
  const select = /** @type {HTMLSelectElement} */ ($('model'));
  select.replaceChildren(new Option('App default', ''));
  for (const m of models) select.add(new Option(m, m));
  select.disabled = models.length === 0;

  turns = [];
  $('conversation').replaceChildren();
  $('quota').textContent = '';
  $('chat').hidden = false;

  client = connect({ urls: wsURLs, getToken });
  demo.client = client;
  client.on('state', renderConnection);
  client.on('ready', (r) => {
    $('who').textContent = `${r.user} · ${r.tenant} / ${r.app}`;
    hideBanner();
  });
  client.on('error', (e) => showBanner(e.message || e.code));
  renderConnection({ state: 'connecting', url: wsURLs[0] });
  /** @type {HTMLTextAreaElement} */ ($('prompt')).focus();
}

$('ask').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const input = /** @type {HTMLTextAreaElement} */ ($('prompt'));
  const text = input.value.trim();
  if (!text || !client) return;
  input.value = '';
  ask(client, text, /** @type {HTMLSelectElement} */ ($('model')).value);
});

// Enter sends, Shift+Enter starts a new line.
$('prompt').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    /** @type {HTMLFormElement} */ ($('ask')).requestSubmit();
  }
});

$('signout').addEventListener('click', () => {
  client?.close();
  location.reload();
});

/**
 * Sends one question and renders its answer as it streams.
 * @param {Client} c
 * @param {string} text
 * @param {string} model '' for the app's default
 */
function ask(c, text, model) {
  const messages = [...turns, { role: /** @type {const} */ ('user'), content: text }];
  const list = $('conversation');

  const q = el('li', 'turn user');
  q.append(el('p', 'who', 'You'), el('div', 'text', text));
  const a = el('li', 'turn assistant');
  a.dataset.state = 'waiting';
  a.setAttribute('aria-busy', 'true');
  const who = el('p', 'who', 'Assistant');
  const body = el('div', 'text');
  const answer = document.createTextNode('');
  body.append(answer);
  const meta = el('p', 'meta', 'Waiting for the gateway…');
  const stop = /** @type {HTMLButtonElement} */ (el('button', 'link stop', 'Stop'));
  stop.type = 'button';
  a.append(who, body, meta, stop);
  list.append(q, a);
  scrollToEnd();

  const call = c.send({ messages, model: model || undefined }, {
    onAccepted: (acc) => {
      a.dataset.state = 'streaming';
      a.dataset.requestId = call.id;
      who.textContent = `Assistant · ${acc.model}${acc.cached ? ' (cached)' : ''}`;
      meta.textContent = 'Answering…';
      renderQuota(acc.quota);
    },
    onChunk: (chunk) => {
      const follow = nearEnd();
      answer.appendData(chunk.text);
      if (follow) scrollToEnd();
    },
    onDone: (done) => {
      const follow = nearEnd();
      answer.data = done.text;
      a.dataset.state = 'done';
      a.removeAttribute('aria-busy');
      stop.remove();
      const parts = [`First token ${call.ttftMs} ms`, `${seconds(call.latencyMs ?? 0)} total`, `${done.usage.output_tokens} tokens`];
      if (call.stats.resumes > 0) parts.push(`resumed after ${plural(call.stats.resumes, 'reconnect')}`);
      if (call.stats.resends > 0) parts.push(`sent ${plural(call.stats.resends + 1, 'time')}`);
      meta.textContent = parts.join(' · ');
      meta.title = `Measured by the gateway: first token ${done.ttft_ms} ms, total ${done.latency_ms} ms`;
      turns.push({ role: 'user', content: text }, { role: 'assistant', content: done.text });
      if (follow) scrollToEnd();
    },
    onError: (err) => {
      const follow = nearEnd();
      a.dataset.state = 'error';
      a.dataset.code = err.code;
      a.removeAttribute('aria-busy');
      stop.remove();
      if (err.text) answer.data = err.text;
      meta.textContent = call.ttftMs !== null ? `First token ${call.ttftMs} ms · stopped after ${seconds(call.latencyMs ?? 0)}` : '';
      const box = el('p', 'error');
      box.setAttribute('role', 'alert');
      a.append(box);
      renderError(box, err);
      if (follow) scrollToEnd();
    },
  });
  stop.addEventListener('click', () => call.cancel());
}

/**
 * Puts an error in plain words; a retry time counts down.
 * @param {HTMLElement} box
 * @param {JetwayError} err
 */
function renderError(box, err) {
  /** @type {Record<string, string>} */
  const words = {
    quota_exceeded: 'Token quota exceeded.',
    rate_limited: 'Too many requests at once.',
    model_not_allowed: 'This app may not use that model.',
    cancelled: 'Stopped.',
    busy: 'The gateway is busy.',
    model_unavailable: 'The model is unavailable right now.',
    timeout: 'The model took too long.',
    interrupted: 'The answer was interrupted.',
    unauthorized: 'Your sign-in expired.',
  };
  const lead = words[err.code] ?? `${err.message || 'Something went wrong'}.`;
  const ms = err.retryAfterMs;
  if (!ms || ms <= 0) {
    box.textContent = err.retryable && err.code !== 'cancelled' ? `${lead} You can send it again.` : lead;
    return;
  }
  const until = Date.now() + ms;
  const at = new Date(until).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  /** @type {Record<string, string>} */
  const windows = { minute: 'per-minute ', hour: 'hourly ', day: 'daily ', month: 'monthly ' };
  const kind = windows[/** @type {any} */ (err.frame).window] ?? '';
  const why = err.code === 'quota_exceeded' ? `, when the ${kind}window resets (${at})` : '';
  const render = () => {
    const left = until - Date.now();
    box.textContent = left > 0 ? `${lead} Try again in ${duration(left)}${why}.` : `${lead} You can try again now.`;
    return left > 0;
  };
  render();
  const timer = setInterval(() => {
    if (!render() || !box.isConnected) clearInterval(timer);
  }, 1000);
}

/** @param {import('./jetway.js').Quota|null|undefined} quota */
function renderQuota(quota) {
  $('quota').textContent = quota
    ? `Quota: ${quota.remaining.toLocaleString()} of ${quota.limit.toLocaleString()} tokens left this ${quota.window}`
    : 'Quota: no limit';
}

/** @param {StateEvent} ev */
function renderConnection(ev) {
  demo.states.push(ev.state);
  const conn = $('conn');
  conn.dataset.state = ev.state;
  conn.dataset.reconnects = String(client?.reconnects ?? 0);
  if (client?.url) conn.dataset.url = client.url;
  const where = host(ev.url);
  /** @type {string} */
  let text;
  switch (ev.state) {
    case 'connecting':
      text = ev.attempt ? `Connecting (attempt ${ev.attempt + 1})…` : 'Connecting…';
      break;
    case 'connected':
      text = `Connected to ${where}`;
      if (client && client.reconnects > 0) text += ` · reconnected ${plural(client.reconnects, 'time')}`;
      break;
    case 'reconnecting':
      text = ev.delayMs ? `Connection lost; retrying in ${duration(ev.delayMs)} (attempt ${(ev.attempt ?? 0) + 1})` : 'Connection lost; reconnecting…';
      break;
    case 'draining':
      text = `${where} is shutting down; moving to another server…`;
      break;
    default:
      text = 'Signed out';
  }
  $('conn-text').textContent = text;
}

// ---------------------------------------------------------------------------
// Small things.

/**
 * @param {string} tag
 * @param {string} cls
 * @param {string} [text]
 */
function el(tag, cls, text) {
  const e = document.createElement(tag);
  e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** @param {string} msg */
function showBanner(msg) {
  const b = $('banner');
  b.textContent = msg;
  b.hidden = false;
}

function hideBanner() {
  $('banner').hidden = true;
}

/** Whether the conversation shows its end (then new text keeps it there; a reader scrolled up is left alone). */
function nearEnd() {
  const list = $('conversation');
  return list.scrollHeight - list.scrollTop - list.clientHeight < 48;
}

function scrollToEnd() {
  const list = $('conversation');
  list.scrollTop = list.scrollHeight;
}

/** @param {Response} r */
async function errorText(r) {
  try {
    const body = await r.json();
    return body.error?.message ?? `${r.status}`;
  } catch {
    return `${r.status}`;
  }
}

/** @param {string|undefined} url */
function host(url) {
  try {
    return url ? new URL(url).host : 'the gateway';
  } catch {
    return url ?? 'the gateway';
  }
}

/** @param {number} ms */
function seconds(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

/** @param {number} ms time left, as people say it */
function duration(ms) {
  const s = Math.ceil(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/**
 * @param {number} n
 * @param {string} word
 */
function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** @param {number} n */
function randomString(n) {
  return base64url(crypto.getRandomValues(new Uint8Array(n)));
}

/** @param {Uint8Array} b */
function base64url(b) {
  let s = '';
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}
