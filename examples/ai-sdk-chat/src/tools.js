// The page's one client-side tool. Tools run in the browser: the model asks
// for one (a tool call in the answer), onToolCall runs it, addToolOutput
// records the result, and sendAutomaticallyWhen sends the conversation back
// so the model answers with it.

/** The tools as the gateway takes them in a send frame's body.tools (PROTOCOL.md). */
export const tools = [
  {
    name: 'get_local_time',
    description: "The user's local date, time and time zone, from their browser.",
    input_schema: {
      type: 'object',
      properties: {
        timezone: { type: 'string', description: "An IANA time zone such as Europe/Paris; the user's own if absent." },
      },
    },
  },
];

/** Runs a tool call; undefined for a tool this page does not have. */
export function runTool(name, input) {
  if (name !== 'get_local_time') return undefined;
  const own = Intl.DateTimeFormat().resolvedOptions().timeZone;
  let timeZone = typeof input?.timezone === 'string' && input.timezone ? input.timezone : own;
  let local;
  try {
    local = new Date().toLocaleString('en-GB', { timeZone, dateStyle: 'full', timeStyle: 'long' });
  } catch {
    timeZone = own; // not a time zone the browser knows
    local = new Date().toLocaleString('en-GB', { timeZone, dateStyle: 'full', timeStyle: 'long' });
  }
  return { timeZone, local, iso: new Date().toISOString() };
}
