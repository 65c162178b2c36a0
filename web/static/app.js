// @ts-check
// The Jetway demo chat page: sign in (dev tokens, or the Cognito hosted UI
// in production), then chat over jetway.js. Everything a frontend needs to
// show is here: answers rendered as Markdown while they stream, a model's
// reasoning (collapsible), an attached image, a tool the model can call that
// runs in the page (a calculator), time to first token and latency, the
// quota, the user's standing against every limit (GET /v1/me), plain
// errors (a 429 with the time until the window resets), the connection
// state, and the app's model allowlist; Copy and Retry under every answer,
// example questions in an empty conversation.
//
// Query parameters: ws=<url>[,<url>...] gateway WebSocket endpoints
// (default: this page's host); ttl=<seconds> dev token lifetime.
import { connect, imageBlock, nextTurn, toolCalls } from './jetway.js';
import { renderMarkdown } from './markdown.js';

/** @typedef {import('./jetway.js').Client} Client */
/** @typedef {import('./jetway.js').Call} Call */
/** @typedef {import('./jetway.js').Message} Message */
/** @typedef {import('./jetway.js').JetwayError} JetwayError */
/** @typedef {import('./jetway.js').StateEvent} StateEvent */
/** @typedef {import('./jetway.js').GetToken} GetToken */
/** @typedef {import('./jetway.js').ContentBlock} ContentBlock */
/** @typedef {import('./jetway.js').ImageBlock} ImageBlock */
/** @typedef {import('./jetway.js').Tool} Tool */
/** @typedef {import('./jetway.js').ToolUseBlock} ToolUseBlock */
/** @typedef {import('./jetway.js').ToolResult} ToolResult */
/** @typedef {import('./jetway.js').Standing} Standing */
/** @typedef {import('./jetway.js').StandingEntry} StandingEntry */

/**
 * What the user chose for a question.
 * @typedef {Object} AskOptions
 * @property {string} model '' for the app's default
 * @property {boolean} tools offer the calculator
 * @property {boolean} reasoning ask the model to think first (the model needs the reasoning capability)
 */

/**
 * One question and what it needs to be asked again (retryAnswer).
 * @typedef {Object} Question
 * @property {HTMLElement} li the user's turn
 * @property {Message[]} before the conversation before it
 * @property {Message} message the question itself
 * @property {Tool[]|undefined} tools
 * @property {AskOptions} opts
 */

/**
 * An image ready to send.
 * @typedef {Object} Attachment
 * @property {ImageBlock} block
 * @property {string} url a data: URL of the same bytes, for thumbnails
 * @property {string} name
 */

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
  /** @type {Standing|null} the standing the panel shows */
  standing: null,
  /** reads of the standing that ended (answered or failed) */
  standingReads: 0,
  /** reads the standing again now (what the page does after every answer) */
  refreshStanding: () => refreshStanding(),
};
/** @type {any} */ (window).jetwayDemo = demo;

/** @type {Client|null} */
let client = null;
/** @type {Message[]} the turns that completed, sent with every request */
let turns = [];
/** @type {Attachment|null} the image the next question carries */
let attached = null;

/**
 * The page's toy tool. mock-tools calls the first tool it is given with
 * {"query": the prompt's first three words}, so a prompt like "12 * 7" works.
 * @type {Tool}
 */
const calculator = {
  name: 'calculator',
  description: 'Evaluates an arithmetic expression: numbers, + - * / % ^ and parentheses.',
  input_schema: {
    type: 'object',
    properties: { query: { type: 'string', description: 'the expression, for example 12 * (3 + 4)' } },
    required: ['query'],
  },
};
/** Tool rounds one question may take before the page stops calling the model. */
const maxToolRounds = 4;
/** The reasoning budget when Reasoning is ticked (the protocol's minimum). */
const reasoningBudget = 1024;
/** Images larger than this are scaled down before sending (the request frame limit is 256 KiB by default). */
const maxImageBytes = 150_000;
/** The longest side of a scaled-down image, in pixels. */
const scaledImageSide = 1024;
/** The questions an empty conversation offers, with the options each sets (a model the app does not allow: its default). */
const examples = [
  { text: 'Where is gate B12?', note: 'Markdown with mock-markdown', model: 'mock-markdown', tools: false, reasoning: false },
  { text: 'How long does boarding take?', note: 'a streamed answer', model: '', tools: false, reasoning: false },
  { text: '12 * 7 please', note: 'with Calculator and mock-tools', model: 'mock-tools', tools: true, reasoning: false },
  { text: 'Which gate for Oslo?', note: 'with Reasoning and mock-reasoning', model: 'mock-reasoning', tools: false, reasoning: true },
];
/** The tallest the message box grows, in pixels, before it scrolls. */
const maxPromptHeight = 192;
/** @type {WeakMap<HTMLElement, Call>} the call each assistant turn shows */
const turnCalls = new WeakMap();

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
    saved.signIn({ sub, tenantApp: select.value });
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
  // A reload keeps the dev sign-in of this tab (and its conversation: startChat).
  const last = saved.lastSignIn();
  if (last && apps.some((a) => `${a.tenant}/${a.app}` === last.tenantApp)) {
    select.value = last.tenantApp;
    /** @type {HTMLInputElement} */ ($('user')).value = last.sub;
    /** @type {HTMLFormElement} */ ($('signin-form')).requestSubmit();
    return;
  }
  /** @type {HTMLInputElement} */ ($('user')).focus();
}

