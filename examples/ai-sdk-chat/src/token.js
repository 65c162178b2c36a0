// Dev sign-in: the gateway's dev mode mints tokens at POST /dev/token, for
// its own origin only (the page reaches it through its dev server's proxy).
// In production, replace this with your identity provider (the gateway
// takes Cognito tokens): keep the same shape, a function that returns a
// token valid for at least the next minute.

/**
 * @param {{tenant: string, app: string, user: string, ttl: number}} who
 * @returns {() => Promise<string>} a fresh token, fetched again within 60 s of expiry
 */
export function devTokens({ tenant, app, user, ttl }) {
  let cached = null; // {value, exp}
  let pending = null;
  const fetchToken = async () => {
    const r = await fetch('/dev/token', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sub: user, tenant, app, ttl_s: ttl }),
    });
    const body = await r.json().catch(() => ({}));
    if (!r.ok || !body.token) {
      throw new Error(`dev sign-in failed (HTTP ${r.status}): ${body.error?.message ?? 'no token'}`);
    }
    cached = { value: body.token, exp: Date.now() + body.expires_in * 1000 };
    window.jetwayExample.tokenFetches++;
    return cached.value;
  };
  return async () => {
    if (cached && cached.exp - Date.now() > 60_000) return cached.value;
    // One fetch at a time, however many frames ask at once.
    pending ??= fetchToken().finally(() => {
      pending = null;
    });
    return pending;
  };
}
