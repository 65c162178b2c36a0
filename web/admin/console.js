// @ts-check
// The Jetway admin console: tenants and apps, user overrides, usage charts
// and the audit trail, through the admin API v1 (docs/admin.md) of the
// gateway that serves it. It signs in as the demo page does: dev tokens
// (with an admin group) in dev mode, the Cognito hosted UI in production.
// Every write is a whole document sent with If-Match (its ETag) or, to
// create, If-None-Match: *; a stale version (412) is shown as a conflict
// with a Reload action. See web/README.md, "The admin console".

/**
 * @typedef {{window?: string, tokens?: number, requests?: number, usd?: number, alerts?: number[]}} Limit
 * @typedef {{status: number, ok: boolean, etag: string, body: any, error: {code: string, message: string, field?: string}|null}} Answer
 * @typedef {(o: {force: boolean}) => Promise<string>} GetToken
 * @typedef {{tenant: string, app: string, models: string[]}} DevApp
 * @typedef {{domain?: string, client_id?: string, redirect_uri?: string, scopes?: string}} CognitoSettings
 */

/** Where the admin API is. */
const apiBase = '/v1/admin';
/** Lifetime asked of a dev token, in seconds. */
const devTTL = 3600;
/** A token is renewed this long before it expires. */
const refreshBeforeMs = 60_000;
/** The most pages of user overrides read for one app (100 a page). */
const maxUserPages = 100;
/** Users named in the usage charts; the rest add up as "others". */
const topUsers = 5;
/** A limit's windows (docs/configuration.md, "The tenants file"). */
const windows = ['minute', 'hour', 'day', 'month'];
/** Series colours, readable on light and dark backgrounds. */
const palette = ['#4f7df3', '#f59e0b', '#10b981', '#ef4444', '#8b5cf6', '#06b6d4', '#ec4899', '#84cc16', '#94a3b8'];

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const numberFormat = new Intl.NumberFormat('en-US');
const usdFormat = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD', minimumFractionDigits: 2, maximumFractionDigits: 6 });

/** What the console knows; window.jetwayConsole exposes it for debugging and the browser tests. */
const state = {
  /** @type {GetToken|null} */
  getToken: null,
  sub: '',
  /** @type {string[]} */
  groups: [],
  /** @type {{id: string, version?: string}[]} */
  tenants: [],
  /** @type {string[]|null} the model catalogue's ids (jetway:admin only) */
  models: null,
  /** counts route changes: an answer for an older one is not shown */
  navigation: 0,
  /** @type {{labels: string[], series: {name: string, tokens: number[], cost: number[], requests: number[]}[], users: {name: string, tokens: number, cost: number}[], by: string}|null} */
  usage: null,
  /** @type {Record<string, any>} the charts drawn (Chart.js instances) */
  charts: {},
  /** @type {{method: string, path: string, status: number}[]} every write and its answer, newest last */
  writes: [],
  usageReads: 0,
};
// @ts-ignore: a debugging handle
window.jetwayConsole = state;

start();

async function start() {
  /** @type {{dev?: boolean, cognito?: CognitoSettings}|null} */
  const cfg = await getJSON('/config.json');
  /** @type {DevApp[]|null} */
  const apps = cfg?.dev === false ? null : ((await getJSON('/dev/apps'))?.apps ?? null);
  $('loading').hidden = true;
  if (apps) showDevSignIn(apps);
  else await showCognito(cfg?.cognito ?? {});
}

/** @param {string} path */
async function getJSON(path) {
  try {
    const r = await fetch(path, { cache: 'no-store' });
    return r.ok ? await r.json() : null;
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------
// Sign-in.

/** What a reload of this tab keeps: the dev sign-in (sessionStorage). */
const savedKey = 'jetway.admin.signin';

/** @param {DevApp[]} apps */
function showDevSignIn(apps) {
  const role = /** @type {HTMLSelectElement} */ ($('role'));
  const tenants = [...new Set(apps.map((a) => a.tenant))];
  role.add(new Option('Operator: every tenant (jetway:admin)', 'jetway:admin'));
  for (const t of tenants) role.add(new Option(`Tenant admin: ${t} (jetway:admin:${t})`, `jetway:admin:${t}`));
  const user = /** @type {HTMLInputElement} */ ($('user'));
  $('signin').hidden = false;
  $('signin-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const sub = user.value.trim();
    const error = $('signin-error');
    if (!sub) {
      error.textContent = 'Type a user name.';
      error.hidden = false;
      user.setAttribute('aria-invalid', 'true');
      return;
    }
    error.hidden = true;
    const group = role.value;
    // The token needs a client id of some app; an admin token needs no app of its own.
    const tenant = group.startsWith('jetway:admin:') ? group.slice('jetway:admin:'.length) : apps[0]?.tenant;
    const app = apps.find((a) => a.tenant === tenant) ?? apps[0];
    if (!app) {
      error.textContent = 'The tenants file has no app whose client id could sign a token.';
      error.hidden = false;
      return;
    }
    keep({ sub, group });
    /** @type {{value: string, exp: number}|null} */
    let cached = null;
    /** @type {GetToken} */
    const getToken = async ({ force }) => {
      if (!force && cached && cached.exp - Date.now() > refreshBeforeMs) return cached.value;
      const r = await fetch('/dev/token', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ sub, tenant: app.tenant, app: app.app, ttl_s: devTTL, groups: [group] }),
      });
      if (!r.ok) throw new Error(`the dev token endpoint answered ${r.status}`);
      const body = await r.json();
      cached = { value: body.token, exp: Date.now() + body.expires_in * 1000 };
      return cached.value;
    };
    $('signin').hidden = true;
    startConsole(getToken);
  });
  const last = kept();
  if (last && [...role.options].some((o) => o.value === last.group)) {
    user.value = last.sub;
    role.value = last.group;
    /** @type {HTMLFormElement} */ ($('signin-form')).requestSubmit();
    return;
  }
  user.focus();
}

/** @param {{sub: string, group: string}} who */
function keep(who) {
  try {
    sessionStorage.setItem(savedKey, JSON.stringify(who));
  } catch {
    // storage refused: a reload asks again
  }
}

/** @returns {{sub: string, group: string}|null} */
function kept() {
  try {
    return JSON.parse(sessionStorage.getItem(savedKey) ?? 'null');
  } catch {
    return null;
  }
}

/** @param {CognitoSettings} cfg */
async function showCognito(cfg) {
  // The console's callback is its own URL (it must be one of the app client's callback URLs).
  const redirect = `${location.origin}${location.pathname}`;
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
    const st = randomString(16);
    sessionStorage.setItem('jetway.admin.pkce', JSON.stringify({ verifier, state: st }));
    const challenge = base64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
    const q = new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: redirect, scope: scopes,
      state: st, code_challenge: challenge, code_challenge_method: 'S256' });
    location.assign(`${domain}/oauth2/authorize?${q}`);
  });
  const params = new URLSearchParams(location.search);
  const code = params.get('code');
  const pkce = JSON.parse(sessionStorage.getItem('jetway.admin.pkce') ?? 'null');
  if (!code || !pkce || params.get('state') !== pkce.state) return;
  sessionStorage.removeItem('jetway.admin.pkce');
  history.replaceState(null, '', location.pathname + location.hash);
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
    const first = await tokenCall({ grant_type: 'authorization_code', code, redirect_uri: redirect, code_verifier: pkce.verifier });
    let access = { value: first.access_token, exp: Date.now() + first.expires_in * 1000 };
    const refreshToken = first.refresh_token;
    /** @type {GetToken} */
    const getToken = async ({ force }) => {
      if (!force && access.exp - Date.now() > refreshBeforeMs) return access.value;
      if (!refreshToken) throw new Error('the session ended: sign in again');
      const next = await tokenCall({ grant_type: 'refresh_token', refresh_token: refreshToken });
      access = { value: next.access_token, exp: Date.now() + next.expires_in * 1000 };
      return access.value;
    };
    $('cognito').hidden = true;
    startConsole(getToken);
  } catch (err) {
    showBanner(`Sign-in failed: ${message(err)}`);
  }
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