/**
 * What a reload of this tab keeps (sessionStorage: the tab's own, gone
 * with it): the dev sign-in and the finished turns of the conversation. A
 * full storage or one the browser refuses keeps nothing, quietly.
 */
const saved = {
  /** @param {{sub: string, tenantApp: string}} who */
  signIn(who) {
    const before = saved.lastSignIn();
    if (before && (before.sub !== who.sub || before.tenantApp !== who.tenantApp)) saved.forget();
    saved.put('jetway.signin', who);
  },
  /** @returns {{sub: string, tenantApp: string}|null} */
  lastSignIn: () => saved.get('jetway.signin'),
  /** @param {Message[]} t */
  turns: (t) => saved.put('jetway.turns', t),
  /** @returns {Message[]} */
  lastTurns: () => saved.get('jetway.turns') ?? [],
  forget() {
    try {
      sessionStorage.removeItem('jetway.signin');
      sessionStorage.removeItem('jetway.turns');
    } catch {
      // nothing kept, nothing to forget
    }
  },
  /** @param {string} key @param {unknown} v */
  put(key, v) {
    try {
      sessionStorage.setItem(key, JSON.stringify(v));
    } catch {
      // over the quota (an image, say): this reload starts afresh
    }
  },
  /** @param {string} key */
  get(key) {
    try {
      return JSON.parse(sessionStorage.getItem(key) ?? 'null');
    } catch {
      return null;
    }
  },
};

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
    startChat(getToken, null);
  } catch (err) {
    showBanner(`Sign-in failed: ${err instanceof Error ? err.message : err}`);
  }
}

// ---------------------------------------------------------------------------
// Chat.

/**
 * @param {GetToken} getToken
 * @param {string[]|null} models the app's allowlist (null: ask the gateway's GET /v1/models)
 */
function startChat(getToken, models) {
  if (models) showModels(models);
  else listModels(getToken).then(showModels);

  turns = [];
  $('conversation').replaceChildren();
  $('quota').textContent = '';
  resetStanding();
  showExamples();
  restoreTurns(saved.lastTurns());
  $('chat').hidden = false;
  $('account').hidden = false;

  client = connect({ urls: wsURLs, getToken });
  demo.client = client;
  client.on('state', renderConnection);
  client.on('state', (ev) => {
    if ((ev.state === 'connecting' || ev.state === 'reconnecting') && ev.error && ev.url) explainFailure(getToken, ev.url);
  });
  client.on('ready', (r) => {
    $('who').textContent = `${r.user} · ${r.tenant} / ${r.app}`;
    refreshStanding(); // on load, and after a reconnect (maybe to another gateway)
    explaining = false;
    delete $('conn').dataset.why;
    hideBanner();
  });
  client.on('error', (e) => showBanner(e.message || e.code));
  renderConnection({ state: 'connecting', url: wsURLs[0] });
  /** @type {HTMLTextAreaElement} */ ($('prompt')).focus();
}

/**
 * The call whose answer is streaming, if any: while it streams the
 * composer's button is Stop (Enter does not send over it), then Send again.
 * @type {Call|null}
 */
let streaming = null;

/** @param {Call|null} call the call now streaming, or null */
function setStreaming(call) {
  streaming = call;
  const b = /** @type {HTMLButtonElement} */ ($('send'));
  b.dataset.mode = call ? 'stop' : 'send';
  b.title = call ? 'Stop this answer' : 'Send (Enter)';
  b.querySelector('.visually-hidden').textContent = call ? 'Stop' : 'Send';
  b.querySelector('svg').outerHTML = call ? icons.stopLarge : icons.send;
}

// While an answer streams the button stops it (before the form would check
// the empty box); Enter in the box sends nothing and keeps the text.
$('send').addEventListener('click', (ev) => {
  if (!streaming) return;
  ev.preventDefault();
  streaming.cancel();
});

$('ask').addEventListener('submit', (ev) => {
  ev.preventDefault();
  if (streaming) return;
  const input = /** @type {HTMLTextAreaElement} */ ($('prompt'));
  const text = input.value.trim();
  if (!text || !client) return;
  input.value = '';
  fitPrompt();
  const image = attached;
  clearAttachment();
  ask(client, text, image, {
    model: /** @type {HTMLSelectElement} */ ($('model')).value,
    tools: /** @type {HTMLInputElement} */ ($('use-tools')).checked,
    reasoning: /** @type {HTMLInputElement} */ ($('use-reasoning')).checked,
  });
});

// The message box grows with its text, up to maxPromptHeight.
$('prompt').addEventListener('input', fitPrompt);

