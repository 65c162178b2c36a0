// The page's settings: the query string first (?gateway=ws://127.0.0.1:8080,
// ?tenant=, ?app=, ?user=, ?ttl=), then VITE_JETWAY_URL at build time, then
// defaults that fit `go run ./cmd/gateway` (its built-in dev tenants).
const query = new URLSearchParams(location.search);

function pick(name, fallback) {
  const v = query.get(name);
  return v == null || v === '' ? fallback : v;
}

// gateway is where the WebSocket goes: a gateway's base URL (http(s) or
// ws(s)); the page's own origin by default, which the Vite dev server
// forwards to JETWAY_URL (see vite.config.js).
const gateway = pick('gateway', import.meta.env.VITE_JETWAY_URL || location.origin).replace(/\/+$/, '');

export const settings = {
  url: gateway + '/v1/ai-sdk',
  tenant: pick('tenant', 'contoso'),
  app: pick('app', 'support-assistant'),
  // The user of this browser: any name in dev mode; kept so a reload is the same user.
  user: pick('user', localStorage.getItem('jetway-example:user') || 'ai-sdk-example'),
  // Lifetime of a dev token in seconds; the page renews a token within 60 s
  // of its expiry, so ?ttl=60 renews it for every frame (handy to watch).
  ttl: Number(pick('ttl', '3600')),
};
localStorage.setItem('jetway-example:user', settings.user);