/**
 * The claims of a JWT, unverified (for display only: the gateway verifies).
 * @param {string} token
 */
function claims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part + '='.repeat((4 - (part.length % 4)) % 4)));
  } catch {
    return {};
  }
}

/** @param {GetToken} getToken */
async function startConsole(getToken) {
  state.getToken = getToken;
  let token;
  try {
    token = await getToken({ force: false });
  } catch (err) {
    showBanner(`Sign-in failed: ${message(err)}`);
    return;
  }
  const c = claims(token);
  state.sub = c.username ?? c.sub ?? '';
  state.groups = (c['cognito:groups'] ?? []).filter((/** @type {string} */ g) => g === 'jetway:admin' || g.startsWith('jetway:admin:'));
  $('who').textContent = `${state.sub} · ${state.groups.join(', ') || 'no admin role'}`;
  $('account').hidden = false;
  $('signout').addEventListener('click', () => {
    try {
      sessionStorage.removeItem(savedKey);
    } catch {
      // nothing kept
    }
    location.assign(location.pathname);
  });
  const list = await call('GET', '/tenants');
  if (!list.ok) {
    showBanner(`The admin API refused this sign-in: ${describe(list)}`);
    return;
  }
  state.tenants = list.body.tenants;
  if (superAdmin()) {
    const m = await call('GET', '/models');
    if (m.ok) state.models = m.body.models.map((/** @type {{id: string}} */ x) => x.id);
  }
  $('nav').hidden = false;
  document.body.dataset.signedIn = 'true';
  wireUsers();
  wireUsage();
  wireAudit();
  window.addEventListener('hashchange', route);
  route();
}

function superAdmin() {
  return state.groups.includes('jetway:admin');
}

// ---------------------------------------------------------------------------
// The admin API.

/**
 * Calls the admin API; a 401 asks for a fresh token once. Never throws.
 * @param {string} method
 * @param {string} path under /v1/admin
 * @param {{body?: unknown, headers?: Record<string, string>}} [o]
 * @returns {Promise<Answer>}
 */
async function call(method, path, o = {}) {
  /** @param {boolean} force */
  const send = async (force) => {
    const token = await /** @type {GetToken} */ (state.getToken)({ force });
    /** @type {Record<string, string>} */
    const headers = { authorization: `Bearer ${token}`, ...(o.headers ?? {}) };
    if (o.body !== undefined) headers['content-type'] = 'application/json';
    return fetch(apiBase + path, { method, headers, cache: 'no-store',
      body: o.body === undefined ? undefined : JSON.stringify(o.body) });
  };
  /** @type {Response} */
  let r;
  try {
    r = await send(false);
    if (r.status === 401) r = await send(true);
  } catch (err) {
    return { status: 0, ok: false, etag: '', body: null, error: { code: 'unavailable', message: `no answer: ${message(err)}` } };
  }
  const text = await r.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: the error below carries the text
  }
  const etag = (r.headers.get('etag') ?? '').replace(/^W\//, '').replace(/"/g, '');
  const error = r.ok ? null : (body?.error ?? { code: String(r.status), message: text.slice(0, 200) || r.statusText });
  if (method !== 'GET') state.writes.push({ method, path, status: r.status });
  return { status: r.status, ok: r.ok, etag, body, error };
}

/** @param {Answer} a */
function describe(a) {
  return a.error ? `${a.status || 'no answer'} ${a.error.code}: ${a.error.message}` : String(a.status);
}

/** @param {unknown} err */
function message(err) {
  return err instanceof Error ? err.message : String(err);
}

/** @param {string} s */
const enc = (s) => encodeURIComponent(s);