function fitPrompt() {
  const input = /** @type {HTMLTextAreaElement} */ ($('prompt'));
  input.style.height = 'auto';
  input.style.height = `${Math.min(input.scrollHeight, maxPromptHeight)}px`;
}

// Enter sends, Shift+Enter starts a new line.
$('prompt').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    /** @type {HTMLFormElement} */ ($('ask')).requestSubmit();
  }
});

$('signout').addEventListener('click', () => {
  saved.forget();
  client?.close();
  location.reload();
});

$('attach').addEventListener('change', async () => {
  const input = /** @type {HTMLInputElement} */ ($('attach'));
  const file = input.files?.[0];
  if (!file) return;
  try {
    const block = await imageBlock(await fitImage(file));
    attached = { block, url: `data:image/${block.format};base64,${block.data}`, name: file.name };
    /** @type {HTMLImageElement} */ ($('attachment-thumb')).src = attached.url;
    $('attachment-name').textContent = `${file.name} · ${Math.ceil((block.data.length * 3) / 4 / 1024)} KB`;
    $('attachment').hidden = false;
    hideBanner();
  } catch (err) {
    clearAttachment();
    showBanner(`Cannot attach ${file.name}: ${err instanceof Error ? err.message : err}`);
  }
  input.value = ''; // the same file can be chosen again
});

$('attachment-remove').addEventListener('click', clearAttachment);

function clearAttachment() {
  attached = null;
  $('attachment').hidden = true;
  /** @type {HTMLImageElement} */ ($('attachment-thumb')).removeAttribute('src');
}

/**
 * A large image scaled down (longest side scaledImageSide, JPEG) so that the
 * request fits the gateway's frame limit; small ones as they are.
 * @param {File} file
 * @returns {Promise<Blob>}
 */
async function fitImage(file) {
  if (file.size <= maxImageBytes) return file;
  const bitmap = await createImageBitmap(file);
  const scale = Math.min(1, scaledImageSide / Math.max(bitmap.width, bitmap.height));
  const canvas = document.createElement('canvas');
  canvas.width = Math.max(1, Math.round(bitmap.width * scale));
  canvas.height = Math.max(1, Math.round(bitmap.height * scale));
  /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d')).drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  bitmap.close();
  const blob = await new Promise((resolve) => canvas.toBlob(resolve, 'image/jpeg', 0.85));
  if (!blob) throw new Error('the image could not be scaled down');
  return blob;
}

/**
 * Sends one question (with its image, if any) and renders the answers: when
 * the model calls the calculator, the page runs it and sends the result
 * back until the model answers in text.
 * @param {Client} c
 * @param {string} text
 * @param {Attachment|null} image
 * @param {AskOptions} opts
 */
function ask(c, text, image, opts) {
  const q = el('li', 'turn user');
  q.append(el('p', 'who visually-hidden', 'You'));
  if (image) {
    const thumb = /** @type {HTMLImageElement} */ (el('img', 'thumb'));
    thumb.src = image.url;
    thumb.alt = `Attached image ${image.name}`;
    q.append(thumb);
  }
  q.append(el('div', 'text', text));
  $('conversation').append(q);
  $('empty').hidden = true;
  /** @type {Message} */
  const message = { role: 'user', content: image ? [image.block, { type: 'text', text }] : text };
  // The calculator is offered when it is ticked. A question's tool rounds
  // stay within it (the conversation keeps only its final answer), so a
  // later question without the tool needs none.
  /** @type {Question} */
  const question = { li: q, before: turns, message, tools: opts.tools ? [calculator] : undefined, opts };
  answer(c, question, [...turns, message], 0);
}

/**
 * Shows the finished turns a reload kept, and continues the conversation
 * from them.
 * @param {Message[]} kept
 */
function restoreTurns(kept) {
  if (kept.length === 0) return;
  for (const m of kept) {
    const blocks = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content ?? [];
    const text = blocks.filter((b) => b.type === 'text').map((b) => /** @type {{text: string}} */ (b).text).join('\n');
    const li = el('li', `turn ${m.role === 'user' ? 'user' : 'assistant'}`);
    if (m.role === 'user') {
      li.append(el('p', 'who visually-hidden', 'You'), el('div', 'text', text));
    } else {
      li.dataset.state = 'done';
      li.dataset.restored = '';
      const body = el('div', 'text markdown');
      renderMarkdown(body, text);
      labelCode(body);
      const actions = el('div', 'actions');
      actions.append(el('p', 'meta', 'Kept from before the reload'));
      li.append(el('p', 'who', 'Assistant'), body, actions);
    }
    $('conversation').append(li);
  }
  turns = kept;
  $('empty').hidden = true;
  scrollToEnd();
}

/**
 * Asks a question again, as a new request (a new request id): its answers
 * and every later turn are replaced.
 * @param {Question} question
 */
function retryAnswer(question) {
  if (!client) return;
  for (let next = question.li.nextElementSibling; next; next = question.li.nextElementSibling) {
    const call = turnCalls.get(/** @type {HTMLElement} */ (next));
    if (call && !call.done && !call.error) call.cancel();
    next.remove();
  }
  turns = question.before;
  answer(client, question, [...question.before, question.message], 0);
}

