// @ts-check
// Markdown for the demo page. Answers are rendered again on every update
// while they stream (marked copes with a text cut anywhere: an open code
// fence is a code block until it closes), and every render goes through
// DOMPurify: whatever HTML a model writes, none of it runs. Both modules are
// vendored copies (web/README.md).
import { marked } from './vendor/marked.esm.js';
import DOMPurify from './vendor/purify.es.mjs';

// The vendored builds carry no type declarations: the parts used here.
const parser = /** @type {{parse(src: string, o: {async: false, gfm: boolean}): string}} */ (/** @type {unknown} */ (marked));
const purify = /** @type {{
  sanitize(html: string, o: {RETURN_DOM_FRAGMENT: true, FORBID_TAGS: string[], FORBID_ATTR: string[]}): DocumentFragment,
  addHook(hook: 'afterSanitizeAttributes', fn: (node: Element) => void): void,
}} */ (/** @type {unknown} */ (DOMPurify));

// Links in answers open in a new tab without the page as opener or referrer.
purify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

// DOMPurify's defaults drop scripts, event handlers and javascript: URLs;
// styles go too, so an answer cannot restyle the page.
const policy = { RETURN_DOM_FRAGMENT: /** @type {true} */ (true), FORBID_TAGS: ['style'], FORBID_ATTR: ['style'] };

/**
 * Replaces box's content with the rendered, sanitized Markdown.
 * @param {Element} box
 * @param {string} markdown
 */
export function renderMarkdown(box, markdown) {
  const html = parser.parse(markdown, { async: false, gfm: true });
  box.replaceChildren(purify.sanitize(html, policy));
}