// ---------------------------------------------------------------------------
// Routing: #/tenants[/t[/apps/a | /new-app]], #/users[/t/a], #/usage[/t], #/audit.

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const view = ['tenants', 'users', 'usage', 'audit'].includes(parts[0]) ? parts[0] : 'tenants';
  state.navigation++;
  for (const a of $('nav').querySelectorAll('a')) {
    if (/** @type {HTMLElement} */ (a).dataset.view === view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  for (const v of ['tenants', 'users', 'usage', 'audit']) $(`view-${v}`).hidden = v !== view;
  hideBanner();
  document.body.dataset.view = view;
  if (view === 'tenants') showTenants(parts[1], parts[2], parts[3]);
  else if (view === 'users') showUsers(parts[1], parts[2]);
  else if (view === 'usage') showUsage(parts[1]);
  else showAudit();
}

/** The default tenant of a view: the one named, else the first the caller may see. */
function pickTenant(/** @type {string|undefined} */ named) {
  return named ?? state.tenants[0]?.id ?? '';
}

/** Fills a tenant <select>. @param {HTMLSelectElement} select @param {string} value @param {string} [all] */
function fillTenants(select, value, all) {
  select.replaceChildren();
  if (all !== undefined) select.add(new Option(all, ''));
  for (const t of state.tenants) select.add(new Option(t.id, t.id));
  select.value = value;
}

async function refreshTenantList() {
  const list = await call('GET', '/tenants');
  if (list.ok) state.tenants = list.body.tenants;
}

// ---------------------------------------------------------------------------
// Tenants and apps.

/**
 * @param {string|undefined} tenant
 * @param {string|undefined} sub "apps" or "new-app"
 * @param {string|undefined} app
 */
async function showTenants(tenant, sub, app) {
  const nav = state.navigation;
  await refreshTenantList();
  if (nav !== state.navigation) return;
  const list = $('tenant-list');
  list.replaceChildren(...state.tenants.map((t) => h('li', {},
    h('a', { href: `#/tenants/${enc(t.id)}`, 'aria-current': t.id === tenant ? 'page' : null, dataset: { tenant: t.id } },
      h('span', { class: 'name' }, t.id), h('span', { class: 'version' }, `v${t.version ?? ''}`)))));
  if (!state.tenants.length) list.append(h('li', { class: 'hint' }, 'No tenants you may see.'));
  const detail = $('tenant-detail');
  if (!tenant) {
    detail.replaceChildren(h('p', { class: 'hint' }, 'Open a tenant to see and change its limits and apps.'));
    return;
  }
  detail.replaceChildren(h('p', { class: 'hint' }, 'Loading…'));
  const t = await call('GET', `/tenants/${enc(tenant)}`);
  if (nav !== state.navigation) return;
  if (!t.ok) {
    detail.replaceChildren(errorBox(`Tenant ${tenant} could not be read: ${describe(t)}`));
    return;
  }
  if (sub === 'apps' && app) showApp(detail, t, app);
  else if (sub === 'new-app') showNewApp(detail, t);
  else showTenant(detail, t);
}

/** @param {HTMLElement} detail @param {Answer} t */
function showTenant(detail, t) {
  const id = t.body.id;
  const apps = /** @type {any[]} */ (t.body.apps ?? []);
  const ed = docEditor({
    kind: 'tenant', name: id, doc: t.body, etag: t.etag, path: () => `/tenants/${enc(id)}`,
    form: (doc) => {
      const limits = limitsField('limits', 'Tenant limits', doc.limits, 'Shared by every app of the tenant.');
      return { el: h('div', {}, limits.el), read: (base) => ({ ...base, limits: limits.read() }) };
    },
    onSaved: () => refreshTenantList(),
  });
  detail.replaceChildren(
    h('div', { class: 'detail-head' }, h('h3', {}, 'Tenant ', h('span', { class: 'id' }, id)),
      h('nav', { class: 'links', 'aria-label': `More about ${id}` },
        h('a', { href: `#/usage/${enc(id)}` }, 'Usage'), h('a', { href: '#/audit', onclick: () => { auditTenant = id; } }, 'Audit'))),
    ed.el,
    h('div', { class: 'apps-head' }, h('h3', {}, 'Apps'), h('a', { class: 'primary small', href: `#/tenants/${enc(id)}/new-app`, id: 'new-app' }, 'New app')),
    h('ul', { class: 'apps', id: 'app-list' }, ...apps.map((a) => h('li', { dataset: { app: a.id } },
      h('a', { href: `#/tenants/${enc(id)}/apps/${enc(a.id)}` }, h('span', { class: 'name' }, a.id),
        h('span', { class: 'hint' }, `${a.models?.default ?? ''} · ${limitsText(a.limits)}`)),
      h('a', { class: 'ghost small', href: `#/users/${enc(id)}/${enc(a.id)}` }, 'Users')))),
  );
}

/** @param {HTMLElement} detail @param {Answer} t @param {string} appID */
async function showApp(detail, t, appID) {
  const tenant = t.body.id;
  const nav = state.navigation;
  const a = await call('GET', `/tenants/${enc(tenant)}/apps/${enc(appID)}`);
  if (nav !== state.navigation) return;
  if (!a.ok) {
    detail.replaceChildren(backLink(tenant), errorBox(`App ${appID} could not be read: ${describe(a)}`));
    return;
  }
  const ed = docEditor({
    kind: 'app', name: appID, doc: a.body, etag: a.etag, path: () => `/tenants/${enc(tenant)}/apps/${enc(appID)}`,
    form: (doc) => appForm(doc, false, modelChoices(t.body)),
    onSaved: () => refreshTenantList(),
    onDeleted: () => { location.hash = `#/tenants/${enc(tenant)}`; },
  });
  detail.replaceChildren(backLink(tenant),
    h('div', { class: 'detail-head' }, h('h3', {}, 'App ', h('span', { class: 'id' }, `${tenant} / ${appID}`)),
      h('nav', { class: 'links', 'aria-label': `More about ${appID}` },
        h('a', { href: `#/users/${enc(tenant)}/${enc(appID)}` }, 'User overrides'), h('a', { href: `#/usage/${enc(tenant)}` }, 'Usage'))),
    ed.el);
}

/** @param {HTMLElement} detail @param {Answer} t */
function showNewApp(detail, t) {
  const tenant = t.body.id;
  const ed = docEditor({
    kind: 'app', name: '', create: true, etag: '',
    doc: { client_ids: [], models: { default: (state.models ?? modelChoices(t.body))[0] ?? '' }, limits: [{ window: 'hour', tokens: 1000000 }] },
    path: (doc) => `/tenants/${enc(tenant)}/apps/${enc(doc.id ?? '')}`,
    form: (doc) => appForm(doc, true, modelChoices(t.body)),
    onSaved: (answer) => {
      refreshTenantList();
      location.hash = `#/tenants/${enc(tenant)}/apps/${enc(answer.body.id)}`;
    },
  });
  detail.replaceChildren(backLink(tenant), h('div', { class: 'detail-head' }, h('h3', {}, 'New app in ', h('span', { class: 'id' }, tenant))), ed.el);
}

/** @param {string} tenant */
function backLink(tenant) {
  return h('a', { class: 'back', href: `#/tenants/${enc(tenant)}` }, `← Tenant ${tenant}`);
}

/** The models an app form offers: the catalogue, else those the tenant's apps use. @param {any} tenantDoc */
function modelChoices(tenantDoc) {
  if (state.models) return state.models;
  const s = new Set();
  for (const a of tenantDoc.apps ?? []) for (const m of [a.models?.default, ...(a.models?.allow ?? []), ...(a.models?.fallbacks ?? [])]) if (m) s.add(m);
  return [...s];
}

/**
 * An app's form: client ids, models, limits, per-user limits, max tokens
 * and prompt caching. Keys it does not show (cache, guardrail, responses)
 * keep their values.
 * @param {any} doc @param {boolean} create @param {string[]} models
 */
function appForm(doc, create, models) {
  const listID = uniqueID('models');
  const id = create ? textField('app', 'App id', doc.id ?? '', { placeholder: 'lowercase letters, digits and -', autocapitalize: 'none', spellcheck: 'false' }) : null;
  const clients = textField('client_ids', 'Client ids', (doc.client_ids ?? []).join(', '), { hint: 'Cognito app client ids, separated by commas', autocapitalize: 'none', spellcheck: 'false' });
  const def = textField('models.default', 'Default model', doc.models?.default ?? '', { list: listID, autocapitalize: 'none', spellcheck: 'false' });
  const fallbacks = textField('models.fallbacks', 'Fallback models', (doc.models?.fallbacks ?? []).join(', '), { hint: 'tried in order when the model fails before its first token', list: listID });
  const allow = textField('models.allow', 'Allowed models', (doc.models?.allow ?? []).join(', '), { hint: 'default: the default model and the fallbacks' });
  const limits = limitsField('limits', 'App limits', doc.limits, 'Shared by all users of the app.');
  const userLimits = limitsField('user_limits', 'Per-user limits', doc.user_limits, 'Each user separately; a user override replaces them.');
  const maxTokens = numberField('max_tokens', 'Max tokens', doc.max_tokens, 'when the client gives none');
  const maxTokensLimit = numberField('max_tokens_limit', 'Max tokens limit', doc.max_tokens_limit, 'the largest a client may ask');
  const cache = selectField('prompt_cache', 'Prompt cache', doc.prompt_cache ?? '', [['', 'default (auto)'], ['auto', 'auto: the gateway places cache points'], ['off', "off: only the client's own"]]);
  const el = h('div', { class: 'form-grid' },
    h('datalist', { id: listID }, ...models.map((m) => h('option', { value: m }))),
    id?.el, clients.el, def.el, fallbacks.el, allow.el, limits.el, userLimits.el,
    h('div', { class: 'row2' }, maxTokens.el, maxTokensLimit.el), cache.el);
  return {
    el,
    /** @param {any} base */
    read: (base) => {
      const out = { ...base, models: { ...(base.models ?? {}) } };
      if (id) out.id = id.read().trim();
      setList(out, 'client_ids', clients.read());
      out.models.default = def.read().trim() || undefined;
      setList(out.models, 'fallbacks', fallbacks.read());
      setList(out.models, 'allow', allow.read());
      setList(out, 'limits', null, limits.read());
      setList(out, 'user_limits', null, userLimits.read());
      setNumber(out, 'max_tokens', maxTokens.read());
      setNumber(out, 'max_tokens_limit', maxTokensLimit.read());
      out.prompt_cache = cache.read() || undefined;
      return clean(out);
    },
  };
}

/**
 * Sets o[key] to a list (from comma-separated text, or given), or removes it when empty.
 * @param {any} o @param {string} key @param {string|null} text @param {unknown[]} [list]
 */
function setList(o, key, text, list) {
  const v = list ?? (text ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (v.length) o[key] = v;
  else delete o[key];
}

/** @param {any} o @param {string} key @param {string} text */
function setNumber(o, key, text) {
  if (text.trim() === '') delete o[key];
  else o[key] = Number(text);
}

/** Drops undefined values and read-only versions, deeply. @param {any} v @returns {any} */
function clean(v) {
  if (Array.isArray(v)) return v.map(clean);
  if (v && typeof v === 'object') {
    /** @type {Record<string, unknown>} */
    const out = {};
    for (const [k, x] of Object.entries(v)) if (x !== undefined && k !== 'version') out[k] = clean(x);
    return out;
  }
  return v;
}

/** @param {Limit[]|undefined} limits */
function limitsText(limits) {
  if (!limits?.length) return 'no limits';
  return limits.map((l) => {
    const m = [];
    if (l.tokens) m.push(`${numberFormat.format(l.tokens)} tokens`);
    if (l.requests) m.push(`${numberFormat.format(l.requests)} requests`);
    if (l.usd) m.push(usdFormat.format(l.usd));
    return `${l.window ?? '?'}: ${m.join(', ') || 'nothing'}`;
  }).join('; ');
}

// ---------------------------------------------------------------------------
// Form fields. Every field's wrapper carries data-field, the admin API's
// name for it (limits[0].window, models.default, ...), so a validation
// error's `field` finds its input.

let idCounter = 0;
/** @param {string} prefix */
function uniqueID(prefix) {
  return `${prefix}-${++idCounter}`;
}

/**
 * @param {string} field @param {string} label @param {string} value
 * @param {{hint?: string, placeholder?: string, list?: string, autocapitalize?: string, spellcheck?: string}} [o]
 */
function textField(field, label, value, o = {}) {
  const id = uniqueID('f');
  const input = /** @type {HTMLInputElement} */ (h('input', { id, name: field, type: 'text', value, placeholder: o.placeholder,
    list: o.list, autocapitalize: o.autocapitalize, spellcheck: o.spellcheck, autocomplete: 'off' }));
  const el = h('div', { class: 'f', dataset: { field } }, h('label', { for: id }, label), input, o.hint ? h('p', { class: 'hint' }, o.hint) : null);
  return { el, read: () => input.value };
}

/** @param {string} field @param {string} label @param {number|undefined} value @param {string} [hint] */
function numberField(field, label, value, hint) {
  const id = uniqueID('f');
  const input = /** @type {HTMLInputElement} */ (h('input', { id, name: field, type: 'number', inputmode: 'numeric', step: 'any', value: value ?? '' }));
  const el = h('div', { class: 'f', dataset: { field } }, h('label', { for: id }, label), input, hint ? h('p', { class: 'hint' }, hint) : null);
  return { el, read: () => input.value };
}

/** @param {string} field @param {string} label @param {string} value @param {[string, string][]} options */
function selectField(field, label, value, options) {
  const id = uniqueID('f');
  const select = /** @type {HTMLSelectElement} */ (h('select', { id, name: field }, ...options.map(([v, t]) => h('option', { value: v }, t))));
  if (!options.some(([v]) => v === value)) select.add(new Option(value, value));
  select.value = value;
  const el = h('div', { class: 'f', dataset: { field } }, h('label', { for: id }, label), select);
  return { el, read: () => select.value };
}

/** @param {string} field @param {string} label @param {boolean} value @param {string} [hint] */
function checkField(field, label, value, hint) {
  const id = uniqueID('f');
  const input = /** @type {HTMLInputElement} */ (h('input', { id, name: field, type: 'checkbox' }));
  input.checked = value;
  const el = h('div', { class: 'f check', dataset: { field } }, input, h('label', { for: id }, label), hint ? h('p', { class: 'hint' }, hint) : null);
  return { el, read: () => input.checked };
}

/**
 * Limits as rows: window, tokens, requests, USD and alert thresholds.
 * @param {string} name @param {string} legend @param {Limit[]|undefined} initial @param {string} hint
 */
function limitsField(name, legend, initial, hint) {
  /** @type {Limit[]} */
  let rows = (initial ?? []).map((l) => ({ ...l }));
  const body = h('div', { class: 'limit-rows' });
  const add = h('button', { type: 'button', class: 'ghost bordered small add-limit', onclick: () => { rows = read(); rows.push({ window: 'hour' }); render(); } }, 'Add limit');
  const el = h('fieldset', { class: 'limits', dataset: { field: name } }, h('legend', {}, legend), h('p', { class: 'hint' }, hint), body, add);
  function render() {
    body.replaceChildren(...rows.map((l, i) => limitRow(`${name}[${i}]`, i, l, () => { rows = read(); rows.splice(i, 1); render(); })));
    if (!rows.length) body.append(h('p', { class: 'hint none' }, 'No limits.'));
  }
  /** @returns {Limit[]} */
  function read() {
    return [...body.querySelectorAll('.limit-row')].map((row) => {
      const v = (/** @type {string} */ k) => /** @type {HTMLInputElement} */ (row.querySelector(`[data-k="${k}"]`)).value.trim();
      /** @type {Record<string, unknown>} */
      const l = { window: v('window') };
      for (const k of ['tokens', 'requests', 'usd']) if (v(k) !== '') l[k] = Number(v(k));
      const alerts = v('alerts').split(',').map((s) => s.trim()).filter(Boolean).map(Number);
      if (alerts.length) l.alerts = alerts;
      return /** @type {Limit} */ (l);
    });
  }
  render();
  return { el, read };
}

/** @param {string} path @param {number} i @param {Limit} l @param {() => void} remove */
function limitRow(path, i, l, remove) {
  /** @param {string} k @param {string} label @param {HTMLElement} input */
  const cell = (k, label, input) => {
    const id = uniqueID('l');
    input.id = id;
    input.dataset.k = k;
    return h('div', { class: 'f', dataset: { field: `${path}.${k}` } }, h('label', { for: id }, label), input);
  };
  const win = /** @type {HTMLSelectElement} */ (h('select', {}, ...windows.map((w) => h('option', { value: w }, w))));
  if (l.window && !windows.includes(l.window)) win.add(new Option(l.window, l.window));
  win.value = l.window ?? 'hour';
  const num = (/** @type {number|undefined} */ v, step = '1') => h('input', { type: 'number', inputmode: 'numeric', step, min: '0', value: v ?? '' });
  return h('div', { class: 'limit-row', dataset: { field: path } },
    cell('window', 'Window', win),
    cell('tokens', 'Tokens', num(l.tokens)),
    cell('requests', 'Requests', num(l.requests)),
    cell('usd', 'USD', num(l.usd, 'any')),
    cell('alerts', 'Alerts %', h('input', { type: 'text', inputmode: 'numeric', placeholder: '80, 90, 100', value: (l.alerts ?? []).join(', ') })),
    h('button', { type: 'button', class: 'ghost small remove', 'aria-label': `Remove limit ${i + 1}`, onclick: remove }, 'Remove'));
}

// ---------------------------------------------------------------------------
// The document editor: a form or the JSON document, Save with If-Match,
// validation errors beside their input, a conflict with Reload.

/**
 * @typedef {{
 *   kind: 'tenant'|'app'|'user', name: string, doc: any, etag: string, create?: boolean,
 *   path: (doc: any) => string,
 *   form: (doc: any) => {el: HTMLElement, read: (base: any) => any},
 *   onSaved?: (a: Answer) => void, onDeleted?: () => void,
 * }} EditorOptions
 */

/** @param {EditorOptions} o */
function docEditor(o) {
  let doc = o.doc;
  let etag = o.etag;
  let mode = 'form';
  /** @type {{el: HTMLElement, read: (base: any) => any}} */
  let form;
  const root = h('div', { class: 'editor', dataset: { kind: o.kind, state: 'clean', version: etag, name: o.name } });
  const formTab = h('button', { type: 'button', role: 'tab', class: 'tab', 'aria-selected': 'true', onclick: () => switchTo('form') }, 'Form');
  const jsonTab = h('button', { type: 'button', role: 'tab', class: 'tab', 'aria-selected': 'false', onclick: () => switchTo('json') }, 'JSON');
  const formBox = h('form', { class: 'editor-form', novalidate: true, onsubmit: (/** @type {Event} */ ev) => { ev.preventDefault(); save(); } });
  const jsonID = uniqueID('json');
  const json = /** @type {HTMLTextAreaElement} */ (h('textarea', { id: jsonID, class: 'json', spellcheck: 'false', autocapitalize: 'none', rows: '16' }));
  const jsonBox = h('div', { class: 'editor-json', dataset: { field: '' } }, h('label', { for: jsonID }, `The ${o.kind} as its JSON document (without its read-only version)`), json);
  jsonBox.hidden = true;
  const status = h('p', { class: 'editor-status', role: 'status', 'aria-live': 'polite' });
  const summary = h('div', { class: 'editor-error', role: 'alert' });
  summary.hidden = true;
  const conflictText = h('p', {});
  const reloadButton = h('button', { type: 'button', class: 'primary reload', onclick: () => reload() }, 'Reload');
  const conflict = h('div', { class: 'conflict', role: 'alert' },
    h('p', { class: 'conflict-title' }, h('strong', {}, 'Conflict: not saved')), conflictText,
    h('div', { class: 'actions' }, reloadButton));
  conflict.hidden = true;
  const saveButton = h('button', { type: 'button', class: 'primary save', onclick: () => save() }, o.create ? `Create ${o.kind}` : 'Save');
  const discard = h('button', { type: 'button', class: 'ghost bordered discard', onclick: () => { render(); setState('clean', ''); } }, 'Discard changes');
  const actions = h('div', { class: 'actions' }, saveButton, o.create ? null : discard);
  if (!o.create && o.kind !== 'tenant') {
    let armed = false;
    const del = h('button', { type: 'button', class: 'ghost danger delete', onclick: async () => {
      if (!armed) {
        armed = true;
        del.textContent = `Confirm: delete ${o.kind} ${o.name}`;
        return;
      }
      del.setAttribute('disabled', '');
      const a = await call('DELETE', o.path(doc), { headers: { 'if-match': `"${etag}"` } });
      del.removeAttribute('disabled');
      if (a.status === 204) {
        setState('deleted', `Deleted ${o.kind} ${o.name}.`);
        o.onDeleted?.();
      } else if (a.status === 412) showConflict(a);
      else showError(a);
      armed = false;
      del.textContent = `Delete ${o.kind}`;
    } }, `Delete ${o.kind}`);
    actions.append(del);
  }
  root.append(h('div', { class: 'mode', role: 'tablist', 'aria-label': 'Edit as' }, formTab, jsonTab), formBox, jsonBox, summary, conflict, actions, status);
  root.addEventListener('input', () => { if (root.dataset.state !== 'saving') setState('dirty', 'Unsaved changes.'); });
  render();

  /** Builds the form and the JSON from doc. */
  function render() {
    form = o.form(doc);
    formBox.replaceChildren(form.el, h('button', { type: 'submit', hidden: true }, 'Save'));
    json.value = JSON.stringify(clean(doc), null, 2);
    clearErrors();
  }

  /** The document as edited now (null: the JSON does not parse; the error is shown). */
  function current() {
    if (mode === 'form') return form.read(doc);
    try {
      return JSON.parse(json.value);
    } catch (err) {
      clearErrors();
      fieldError(jsonBox, `The JSON does not parse: ${message(err)}`);
      setState('invalid', 'Not saved: the JSON does not parse.');
      return null;
    }
  }

  /** @param {'form'|'json'} to */
  function switchTo(to) {
    if (to === mode) return;
    const d = current();
    if (d === null) return;
    const version = doc.version;
    doc = { ...d, version };
    mode = to;
    const dirty = root.dataset.state === 'dirty';
    render();
    if (dirty) root.dataset.state = 'dirty';
    formBox.hidden = mode !== 'form';
    jsonBox.hidden = mode !== 'json';
    formTab.setAttribute('aria-selected', String(mode === 'form'));
    jsonTab.setAttribute('aria-selected', String(mode === 'json'));
    root.dataset.mode = mode;
  }

  async function save() {
    const d = current();
    if (d === null) return;
    clearErrors();
    conflict.hidden = true;
    if (o.create && o.kind !== 'tenant' && !(d.id ?? d.sub)) {
      const field = o.kind === 'app' ? 'app' : 'sub';
      showFieldErrors(field, `Give the ${o.kind} ${o.kind === 'app' ? 'an id' : 'a sub'}.`);
      setState('invalid', `Not saved: the ${o.kind} needs ${o.kind === 'app' ? 'an id' : 'a sub'}.`);
      return;
    }
    setState('saving', 'Saving…');
    saveButton.setAttribute('disabled', '');
    const headers = o.create ? { 'if-none-match': '*' } : { 'if-match': `"${etag}"` };
    const a = await call('PUT', o.path(d), { body: clean(d), headers });
    saveButton.removeAttribute('disabled');
    if (a.ok) {
      doc = a.body;
      etag = a.etag || a.body?.version || etag;
      root.dataset.version = etag;
      render();
      setState('saved', `${a.status === 201 ? 'Created' : 'Saved'}: version ${etag}. Every gateway applies it within 5 s.`);
      o.onSaved?.(a);
      return;
    }
    if (a.status === 412 && o.create) {
      const field = o.kind === 'app' ? 'app' : 'sub';
      const text = `An ${o.kind === 'app' ? 'app' : 'override'} named "${d.id ?? d.sub}" exists already (412 ${a.error?.code}): pick another${o.kind === 'app' ? ' id' : ' user'}, or open the existing one.`;
      showFieldErrors(field, text);
      setState('invalid', 'Not created: it exists already.');
      return;
    }
    if (a.status === 412) {
      showConflict(a);
      return;
    }
    if (a.status === 400 && a.error) {
      const field = a.error.field ?? '';
      showFieldErrors(field, a.error.message);
      setState('invalid', `Not saved: the gateway refused the ${o.kind}${field ? ` at ${field}` : ''}.`);
      return;
    }
    showError(a);
  }

  /** @param {Answer} a */
  function showConflict(a) {
    conflictText.replaceChildren(
      `Someone else changed this ${o.kind} after you opened it (you had version ${etag}), so nothing was saved. `,
      'Reload to see the current version, then make your change again.',
      h('span', { class: 'api-message' }, ` The gateway said: 412 ${a.error?.code ?? ''}: ${a.error?.message ?? ''}`));
    conflict.hidden = false;
    setState('conflict', 'Not saved: a newer version exists.');
    reloadButton.focus();
  }

  /** @param {Answer} a */
  function showError(a) {
    summary.replaceChildren(h('p', {}, `Not saved: ${describe(a)}`));
    summary.hidden = false;
    setState('error', 'Not saved.');
  }

  async function reload() {
    reloadButton.setAttribute('disabled', '');
    const a = await call('GET', o.path(doc));
    reloadButton.removeAttribute('disabled');
    if (!a.ok) {
      showError(a);
      return;
    }
    doc = a.body;
    etag = a.etag;
    root.dataset.version = etag;
    conflict.hidden = true;
    render();
    setState('reloaded', `Reloaded: version ${etag}.`);
  }

  /**
   * Shows msg beside the input the API's field names: the wrapper whose
   * data-field is the longest prefix of it, else above the actions.
   * @param {string} field @param {string} msg
   */
  function showFieldErrors(field, msg) {
    const box = mode === 'form' ? formBox : jsonBox;
    /** @type {HTMLElement|null} */
    let best = null;
    if (mode === 'form' && field) {
      for (const el of box.querySelectorAll('[data-field]')) {
        const f = /** @type {HTMLElement} */ (el).dataset.field ?? '';
        if (f && (field === f || field.startsWith(`${f}.`) || field.startsWith(`${f}[`)) && f.length > (best?.dataset.field?.length ?? -1)) best = /** @type {HTMLElement} */ (el);
      }
    }
    const text = field ? `${msg} (field ${field})` : msg;
    const at = best ?? (mode === 'json' ? jsonBox : null);
    if (at) {
      fieldError(at, text, field);
      // Show the admin where: the input, in view and focused.
      at.scrollIntoView({ block: 'center' });
      /** @type {HTMLElement|null} */ (at.querySelector('[aria-invalid="true"]'))?.focus({ preventScroll: true });
    } else {
      summary.replaceChildren(h('p', { class: 'field-error', dataset: { for: field } }, text));
      summary.hidden = false;
    }
  }

  function clearErrors() {
    for (const e of root.querySelectorAll('.field-error')) e.remove();
    for (const e of root.querySelectorAll('[aria-invalid]')) e.removeAttribute('aria-invalid');
    for (const e of root.querySelectorAll('.invalid')) e.classList.remove('invalid');
    summary.hidden = true;
  }

  /** @param {string} s @param {string} text */
  function setState(s, text) {
    root.dataset.state = s;
    status.textContent = text;
  }

  return { el: root };
}

/**
 * Puts an error under a field's wrapper and marks its input invalid.
 * @param {HTMLElement} wrapper @param {string} text @param {string} [field]
 */
function fieldError(wrapper, text, field = '') {
  const id = uniqueID('err');
  wrapper.classList.add('invalid');
  const input = wrapper.matches('input, select, textarea') ? wrapper : wrapper.querySelector('input, select, textarea');
  if (input) {
    input.setAttribute('aria-invalid', 'true');
    input.setAttribute('aria-describedby', id);
  }
  wrapper.append(h('p', { class: 'field-error', id, dataset: { for: field } }, text));
}

/** @param {string} text */
function errorBox(text) {
  return h('p', { class: 'editor-error', role: 'alert' }, text);
}

// ---------------------------------------------------------------------------
// User overrides.

/** @type {any[]} the overrides of the app shown */
let users = [];
/** @type {{tenant: string, app: string}} */
const usersOf = { tenant: '', app: '' };

function wireUsers() {
  const tenantSel = /** @type {HTMLSelectElement} */ ($('users-tenant'));
  const appSel = /** @type {HTMLSelectElement} */ ($('users-app'));
  tenantSel.addEventListener('change', () => { location.hash = `#/users/${enc(tenantSel.value)}`; });
  appSel.addEventListener('change', () => { location.hash = `#/users/${enc(tenantSel.value)}/${enc(appSel.value)}`; });
  $('users-search').addEventListener('input', renderUsers);
  $('users-add').addEventListener('click', () => editUser(null));
}

/** @param {string|undefined} tenantID @param {string|undefined} appID */
async function showUsers(tenantID, appID) {
  const nav = state.navigation;
  const tenant = pickTenant(tenantID);
  fillTenants(/** @type {HTMLSelectElement} */ ($('users-tenant')), tenant);
  const appSel = /** @type {HTMLSelectElement} */ ($('users-app'));
  $('users-editor').replaceChildren();
  $('users-list').replaceChildren();
  users = [];
  /** @type {HTMLButtonElement} */ ($('users-add')).disabled = true;
  if (!tenant) {
    $('users-note').textContent = 'No tenants you may see.';
    return;
  }
  $('users-note').textContent = 'Loading…';
  const t = await call('GET', `/tenants/${enc(tenant)}`);
  if (nav !== state.navigation) return;
  if (!t.ok) {
    $('users-note').textContent = `Tenant ${tenant} could not be read: ${describe(t)}`;
    return;
  }
  const apps = (t.body.apps ?? []).map((/** @type {{id: string}} */ a) => a.id);
  appSel.replaceChildren(...apps.map((/** @type {string} */ a) => new Option(a, a)));
  const app = appID && apps.includes(appID) ? appID : apps[0];
  /** @type {HTMLButtonElement} */ ($('users-add')).disabled = !app;
  if (!app) {
    $('users-note').textContent = `Tenant ${tenant} has no apps.`;
    return;
  }
  appSel.value = app;
  usersOf.tenant = tenant;
  usersOf.app = app;
  await loadUsers(nav);
}

/** Reads every page of the app's overrides (100 a page). @param {number} nav */
async function loadUsers(nav) {
  const { tenant, app } = usersOf;
  /** @type {any[]} */
  const all = [];
  let after = '';
  let pages = 0;
  for (;;) {
    const a = await call('GET', `/tenants/${enc(tenant)}/apps/${enc(app)}/users${after ? `?after=${enc(after)}` : ''}`);
    if (nav !== state.navigation) return;
    if (!a.ok) {
      $('users-note').textContent = `The overrides could not be read: ${describe(a)}`;
      return;
    }
    all.push(...a.body.users);
    pages++;
    $('users-note').textContent = `Loading… ${all.length} overrides`;
    if (!a.body.next || pages >= maxUserPages) {
      users = all;
      $('users-note').textContent = a.body.next ? `The first ${all.length} overrides (${maxUserPages} pages) of ${tenant} / ${app}.` : '';
      break;
    }
    after = a.body.next;
  }
  renderUsers();
}

function renderUsers() {
  const prefix = /** @type {HTMLInputElement} */ ($('users-search')).value.trim().toLowerCase();
  const shown = users.filter((u) => u.sub.toLowerCase().startsWith(prefix));
  const body = $('users-list');
  body.replaceChildren(...shown.map((u) => {
    let armed = false;
    const del = h('button', { type: 'button', class: 'ghost danger small delete', onclick: async () => {
      if (!armed) {
        armed = true;
        del.textContent = 'Confirm delete';
        return;
      }
      const a = await call('DELETE', userPath(u.sub), { headers: { 'if-match': `"${u.version}"` } });
      if (a.status === 204) {
        $('users-note').textContent = `Deleted the override of ${u.sub}.`;
        await loadUsers(state.navigation);
      } else {
        $('users-note').textContent = a.status === 412 ? `Not deleted: the override of ${u.sub} changed meanwhile (412). Refreshed the list: look again.` : `Not deleted: ${describe(a)}`;
        if (a.status === 412) await loadUsers(state.navigation);
      }
    } }, 'Delete');
    return h('tr', { dataset: { sub: u.sub } },
      h('th', { scope: 'row', class: 'sub' }, u.sub),
      h('td', { 'data-label': 'Status' }, u.disabled ? h('span', { class: 'badge bad' }, 'Disabled') : h('span', { class: 'badge' }, 'Enabled')),
      h('td', { class: 'limits-text', 'data-label': 'Limits' }, u.limits?.length ? limitsText(u.limits) : "the app's per-user limits"),
      h('td', { class: 'row-actions' }, h('button', { type: 'button', class: 'ghost bordered small edit', onclick: () => editUser(u) }, 'Edit'), del));
  }));
  if (!shown.length) body.append(h('tr', {}, h('td', { colspan: '4', class: 'hint' }, users.length ? `No override's sub starts with "${prefix}".` : 'No overrides: every user has the app\'s per-user limits.')));
  $('users-table').dataset.count = String(shown.length);
}

/** @param {string} sub */
function userPath(sub) {
  return `/tenants/${enc(usersOf.tenant)}/apps/${enc(usersOf.app)}/users/${enc(sub)}`;
}

/** Opens the editor of an override (null: a new one). @param {any|null} u */
function editUser(u) {
  const create = !u;
  const ed = docEditor({
    kind: 'user', name: u?.sub ?? '', create, etag: u?.version ?? '',
    doc: u ?? { sub: '', disabled: false, limits: [{ window: 'hour', tokens: 100000 }] },
    path: (doc) => userPath(doc.sub ?? ''),
    form: (doc) => {
      const sub = create ? textField('sub', 'User (the token\'s sub)', doc.sub ?? '', { autocapitalize: 'none', spellcheck: 'false' }) : null;
      const disabled = checkField('disabled', 'Disabled', !!doc.disabled, 'refuses the user\'s new requests (403)');
      const limits = limitsField('limits', 'Limits for this user', doc.limits, "Replace the app's per-user limits; none: the app's apply.");
      return {
        el: h('div', { class: 'form-grid' }, sub?.el, disabled.el, limits.el),
        read: (/** @type {any} */ base) => {
          const out = { ...base, disabled: disabled.read() };
          if (sub) out.sub = sub.read().trim();
          setList(out, 'limits', null, limits.read());
          return out;
        },
      };
    },
    onSaved: () => loadUsers(state.navigation),
  });
  const box = $('users-editor');
  box.replaceChildren(h('div', { class: 'panel' },
    h('div', { class: 'detail-head' }, h('h3', {}, create ? 'New override' : 'Override of ', create ? null : h('span', { class: 'id' }, u.sub)),
      h('button', { type: 'button', class: 'ghost close', onclick: () => box.replaceChildren() }, 'Close')),
    ed.el));
  /** @type {HTMLElement|null} */ (box.querySelector('input'))?.focus();
}

// ---------------------------------------------------------------------------
// Usage: the usage endpoint groups rows without time, so a chart over time
// asks it once per period (since/until), e.g. the last 12 hours hour by hour.

function wireUsage() {
  $('usage-tenant').addEventListener('change', (ev) => { location.hash = `#/usage/${enc(/** @type {HTMLSelectElement} */ (ev.target).value)}`; });
  for (const id of ['usage-by', 'usage-range']) $(id).addEventListener('change', () => loadUsage(state.navigation));
  $('usage-refresh').addEventListener('click', () => loadUsage(state.navigation));
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => { if (state.usage) drawUsage(); });
}

/** @type {string} */
let usageTenant = '';

/** @param {string|undefined} tenantID */
async function showUsage(tenantID) {
  usageTenant = pickTenant(tenantID);
  fillTenants(/** @type {HTMLSelectElement} */ ($('usage-tenant')), usageTenant);
  await loadUsage(state.navigation);
}

/** The periods of a range, oldest first: [from, to) with the last one open. @param {string} range */
function periods(range) {
  const now = new Date();
  /** @type {{from: Date, to: Date|null, label: string}[]} */
  const out = [];
  if (range === '7d') {
    const day = new Date(now.getFullYear(), now.getMonth(), now.getDate());
    for (let i = 6; i >= 0; i--) {
      const from = new Date(day.getFullYear(), day.getMonth(), day.getDate() - i);
      const to = i === 0 ? null : new Date(day.getFullYear(), day.getMonth(), day.getDate() - i + 1);
      out.push({ from, to, label: from.toLocaleDateString(undefined, { weekday: 'short', day: 'numeric' }) });
    }
    return out;
  }
  const hour = new Date(now);
  hour.setMinutes(0, 0, 0);
  for (let i = 11; i >= 0; i--) {
    const from = new Date(hour.getTime() - i * 3600_000);
    const to = i === 0 ? null : new Date(from.getTime() + 3600_000);
    out.push({ from, to, label: from.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' }) });
  }
  return out;
}

/** @param {Date} d */
const rfc3339 = (d) => d.toISOString().replace(/\.\d+Z$/, 'Z');

/** @param {{input_tokens: number, output_tokens: number, cache_read_input_tokens: number}} r */
const rowTokens = (r) => (r.input_tokens ?? 0) + (r.cache_read_input_tokens ?? 0) + (r.output_tokens ?? 0);

/** @param {number} nav */
async function loadUsage(nav) {
  const tenant = usageTenant;
  const by = /** @type {HTMLSelectElement} */ ($('usage-by')).value;
  const range = /** @type {HTMLSelectElement} */ ($('usage-range')).value;
  const note = $('usage-note');
  if (!tenant) {
    note.textContent = 'No tenants you may see.';
    return;
  }
  note.textContent = 'Loading…';
  const ps = periods(range);
  const base = `/tenants/${enc(tenant)}/usage`;
  const answers = await Promise.all([
    ...ps.map((p) => call('GET', `${base}?by=${by}&since=${enc(rfc3339(p.from))}${p.to ? `&until=${enc(rfc3339(p.to))}` : ''}`)),
    call('GET', `${base}?by=user&since=${enc(rfc3339(ps[0].from))}`),
  ]);
  if (nav !== state.navigation) return;
  const failed = answers.find((a) => !a.ok);
  if (failed) {
    note.textContent = `Usage could not be read: ${describe(failed)}`;
    state.usage = null;
    drawUsage();
    return;
  }
  const perPeriod = answers.slice(0, ps.length).map((a) => a.body.rows);
  const userRows = answers[ps.length].body.rows;
  const key = (/** @type {any} */ r) => r[by] ?? '';
  // Users: the top ones by tokens over the range, the rest as "others".
  /** @type {Map<string, number>} */
  const totals = new Map();
  for (const rows of perPeriod) for (const r of rows) totals.set(key(r), (totals.get(key(r)) ?? 0) + rowTokens(r));
  let names = [...totals.keys()].sort((a, b) => (totals.get(b) ?? 0) - (totals.get(a) ?? 0));
  const fold = by === 'user' && names.length > topUsers;
  if (fold) names = [...names.slice(0, topUsers), 'others'];
  const series = names.map((name) => ({ name, tokens: ps.map(() => 0), cost: ps.map(() => 0), requests: ps.map(() => 0) }));
  perPeriod.forEach((rows, i) => {
    for (const r of rows) {
      let s = series.find((x) => x.name === key(r));
      if (!s && fold) s = series[series.length - 1];
      if (!s) continue;
      s.tokens[i] += rowTokens(r);
      s.cost[i] += r.cost_usd ?? 0;
      s.requests[i] += r.requests ?? 0;
    }
  });
  const topList = userRows.map((/** @type {any} */ r) => ({ name: r.user ?? '', tokens: rowTokens(r), cost: r.cost_usd ?? 0 }))
    .sort((/** @type {any} */ a, /** @type {any} */ b) => b.tokens - a.tokens).slice(0, topUsers);
  state.usage = { labels: ps.map((p) => p.label), series, users: topList, by };
  state.usageReads++;
  const sum = (/** @type {'tokens'|'cost'|'requests'} */ k) => series.reduce((n, s) => n + s[k].reduce((a, b) => a + b, 0), 0);
  note.textContent = series.length ? `${tenant}: ${range === '7d' ? 'the last 7 days, day by day' : 'the last 12 hours, hour by hour'} (local time).` : `${tenant}: no usage in this range yet.`;
  $('usage-totals').replaceChildren(
    h('div', {}, h('dt', {}, 'Requests'), h('dd', { dataset: { total: 'requests' } }, numberFormat.format(sum('requests')))),
    h('div', {}, h('dt', {}, 'Tokens'), h('dd', { dataset: { total: 'tokens' } }, numberFormat.format(sum('tokens')))),
    h('div', {}, h('dt', {}, 'Cost'), h('dd', { dataset: { total: 'cost' } }, usdFormat.format(sum('cost')))));
  $('usage-rows').replaceChildren(...ps.flatMap((p, i) => series.filter((s) => s.requests[i] > 0).map((s) => h('tr', {},
    h('td', {}, p.label), h('td', {}, s.name || '(none)'), h('td', {}, numberFormat.format(s.requests[i])),
    h('td', {}, numberFormat.format(s.tokens[i])), h('td', {}, usdFormat.format(s.cost[i]))))));
  drawUsage();
}

/** Draws (again: the colour scheme changed) the usage charts from state.usage. */
function drawUsage() {
  const Chart = /** @type {any} */ (globalThis).Chart;
  for (const c of Object.values(state.charts)) c.destroy();
  state.charts = {};
  const u = state.usage;
  if (!u) return;
  if (!Chart) {
    $('usage-note').textContent = 'The chart library did not load; the figures are in the table below.';
    return;
  }
  const css = getComputedStyle(document.documentElement);
  const fg = css.getPropertyValue('--muted').trim();
  const grid = css.getPropertyValue('--line').trim();
  const common = {
    animation: false, responsive: true, maintainAspectRatio: false,
    plugins: { legend: { position: 'bottom', labels: { color: fg, boxWidth: 12 } } },
  };
  const axis = (/** @type {(v: number) => string} */ fmt) => ({
    x: { stacked: true, ticks: { color: fg, maxRotation: 0, autoSkip: true }, grid: { color: grid } },
    y: { stacked: true, beginAtZero: true, ticks: { color: fg, callback: fmt }, grid: { color: grid } },
  });
  const color = (/** @type {number} */ i) => palette[i % palette.length];
  const name = (/** @type {string} */ n) => n || '(none)';
  state.charts.tokens = new Chart(/** @type {HTMLCanvasElement} */ ($('chart-tokens')), {
    type: 'bar',
    data: { labels: u.labels, datasets: u.series.map((s, i) => ({ label: name(s.name), data: s.tokens, backgroundColor: color(i), maxBarThickness: 36 })) },
    options: { ...common, scales: axis((v) => compact(v)) },
  });
  state.charts.cost = new Chart(/** @type {HTMLCanvasElement} */ ($('chart-cost')), {
    type: 'bar',
    data: { labels: u.labels, datasets: u.series.map((s, i) => ({ label: name(s.name), data: s.cost, backgroundColor: color(i), maxBarThickness: 36 })) },
    options: { ...common, scales: axis((v) => `$${Number(v).toPrecision(2)}`) },
  });
  // One bar a user: the chart grows with the list.
  $('chart-users').parentElement?.style.setProperty('height', `${4 + 2.5 * Math.max(u.users.length, 1)}rem`);
  state.charts.users = new Chart(/** @type {HTMLCanvasElement} */ ($('chart-users')), {
    type: 'bar',
    data: { labels: u.users.map((x) => name(x.name)), datasets: [{ label: 'Tokens', data: u.users.map((x) => x.tokens), backgroundColor: palette[0], maxBarThickness: 28 }] },
    options: { ...common, indexAxis: 'y', plugins: { legend: { display: false } },
      scales: { x: { beginAtZero: true, ticks: { color: fg, callback: (/** @type {number} */ v) => compact(v) }, grid: { color: grid } },
        y: { ticks: { color: fg }, grid: { display: false } } } },
  });
}

/** @param {number} v */
function compact(v) {
  return new Intl.NumberFormat('en-US', { notation: 'compact' }).format(v);
}

// ---------------------------------------------------------------------------
// The audit trail.

/** @type {string} the tenant the audit view filters by ('' all) */
let auditTenant = '';
/** @type {string} the next page's cursor */
let auditNext = '';

function wireAudit() {
  $('audit-tenant').addEventListener('change', (ev) => { auditTenant = /** @type {HTMLSelectElement} */ (ev.target).value; loadAudit(state.navigation, false); });
  $('audit-since').addEventListener('change', () => loadAudit(state.navigation, false));
  $('audit-refresh').addEventListener('click', () => loadAudit(state.navigation, false));
  $('audit-more').addEventListener('click', () => loadAudit(state.navigation, true));
}

async function showAudit() {
  const select = /** @type {HTMLSelectElement} */ ($('audit-tenant'));
  // A tenant admin of one tenant sees its entries; of several, names one.
  const mine = state.groups.filter((g) => g.startsWith('jetway:admin:'));
  if (!superAdmin() && mine.length !== 1 && !auditTenant) auditTenant = state.tenants[0]?.id ?? '';
  fillTenants(select, auditTenant, superAdmin() || mine.length === 1 ? 'All tenants' : undefined);
  await loadAudit(state.navigation, false);
}

/** @param {number} nav @param {boolean} more */
async function loadAudit(nav, more) {
  const since = /** @type {HTMLSelectElement} */ ($('audit-since')).value;
  const q = new URLSearchParams({ since });
  if (auditTenant) q.set('tenant', auditTenant);
  if (more && auditNext) q.set('after', auditNext);
  $('audit-note').textContent = 'Loading…';
  const a = await call('GET', `/audit?${q}`);
  if (nav !== state.navigation) return;
  const list = $('audit-list');
  if (!more) list.replaceChildren();
  if (!a.ok) {
    $('audit-note').textContent = `The audit trail could not be read: ${describe(a)}`;
    return;
  }
  auditNext = a.body.next ?? '';
  $('audit-more').hidden = !auditNext;
  list.append(...a.body.entries.map(auditEntry));
  const n = list.children.length;
  $('audit-note').textContent = n ? `${n} entries, newest first.` : 'No changes in this period.';
}

/** @param {{at: string, actor: string, action: string, path: string, before: any, after: any}} e */
function auditEntry(e) {
  const changed = changedKeys(e.before, e.after);
  const at = new Date(e.at);
  return h('li', { class: 'entry', dataset: { action: e.action, actor: e.actor, path: e.path } },
    h('div', { class: 'entry-head' },
      h('span', { class: `badge action-${e.action}` }, e.action),
      h('code', { class: 'path' }, e.path.replace(/^\/v1\/admin/, '')),
      h('span', { class: 'who' }, 'by ', h('strong', {}, e.actor)),
      h('time', { dateTime: e.at, title: e.at }, at.toLocaleString())),
    changed.length ? h('p', { class: 'hint changed' }, `changed: ${changed.join(', ')}`) : null,
    h('details', {}, h('summary', {}, 'Before and after'),
      h('div', { class: 'diff' },
        h('div', {}, h('p', { class: 'diff-title' }, 'Before'), h('pre', {}, e.before === null ? '(none)' : JSON.stringify(e.before, null, 2))),
        h('div', {}, h('p', { class: 'diff-title' }, 'After'), h('pre', {}, e.after === null ? '(none)' : JSON.stringify(e.after, null, 2))))));
}

/** The keys (one level down into apps by id) whose values differ. @param {any} before @param {any} after */
function changedKeys(before, after) {
  if (!before || !after || typeof before !== 'object' || typeof after !== 'object') return [];
  const out = [];
  for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (k === 'version' || JSON.stringify(before[k]) === JSON.stringify(after[k])) continue;
    if (k === 'apps' && Array.isArray(before[k]) && Array.isArray(after[k])) {
      const ids = new Set([...before[k], ...after[k]].map((a) => a.id));
      for (const id of ids) {
        const b = before[k].find((/** @type {any} */ a) => a.id === id);
        const a = after[k].find((/** @type {any} */ x) => x.id === id);
        if (!b) out.push(`apps.${id} (new)`);
        else if (!a) out.push(`apps.${id} (deleted)`);
        else for (const sub of changedKeys(b, a)) out.push(`apps.${id}.${sub}`);
      }
      continue;
    }
    out.push(k);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Small helpers.

/** @param {string} text */
function showBanner(text) {
  const b = $('banner');
  b.textContent = text;
  b.hidden = false;
}

function hideBanner() {
  $('banner').hidden = true;
}

/**
 * Makes an element: h('a', {href, class, dataset: {...}, onclick}, ...children).
 * Attributes with null, undefined or false values are left out; text children
 * are text nodes (never HTML).
 * @param {string} tag
 * @param {Record<string, any>} [props]
 * @param {...(Node|string|number|null|undefined|false)} children
 * @returns {HTMLElement}
 */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value') /** @type {HTMLInputElement} */ (el).value = String(v);
    else if (k === 'dateTime') el.setAttribute('datetime', v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}