/**
 * One model call: streams it into a new assistant turn; a tool_use stop
 * runs the tools and calls the model again with their results.
 * @param {Client} c
 * @param {Question} question
 * @param {Message[]} messages the question's conversation so far
 * @param {number} round tool rounds so far
 */
function answer(c, question, messages, round) {
  const { tools, opts } = question;
  const a = el('li', 'turn assistant');
  a.dataset.state = 'waiting';
  a.setAttribute('aria-busy', 'true');
  const who = el('p', 'who', 'Assistant');
  const view = new AnswerView();
  const actions = el('div', 'actions');
  const stop = action('stop', 'Stop', 'Stop this answer', icons.stop);
  const meta = el('p', 'meta', 'Waiting for the gateway…');
  actions.append(stop, meta);
  a.append(who, ...view.elements, actions);
  $('conversation').append(a);
  scrollToEnd();

  /** Copy and Retry, for the answer that ends the question. */
  const offerActions = () => {
    const copy = action('copy', 'Copy', 'Copy the answer', icons.copy);
    copy.addEventListener('click', () => copyAnswer(copy, call.text));
    const retry = action('retry', 'Retry', 'Ask this again (a new request)', icons.retry);
    retry.addEventListener('click', () => retryAnswer(question));
    actions.prepend(copy, retry);
  };

  const reasoning = opts.reasoning ? { budget_tokens: reasoningBudget } : undefined;
  const call = c.send({ messages, model: opts.model || undefined, tools, reasoning }, {
    onAccepted: (acc) => {
      a.dataset.state = 'streaming';
      a.dataset.requestId = call.id;
      who.replaceChildren(el('span', 'visually-hidden', 'Assistant · '), `${acc.model}${acc.cached ? ' (cached)' : ''}`);
      meta.textContent = 'Answering…';
      renderQuota(acc.quota);
    },
    onChunk: () => view.update(call),
    onDone: (done) => {
      const follow = nearEnd();
      view.finish(call);
      a.dataset.state = 'done';
      a.dataset.stopReason = done.stop_reason;
      a.removeAttribute('aria-busy');
      stop.remove();
      const parts = [`First token ${call.ttftMs} ms`, `${seconds(call.latencyMs ?? 0)} total`, `${done.usage.output_tokens} tokens`];
      if (call.stats.resumes > 0) parts.push(`resumed after ${plural(call.stats.resumes, 'reconnect')}`);
      if (call.stats.resends > 0) parts.push(`sent ${plural(call.stats.resends + 1, 'time')}`);
      meta.textContent = parts.join(' · ');
      meta.title = `Measured by the gateway: first token ${done.ttft_ms} ms, total ${done.latency_ms} ms`;
      if (done.stop_reason === 'tool_use' && tools) {
        if (round >= maxToolRounds) {
          const box = el('p', 'error', `Stopped: the model asked for tools ${maxToolRounds} times in a row.`);
          box.setAttribute('role', 'alert');
          actions.before(box);
          offerActions();
        } else {
          const results = toolCalls(done).map((use) => view.ran(use, runTool(use)));
          answer(c, question, [...messages, ...nextTurn(done, results)], round + 1);
        }
      } else {
        turns = [...question.before, question.message, { role: 'assistant', content: done.text }];
        saved.turns(turns);
        offerActions();
      }
      if (streaming === call) setStreaming(null);
      if (follow) scrollToEnd();
      standingAfterAnswer();
    },
    onError: (err) => {
      const follow = nearEnd();
      view.finish(call);
      a.dataset.code = err.code;
      a.removeAttribute('aria-busy');
      stop.remove();
      // view.finish painted call.text: jetway.js keeps the longer of what
      // arrived and what an interrupted terminal saved, so it never shrinks.
      meta.textContent = call.ttftMs !== null ? `First token ${call.ttftMs} ms · stopped after ${seconds(call.latencyMs ?? 0)}` : '';
      if (err.code === 'cancelled') {
        // The user stopped it: a quiet note, not an error.
        a.dataset.state = 'stopped';
        actions.before(el('p', 'note', 'Stopped'));
      } else {
        a.dataset.state = 'error';
        const box = el('p', 'error');
        box.setAttribute('role', 'alert');
        actions.before(box);
        renderError(box, err);
      }
      // Retry (for an interrupted answer too: the server died mid-answer)
      // asks the question again as a new request.
      offerActions();
      if (streaming === call) setStreaming(null);
      if (follow) scrollToEnd();
      standingAfterAnswer();
    },
  });
  turnCalls.set(a, call);
  stop.addEventListener('click', () => call.cancel());
  setStreaming(call);
}

/**
 * A small button under an answer.
 * @param {string} cls
 * @param {string} label
 * @param {string} title
 * @param {string} icon SVG markup (the page's own constants)
 */
function action(cls, label, title, icon) {
  const b = /** @type {HTMLButtonElement} */ (el('button', `icon-action ${cls}`));
  b.type = 'button';
  b.title = title;
  b.innerHTML = icon;
  b.append(el('span', 'label', label));
  return b;
}

