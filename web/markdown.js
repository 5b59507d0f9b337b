// Markdown to safe HTML for the chat page: marked (Debian libjs-marked) parses,
// highlight.js (libjs-highlight.js) colours code blocks, DOMPurify
// (node-dompurify) removes anything that could run script. Model output is
// untrusted: nothing reaches the page without passing DOMPurify.
"use strict";

const TernMarkdown = (() => {
  hljs.configure({ hideUpgradeWarningAcceptNoSupportOrSecurityUpdates: true });

  function highlightCode(code, language) {
    if (language && hljs.getLanguage(language)) return hljs.highlight(language, code, true).value;
    // Guessing the language of a long block is slow; long blocks stay plain.
    if (code.length <= 20000) return hljs.highlightAuto(code).value;
    return escapeHtml(code);
  }

  function escapeHtml(text) {
    const entities = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
    return text.replace(/[&<>"']/g, (c) => entities[c]);
  }

  // `final`: the answer is complete, so code blocks are coloured (skipped while it streams in).
  function render(text, final) {
    const options = { gfm: true, breaks: true, headerIds: false, mangle: false, langPrefix: "hljs language-" };
    if (final) options.highlight = highlightCode;
    const html = marked.parse(text, options);
    return DOMPurify.sanitize(html, { USE_PROFILES: { html: true } });
  }

  return { render, escapeHtml };
})();
