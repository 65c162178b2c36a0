import { defineConfig, loadEnv } from 'vite';
import react from '@vitejs/plugin-react';

// JETWAY_URL is the gateway the dev server (and `vite preview`) forwards to:
// the page talks to its own origin, and this proxy carries the WebSocket
// (/v1/ai-sdk) and the dev sign-in (/dev/token, /dev/apps) to the gateway.
export default defineConfig(({ mode }) => {
  const env = loadEnv(mode, process.cwd(), '');
  const target = env.JETWAY_URL || 'http://127.0.0.1:8080';
  const proxy = {
    '/v1/ai-sdk': { target, ws: true, changeOrigin: true },
    // The gateway mints dev tokens only for its own origin (another site
    // open in the browser must not get tokens), so the proxy asks without
    // the page's Origin, as a same-origin request would.
    '/dev/': {
      target,
      changeOrigin: true,
      configure: (p) => p.on('proxyReq', (req) => req.removeHeader('origin')),
    },
  };
  // The AI SDK with its schemas is about 0.5 MB minified; one file is fine here.
  return { plugins: [react()], server: { proxy }, preview: { proxy }, build: { chunkSizeWarningLimit: 1000 } };
});