/** Icons of the answer actions (fixed markup, never model text). */
const icons = {
  stop: '<svg aria-hidden="true" viewBox="0 0 24 24" width="14" height="14"><rect x="6" y="6" width="12" height="12" rx="2" fill="currentColor"/></svg>',
  stopLarge: '<svg aria-hidden="true" viewBox="0 0 24 24" width="20" height="20"><rect x="6" y="6" width="12" height="12" rx="2" fill="currentColor"/></svg>',
  send: '<svg aria-hidden="true" viewBox="0 0 24 24" width="20" height="20" fill="none" stroke="currentColor" stroke-width="2.2" stroke-linecap="round" stroke-linejoin="round"><path d="M12 19V5M5 12l7-7 7 7"/></svg>',
  copy: '<svg aria-hidden="true" viewBox="0 0 24 24" width="15" height="15" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><rect x="9" y="9" width="12" height="12" rx="2"/><path d="M5 15H4a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1h10a1 1 0 0 1 1 1v1"/></svg>',
  retry: '<svg aria-hidden="true" viewBox="0 0 24 24" width="15" height="15" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><path d="M3 12a9 9 0 0 1 15.5-6.2L21 8"/><path d="M21 3v5h-5"/><path d="M21 12a9 9 0 0 1-15.5 6.2L3 16"/><path d="M3 21v-5h5"/></svg>',
};

/**
 * Copies an answer's text (its Markdown) and says so on the button.
 * @param {HTMLButtonElement} button
 * @param {string} text
 */
async function copyAnswer(button, text) {
  const label = /** @type {HTMLElement} */ (button.querySelector('.label'));
  try {
    await navigator.clipboard.writeText(text);
    label.textContent = 'Copied';
    button.dataset.done = '';
  } catch {
    label.textContent = 'Copy failed';
  }
  setTimeout(() => {
    label.textContent = 'Copy';
    delete button.dataset.done;
  }, copiedForMs);
}

/**
 * Gives every code block of a rendered answer a header: its language (the
 * fence's info string, as marked puts it in the class) and a Copy button
 * for its text.
 * @param {Element} box
 */
function labelCode(box) {
  for (const code of box.querySelectorAll('pre > code')) {
    const pre = /** @type {HTMLElement} */ (code.parentElement);
    const lang = /language-([\w+#.-]{1,24})/.exec(code.className)?.[1] ?? 'code';
    const head = el('div', 'code-head');
    const copy = action('code-copy', 'Copy', 'Copy this code', icons.copy);
    copy.addEventListener('click', () => copyAnswer(copy, code.textContent ?? ''));
    head.append(el('span', 'code-lang', lang), copy);
    const block = el('div', 'code-block');
    pre.replaceWith(block);
    block.append(head, pre);
  }
}

/** How long a Copy button says Copied. */
const copiedForMs = 1500;

/** Fills the empty conversation's example questions. */
function showExamples() {
  const list = $('examples');
  list.replaceChildren();
  for (const ex of examples) {
    const b = /** @type {HTMLButtonElement} */ (el('button', 'example', ex.text));
    b.type = 'button';
    b.append(el('small', '', ex.note));
    b.addEventListener('click', () => {
      // The card asks what it says: its model (when the app allows it), its tools and reasoning.
      const select = /** @type {HTMLSelectElement} */ ($('model'));
      select.value = [...select.options].some((o) => o.value === ex.model) ? ex.model : '';
      /** @type {HTMLInputElement} */ ($('use-tools')).checked = ex.tools;
      /** @type {HTMLInputElement} */ ($('use-reasoning')).checked = ex.reasoning;
      /** @type {HTMLTextAreaElement} */ ($('prompt')).value = ex.text;
      /** @type {HTMLFormElement} */ ($('ask')).requestSubmit();
    });
    const li = document.createElement('li');
    li.append(b);
    list.append(li);
  }
  $('empty').hidden = false;
}

/**
 * Renders one call's answer as it streams: its reasoning in a <details>
 * (open while it streams, closed once done), its text as Markdown, its
 * tool calls with their input as it arrives. Streamed updates are batched
 * (renderEveryMs), the final one is immediate.
 */
class AnswerView {
  constructor() {
    this.reasoning = /** @type {HTMLDetailsElement} */ (el('details', 'reasoning'));
    this.reasoning.hidden = true;
    this.summary = el('summary', '', 'Reasoning…');
    this.thought = el('div', 'thought');
    this.reasoning.append(this.summary, this.thought);
    this.body = el('div', 'text markdown');
    this.tools = el('div', 'tools');
    /** @type {HTMLElement[]} */
    this.elements = [this.reasoning, this.body, this.tools];
    /** @type {Map<string, HTMLElement>} tool call cards by block index */
    this.cards = new Map();
    this.shown = '';
    /** @type {ReturnType<typeof setTimeout>|undefined} */
    this.timer = undefined;
  }

  /** @param {Call} call */
  update(call) {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const follow = nearEnd();
      this.paint(call);
      if (follow) scrollToEnd();
    }, renderEveryMs);
  }

  /** @param {Call} call */
  finish(call) {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.paint(call);
    this.reasoning.open = false;
    const words = this.thought.textContent?.split(/\s+/).filter(Boolean).length ?? 0;
    this.summary.textContent = `Reasoning · ${plural(words, 'word')}`;
  }

  /** @param {string} markdown */
  text(markdown) {
    if (markdown === this.shown) return;
    this.shown = markdown;
    renderMarkdown(this.body, markdown);
    labelCode(this.body);
  }

  /** @param {Call} call */
  paint(call) {
    let thought = '';
    call.blocks.forEach((b, i) => {
      if (b.type === 'reasoning') {
        thought += b.text;
      } else if (b.type === 'tool_use') {
        let card = this.cards.get(String(i));
        if (!card) {
          card = el('div', 'tool-call');
          card.append(el('span', 'tool-name'), el('code', 'tool-input'), el('span', 'tool-result'));
          this.cards.set(String(i), card);
          this.tools.append(card);
        }
        card.dataset.id = b.id;
        /** @type {HTMLElement} */ (card.querySelector('.tool-name')).textContent = `Calls ${b.name}`;
        /** @type {HTMLElement} */ (card.querySelector('.tool-input')).textContent = b.inputJSON;
      }
    });
    if (thought) {
      if (this.reasoning.hidden) {
        this.reasoning.hidden = false;
        this.reasoning.open = true;
      }
      this.thought.textContent = thought;
    }
    this.text(call.text);
  }

  /**
   * Shows what the page's tool returned for a call; returns the result.
   * @param {ToolUseBlock} call
   * @param {ToolResult} result
   */
  ran(call, result) {
    const card = [...this.cards.values()].find((c) => c.dataset.id === call.id);
    const out = card?.querySelector('.tool-result');
    if (card && out) {
      card.dataset.status = result.status ?? 'success';
      out.textContent = `→ ${result.content}`;
    }
    return result;
  }
}

