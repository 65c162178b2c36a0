import { createRoot } from 'react-dom/client';
import App from './App.jsx';
import './style.css';

// No <StrictMode>: in development it mounts every component twice, and
// useChat's unmount stops the chat, which sends an `abort` for the resume
// that `resume: true` started on the first mount: the gateway would cancel
// the answer being resumed.
createRoot(document.getElementById('root')).render(<App />);
