import { useChat } from '@ai-sdk/react';
import {
  WebSocketChatTransport,
  getToolName,
  isToolUIPart,
  lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';
import { useEffect, useRef, useState } from 'react';
import Markdown from 'react-markdown';
import { settings } from './settings.js';
import { devTokens } from './token.js';
import { runTool, tools } from './tools.js';

// What the page did, for your devtools and the project's browser test.
window.jetwayExample = { tokenFetches: 0, resumes: 0, messages: [], status: 'signing-in', chatId: '' };

/**
 * Signs in and makes the one transport of the page. The token goes twice:
 * in the subprotocols (a browser cannot set headers on a WebSocket
 * handshake: `bearer.<JWT>` next to `jetway.ai-sdk.v1`), and in every
 * frame's `headers`, which the gateway takes as the socket's new
 * credentials, so a long-lived socket outlives its first token.
 */
async function connect() {
  const token = devTokens(settings);
  const protocols = ['jetway.ai-sdk.v1', 'bearer.' + (await token())];
  const fresh = async () => {
    const t = await token();
    // The transport reads this array whenever it opens a new socket (after
    // a disconnect): keep it current so a reconnect signs in with a valid token.
    protocols[1] = 'bearer.' + t;
    return t;
  };
  const transport = new WebSocketChatTransport({
    url: settings.url,
    protocols,
    headers: async () => ({ authorization: 'Bearer ' + (await fresh()) }),
  });
  // The models this app may use, for the picker (dev mode lists them).
  let models = [];
  try {
    const r = await fetch('/dev/apps');
    const { apps } = await r.json();
    models = apps.find((a) => a.tenant === settings.tenant && a.app === settings.app)?.models ?? [];
  } catch {
    // No list: the app's default model only.
  }
  return { transport, models };
}

export default function App() {
  const [session, setSession] = useState(null);
  const [failure, setFailure] = useState('');
  useEffect(() => {
    connect().then(setSession, (e) => setFailure(String(e.message ?? e)));
  }, []);
  const [chatId, setChatId] = useState(() => {
    let id = localStorage.getItem('jetway-example:chat');
    if (!id) {
      id = crypto.randomUUID();
      localStorage.setItem('jetway-example:chat', id);
    }
    return id;
  });
  const newChat = () => {
    const id = crypto.randomUUID();
    localStorage.setItem('jetway-example:chat', id);
    setChatId(id);
  };

  return (
    <div className="page">
      <header>
        <h1>AI SDK chat on Jetway</h1>
        <p className="who">
          {settings.user} · {settings.tenant} / {settings.app}
        </p>
      </header>
      {failure && (
        <p className="error" role="alert">
          {failure}
        </p>
      )}
      {!session && !failure && <p className="status">Signing in…</p>}
      {session && <Conversation key={chatId} chatId={chatId} {...session} onNewChat={newChat} />}
    </div>
  );
}

const messagesKey = (chatId) => 'jetway-example:messages:' + chatId;

function loadMessages(chatId) {
  try {
    return JSON.parse(localStorage.getItem(messagesKey(chatId)) ?? '[]');
  } catch {
    return [];
  }
}

/** A network failure of the transport (the socket failed or closed), as useChat tells them apart. */
const isDisconnect = (err) => err instanceof TypeError && /network/i.test(err.message);

function Conversation({ chatId, transport: shared, models, onNewChat }) {
  const [model, setModel] = useState('');
  const [think, setThink] = useState(false);
  // Resumes asked and not answered yet: until the gateway answers the one
  // on load, the last answer kept from before the reload may be unfinished.
  // It starts at 1: useChat asks on mount (resume: true), after the first render.
  const [resuming, setResuming] = useState(1);
  const onLoad = useRef(true);
  const [transport] = useState(() => ({
    sendMessages: (o) => shared.sendMessages(o),
    reconnectToStream: async (o) => {
      if (!onLoad.current) setResuming((n) => n + 1);
      onLoad.current = false;
      try {
        return await shared.reconnectToStream(o);
      } finally {
        setResuming((n) => n - 1);
      }
    },
    resumeStreamIsReplay: shared.resumeStreamIsReplay,
  }));
  const [saved] = useState(() => loadMessages(chatId)); // read once: useChat takes it on mount
  const [stopped, setStopped] = useState(() => new Set());
  const [recovering, setRecovering] = useState(false);
  const recovery = useRef({ attempts: 0, timer: 0 });

  const { messages, sendMessage, status, error, stop, resumeStream, addToolOutput, clearError } = useChat({
    id: chatId,
    // The conversation survives a reload (this browser keeps it), and
    // resume: true asks the gateway for the chat's latest answer on load:
    // one still streaming, or finished moments ago, comes back whole.
    messages: saved,
    resume: true,
    transport,
    throttle: 30,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    onToolCall: ({ toolCall }) => {
      const output = runTool(toolCall.toolName, toolCall.input);
      const done =
        output === undefined
          ? { tool: toolCall.toolName, toolCallId: toolCall.toolCallId, state: 'output-error', errorText: 'no such tool' }
          : { tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output };
      // Not awaited (the AI SDK's rule for onToolCall).
      void addToolOutput(done);
    },
    onFinish: ({ message, isAbort, isDisconnect: disconnected }) => {
      if (isAbort) setStopped((s) => new Set(s).add(message.id));
      // The socket closed in the middle of the answer (the gateway died or
      // moved this socket away): the answer goes on elsewhere, ask for it.
      // (A send that failed before any of its answer came shows its error.)
      if (disconnected && message.parts.length > 0) scheduleResume();
    },
    onError: (err) => {
      // A resume that could not connect (no gateway yet): try again.
      if (recovery.current.attempts > 0 && isDisconnect(err)) scheduleResume();
    },
  });

  // Resumes with a growing pause (0.25 s to 4 s), a dozen times at most.
  function scheduleResume() {
    const r = recovery.current;
    if (r.timer) return;
    if (r.attempts >= 12) {
      r.attempts = 0;
      setRecovering(false);
      return;
    }
    const delay = Math.min(250 * 2 ** r.attempts, 4000);
    r.attempts++;
    setRecovering(true);
    r.timer = setTimeout(() => {
      r.timer = 0;
      window.jetwayExample.resumes++;
      void resumeStream();
    }, delay);
  }
  useEffect(() => {
    const r = recovery.current;
    if (status === 'ready' && !r.timer) {
      r.attempts = 0;
      setRecovering(false);
    }
  }, [status]);
  useEffect(() => () => clearTimeout(recovery.current.timer), []);

  // Keep the conversation for a reload (a full storage keeps nothing new).
  useEffect(() => {
    try {
      localStorage.setItem(messagesKey(chatId), JSON.stringify(messages));
    } catch {
      // Storage full (large attachments): the gateway still has the answer.
    }
    Object.assign(window.jetwayExample, { messages, status, chatId, recovering, resuming: resuming > 0 });
  }, [chatId, messages, status, recovering, resuming]);

  const busy = status === 'submitted' || status === 'streaming' || resuming > 0 || recovering;
  // Stop also ends a recovery: no more resumes.
  const onStop = () => {
    clearTimeout(recovery.current.timer);
    recovery.current = { attempts: 0, timer: 0 };
    setRecovering(false);
    return stop();
  };
  // Follow the answer as it grows.
  const end = useRef(null);
  // (Braces: newer browsers return a promise from scrollIntoView, and an
  // effect may return only a cleanup function.)
  useEffect(() => {
    end.current?.scrollIntoView({ block: 'end' });
  }, [messages]);
  const quota = [...messages].reverse().find((m) => m.metadata?.jetway?.quota)?.metadata.jetway.quota;

  const submit = async (text, files) => {
    clearError();
    await sendMessage(
      text.trim() ? { text, files } : { files },
      // Options of the gateway's AI SDK door (PROTOCOL.md): the model,
      // the tools the page runs itself, and extended thinking if asked.
      { body: { ...(model && { model }), tools, ...(think && { reasoning: { budget_tokens: 1024 } }) } },
    );
  };

  return (
    <main data-status={status} data-recovering={String(recovering)} data-resuming={String(resuming > 0)}>
      <div className="toolbar">
        <label>
          Model{' '}
          <select id="model" value={model} onChange={(e) => setModel(e.target.value)}>
            <option value="">app default</option>
            {models.map((m) => (
              <option key={m} value={m}>
                {m}
              </option>
            ))}
          </select>
        </label>
        <label>
          <input type="checkbox" id="think" checked={think} onChange={(e) => setThink(e.target.checked)} /> Think
          (reasoning models)
        </label>
        <button type="button" id="new-chat" onClick={onNewChat} disabled={busy}>
          New chat
        </button>
        <span id="status" className="status" aria-live="polite">
          {recovering ? 'Connection lost: resuming the answer…' : resuming > 0 ? 'Resuming…' : statusText(status)}
        </span>
      </div>
      <ol className="messages" aria-live="polite">
        {messages.map((m, i) => (
          <Message
            key={m.id}
            message={m}
            state={messageState(m, i === messages.length - 1, busy, stopped, error)}
          />
        ))}
      </ol>
      {error && !recovering && !messages.at(-1)?.metadata?.jetway?.error && (
        <p className="error" role="alert">
          {error.message}
        </p>
      )}
      <div ref={end} className="end" />
      <div className="footer">
        <Composer busy={busy} onSubmit={submit} onStop={onStop} />
        <p id="quota" className="quota">
          {quota ? quotaText(quota) : ''}
        </p>
      </div>
    </main>
  );
}

function statusText(status) {
  return { submitted: 'Sending…', streaming: 'Answering…', ready: 'Ready', error: 'Failed' }[status] ?? status;
}

/** streaming, done, stopped or error: what the page shows of an assistant message. */
function messageState(m, last, busy, stopped, error) {
  if (m.role !== 'assistant') return 'done';
  if (stopped.has(m.id)) return 'stopped';
  if (m.metadata?.jetway?.error) return 'error';
  if (last && busy) return 'streaming';
  if (last && error) return 'error';
  return 'done';
}

function quotaText({ window: w, limit, remaining }) {
  const n = (x) => Number(x).toLocaleString('en-US');
  return `Quota: ${n(remaining)} of ${n(limit)} tokens left this ${w}`;
}

function Message({ message, state }) {
  const j = message.metadata?.jetway;
  return (
    <li className={'message ' + message.role} data-role={message.role} data-id={message.id} data-state={state}>
      <div className="role">{message.role === 'user' ? 'You' : 'Assistant' + (j?.model ? ' · ' + j.model : '')}</div>
      {message.parts.map((part, i) => (
        <Part key={i} part={part} />
      ))}
      {state === 'stopped' && <p className="note">Stopped.</p>}
      {j?.error && (
        <p className="error" role="alert" data-code={j.error.code}>
          {j.error.message}
          {j.error.retry_after_ms > 0 && ` Try again in ${Math.ceil(j.error.retry_after_ms / 1000)} s.`}
        </p>
      )}
      {j?.usage && (
        <p className="meta">
          {j.usage.input_tokens} in · {j.usage.output_tokens} out
          {j.ttft_ms != null && ` · first token ${j.ttft_ms} ms`}
          {j.cost_usd != null && ` · $${Number(j.cost_usd).toFixed(5)}`}
          {j.cached && ' · cached'}
        </p>
      )}
    </li>
  );
}

function Part({ part }) {
  if (part.type === 'text') {
    // react-markdown renders Markdown to React elements and never injects
    // raw HTML, so a model's answer cannot script the page.
    return (
      <div className="text">
        <Markdown>{part.text}</Markdown>
      </div>
    );
  }
  if (part.type === 'reasoning') {
    return (
      <details className="reasoning" open={part.state === 'streaming'}>
        <summary>Reasoning</summary>
        <div className="reasoning-text">{part.text}</div>
      </details>
    );
  }
  if (part.type === 'file') {
    return part.mediaType?.startsWith('image/') ? (
      <img className="file" src={part.url} alt={part.filename ?? 'image'} />
    ) : (
      <p className="file">📎 {part.filename ?? part.mediaType}</p>
    );
  }
  if (isToolUIPart(part)) {
    return (
      <div className="tool" data-tool={getToolName(part)} data-tool-state={part.state}>
        <div>
          Tool <code>{getToolName(part)}</code>({part.input ? JSON.stringify(part.input) : ''})
        </div>
        {part.state === 'output-available' && <pre className="tool-output">{JSON.stringify(part.output, null, 2)}</pre>}
        {part.state === 'output-error' && <p className="error">{part.errorText}</p>}
      </div>
    );
  }
  return null; // step-start and data parts: nothing to show
}

/** Reads files as data: URLs, the only file URLs the gateway takes. */
function readFiles(files) {
  return Promise.all(
    [...files].map(
      (f) =>
        new Promise((resolve, reject) => {
          const r = new FileReader();
          r.onload = () => resolve({ type: 'file', mediaType: f.type || 'application/octet-stream', filename: f.name, url: r.result });
          r.onerror = () => reject(r.error);
          r.readAsDataURL(f);
        }),
    ),
  );
}

function Composer({ busy, onSubmit, onStop }) {
  const [text, setText] = useState('');
  const fileInput = useRef(null);
  const send = async (e) => {
    e.preventDefault();
    const files = await readFiles(fileInput.current.files);
    if (!text.trim() && files.length === 0) return;
    setText('');
    fileInput.current.value = '';
    await onSubmit(text, files);
  };
  return (
    <form className="composer" onSubmit={send}>
      <label htmlFor="prompt" className="visually-hidden">
        Message
      </label>
      <textarea
        id="prompt"
        value={text}
        rows={2}
        placeholder="Ask something"
        onChange={(e) => setText(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && !e.shiftKey) send(e);
        }}
      />
      <label className="attach">
        Attach <input id="file" type="file" ref={fileInput} multiple accept="image/*,application/pdf,text/plain,text/markdown,text/csv" />
      </label>
      {busy ? (
        <button type="button" id="stop" onClick={() => onStop()}>
          Stop
        </button>
      ) : (
        <button type="submit" id="send">
          Send
        </button>
      )}
    </form>
  );
}