/** How often a streaming answer is rendered again, at most. */
const renderEveryMs = 30;

/**
 * Runs the page's tool for a call of the model.
 * @param {ToolUseBlock} call
 * @returns {ToolResult}
 */
function runTool(call) {
  if (call.name !== calculator.name) return { tool_use_id: call.id, content: `There is no tool ${call.name}.`, status: 'error' };
  const query = call.input.query;
  try {
    if (typeof query !== 'string') throw new Error('the input has no query');
    return { tool_use_id: call.id, content: String(calculate(query)) };
  } catch (err) {
    return { tool_use_id: call.id, content: `Cannot calculate ${JSON.stringify(query)}: ${err instanceof Error ? err.message : err}`, status: 'error' };
  }
}

/**
 * Evaluates an arithmetic expression (numbers, + - * / % ^, parentheses,
 * unary minus) without eval.
 * @param {string} expr
 * @returns {number}
 */
function calculate(expr) {
  const tokens = expr.match(/\d+(?:\.\d+)?|[-+*/%^()]|\S/g) ?? [];
  let i = 0;
  const peek = () => tokens[i];
  const take = () => tokens[i++];
  /** @returns {number} */
  const sum = () => {
    let v = product();
    while (peek() === '+' || peek() === '-') v = take() === '+' ? v + product() : v - product();
    return v;
  };
  /** @returns {number} */
  const product = () => {
    let v = power();
    for (let op = peek(); op === '*' || op === '/' || op === '%'; op = peek()) {
      take();
      const r = power();
      v = op === '*' ? v * r : op === '/' ? v / r : v % r;
    }
    return v;
  };
  /** @returns {number} */
  const power = () => {
    const b = unary();
    if (peek() !== '^') return b;
    take();
    return b ** power();
  };
  /** @returns {number} */
  const unary = () => {
    if (peek() === '-') {
      take();
      return -unary();
    }
    if (peek() === '+') take();
    const t = take();
    if (t === '(') {
      const v = sum();
      if (take() !== ')') throw new Error('a ) is missing');
      return v;
    }
    if (t === undefined || !/^\d/.test(t)) throw new Error(t === undefined ? 'it ends too soon' : `unexpected ${JSON.stringify(t)}`);
    return Number(t);
  };
  const v = sum();
  if (i < tokens.length) throw new Error(`unexpected ${JSON.stringify(tokens[i])}`);
  if (!Number.isFinite(v)) throw new Error('the result is not a finite number');
  return v;
}

/** @param {string[]} models */
function showModels(models) {
  const select = /** @type {HTMLSelectElement} */ ($('model'));
  select.replaceChildren(new Option('App default', ''));
  for (const m of models) select.add(new Option(m, m));
  select.disabled = models.length === 0;
}

/**
 * The models the signed-in app may use, from the gateway's GET /v1/models
 * (the OpenAI-compatible door: the default model, then the allowlist);
 * empty when it cannot say.
 * @param {GetToken} getToken
 * @returns {Promise<string[]>}
 */
async function listModels(getToken) {
  try {
    const token = await getToken({ force: false, reason: 'connect' });
    const r = await fetch('/v1/models', { headers: { authorization: `Bearer ${token}` } });
    if (!r.ok) return [];
    /** @type {{data: Array<{id: string}>}} */
    const body = await r.json();
    return [...new Set(body.data.map((m) => m.id))];
  } catch {
    return [];
  }
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
    busy: 'The gateway is busy.',
    model_unavailable: 'The model is unavailable right now.',
    timeout: 'The model took too long.',
    interrupted: 'The answer was interrupted.',
    unauthorized: 'Your sign-in expired.',
  };
  const lead = words[err.code] ?? `${err.message || 'Something went wrong'}.`;
  const ms = err.retryAfterMs;
  if (!ms || ms <= 0) {
    box.textContent = err.retryable ? `${lead} You can send it again.` : lead;
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

// ---------------------------------------------------------------------------
// The standing: every limit of the signed-in user, what is used and left.

/**
 * How long after an answer the page reads the standing once more: the
 * gateway settles an answer's charge just after its terminal frame, and
 * until then `used` holds the reservation (the input estimate plus
 * max_tokens), so the read at the answer's end may show more than it cost.
 */
const settledAfterMs = 2000;

/** A read of the standing is under way; another asked for meanwhile runs after it. */
let standingReading = false;
let standingAgain = false;
/** @type {ReturnType<typeof setTimeout>|undefined} */
let standingTimer;

function resetStanding() {
  clearTimeout(standingTimer);
  demo.standing = null;
  const panel = $('standing');
  panel.dataset.state = 'loading';
  delete panel.dataset.code;
  $('standing-summary').textContent = 'Loading…';
  $('standing-list').replaceChildren();
  $('standing-note').textContent = '';
  $('standing-flag').hidden = true;
  $('standing-disabled').hidden = true;
}

/** Reads the standing after an answer ended, and again once its charge has settled. */
function standingAfterAnswer() {
  refreshStanding();
  clearTimeout(standingTimer);
  standingTimer = setTimeout(refreshStanding, settledAfterMs);
}

/**
 * Where the page asks for the standing: the socket's gateway (jetway.js's
 * default) when the page's CSP lets it (this page's origin or https), else
 * this page's own gateway (dev mode with ?ws= naming another ws:// origin;
 * in a fleet every gateway reads the same quota store).
 * @param {Client} c
 * @returns {string|undefined}
 */
function standingURL(c) {
  try {
    const ws = new URL(c.url ?? wsURLs[0]);
    if (ws.protocol === 'wss:' || ws.host === location.host) return undefined;
  } catch {
    // not a URL: connect() refused it already
  }
  return new URL('/v1/me', location.href).href;
}

/** Reads the standing with the signed-in user's token and shows it (one read at a time). */
async function refreshStanding() {
  const c = client;
  if (!c) return;
  if (standingReading) {
    standingAgain = true;
    return;
  }
  standingReading = true;
  try {
    do {
      standingAgain = false;
      try {
        const me = await c.me({ url: standingURL(c) });
        if (client === c) renderStanding(me);
      } catch (err) {
        if (client === c) renderStandingError(/** @type {JetwayError} */ (err));
      }
      demo.standingReads++;
    } while (standingAgain && client === c);
  } finally {
    standingReading = false;
  }
}

/** @type {Record<string, string>} */
const scopeWords = { tenant: 'Tenant', app: 'App', user: 'User' };
/** @type {Record<string, string>} */
const windowWords = { minute: 'per-minute', hour: 'hourly', day: 'daily', month: 'monthly' };

/**
 * An entry's measure and its limit in it.
 * @param {StandingEntry} e
 * @returns {{measure: 'tokens'|'requests'|'usd', limit: number}}
 */
function measureOf(e) {
  if (e.tokens !== undefined) return { measure: 'tokens', limit: e.tokens };
  if (e.requests !== undefined) return { measure: 'requests', limit: e.requests };
  return { measure: 'usd', limit: e.usd ?? 0 };
}

/**
 * An amount in its measure, as people read it.
 * @param {number} n
 * @param {string} measure
 */
function amount(n, measure) {
  return measure === 'usd'
    ? n.toLocaleString(undefined, { style: 'currency', currency: 'USD', maximumFractionDigits: n < 1 ? 4 : 2 })
    : Math.round(n).toLocaleString();
}

/** @param {Standing} me */
function renderStanding(me) {
  demo.standing = me;
  const panel = /** @type {HTMLDetailsElement} */ ($('standing'));
  panel.dataset.state = 'ok';
  delete panel.dataset.code;
  panel.dataset.disabled = String(me.disabled);
  $('standing-flag').hidden = !me.disabled;
  $('standing-disabled').hidden = !me.disabled;
  if (me.disabled) panel.open = true;

  const items = me.limits.map((e) => {
    const { measure, limit } = measureOf(e);
    const share = limit > 0 ? e.used / limit : 1;
    const li = el('li', 'limit');
    li.dataset.scope = e.scope;
    li.dataset.window = e.window;
    li.dataset.measure = measure;
    li.dataset.level = share >= 1 ? 'bad' : share >= 0.8 ? 'warn' : 'ok';
    const name = el('span', 'limit-name', `${scopeWords[e.scope] ?? e.scope} · ${windowWords[e.window] ?? e.window} ${measure === 'usd' ? 'USD' : measure}`);
    const used = el('span', 'limit-used');
    used.append(el('span', 'used', amount(e.used, measure)), ariaHidden(' / '), el('span', 'visually-hidden', ' used of '),
      el('span', 'cap', amount(limit, measure)));
    const head = el('div', 'limit-row');
    head.append(name, used);
    const bar = el('div', 'limit-bar');
    bar.setAttribute('aria-hidden', 'true');
    const fill = el('span', '');
    fill.style.width = `${Math.min(100, Math.max(0, share * 100))}%`;
    bar.append(fill);
    const left = el('span', 'left');
    left.append(el('span', 'remaining', amount(e.remaining, measure)), ' left');
    const resets = el('span', 'resets', 'resets ');
    const at = /** @type {HTMLTimeElement} */ (el('time', '', resetTime(e.resets_at)));
    at.dateTime = e.resets_at;
    at.title = new Date(e.resets_at).toLocaleString();
    resets.append(at);
    const foot = el('div', 'limit-row limit-foot');
    foot.append(left, resets);
    li.append(head, bar, foot);
    return { li, share, e, measure, limit };
  });
  $('standing-list').replaceChildren(...items.map((i) => i.li));

  // The summary names the limit closest to its end; of equals, the
  // narrowest (listed last: tenant, app, user).
  const tightest = items.reduce((/** @type {typeof items[0]|null} */ a, b) => (a && a.share > b.share ? a : b), null);
  $('standing-summary').textContent = tightest
    ? `${tightest.e.scope} ${tightest.e.window}: ${amount(tightest.e.used, tightest.measure)} / ${amount(tightest.limit, tightest.measure)} ${tightest.measure === 'usd' ? 'USD' : tightest.measure}`
    : 'no limits';
  $('standing-note').textContent = `Updated ${new Date().toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' })}`;
}

/** @param {JetwayError} err */
function renderStandingError(err) {
  const panel = $('standing');
  panel.dataset.state = 'error';
  panel.dataset.code = err.code;
  const why = `Usage could not be read: ${err.message || err.code}`;
  if (!demo.standing) $('standing-summary').textContent = 'unavailable';
  $('standing-note').textContent = demo.standing ? `${why}. Showing the last reading.` : `${why}.`;
}

/**
 * When a window resets, as people say it: the time today, else the date too.
 * @param {string} iso
 */
function resetTime(iso) {
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return iso;
  const time = { hour: '2-digit', minute: '2-digit' };
  return at.toDateString() === new Date().toDateString()
    ? at.toLocaleTimeString([], /** @type {Intl.DateTimeFormatOptions} */ (time))
    : at.toLocaleString([], /** @type {Intl.DateTimeFormatOptions} */ ({ month: 'short', day: 'numeric', ...time }));
}

/** @param {string} text shown, but not read out (a screen reader gets a wording of its own) */
function ariaHidden(text) {
  const s = el('span', '', text);
  s.setAttribute('aria-hidden', 'true');
  return s;
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

/** An explanation of failing attempts is on its way or shown (until `ready`). */
let explaining = false;

/**
 * Says why connecting fails: a browser shows a refused WebSocket upgrade
 * (401, 403) as a bare close, so the page asks the same gateway's HTTP door
 * with the same token, once per run of failures. A refused token reads as
 * the gateway's reason; a token that is accepted there points at the
 * Origin; no answer at all, at the address or the Origin (CORS).
 * @param {GetToken} getToken
 * @param {string} wsURL
 */
async function explainFailure(getToken, wsURL) {
  if (explaining) return;
  explaining = true;
  const where = host(wsURL);
  const origin = `this page's origin (${location.origin}) may not be in its JETWAY_ALLOWED_ORIGINS`;
  /** @type {string} */
  let why;
  try {
    const token = await getToken({ force: false, reason: 'connect' });
    const probe = new URL(wsURL);
    probe.protocol = probe.protocol === 'wss:' ? 'https:' : 'http:';
    probe.pathname = '/v1/models';
    probe.search = '';
    try {
      const r = await fetch(probe, { headers: { authorization: `Bearer ${token}` } });
      if (r.status === 401 || r.status === 403) why = `${where} refused the sign-in: ${await errorText(r)}`;
      else if (r.ok) why = `${where} accepts the sign-in but refused the connection: ${origin}`;
      else why = `${where} answered ${r.status}: ${await errorText(r)}`;
    } catch {
      why = `${where} refused the connection, and its HTTP door did not answer this page to say why: it cannot be reached, or ${origin}`;
    }
  } catch (err) {
    why = `${err instanceof Error ? err.message : err}`;
    if (!/^sign-in failed/i.test(why)) why = `sign-in failed: ${why}`;
  }
  if (client && client.state !== 'connected' && explaining) {
    $('conn').dataset.why = why;
    showBanner(`Cannot connect: ${why}. Still trying.`);
  }
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
