// Agent text → safe HTML: marked renders Markdown, DOMPurify sanitises the result. Raw HTML in
// the text is shown as text, never parsed; only http(s) and mailto links survive, and they open
// in a new tab without a referrer. Nothing else in the client turns text into HTML.
import { Marked } from "../vendor/marked.mjs";
import DOMPurify from "../vendor/purify.mjs";

const escapeHtml = (text) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    html: ({ text }) => escapeHtml(text),
    // Images would be fetched from anywhere (and the CSP refuses them): show the link instead.
    image: ({ href, text }) => escapeHtml(text || href || ""),
  },
});

const SAFE_LINK = /^(https?:|mailto:)/i;

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") || "";
    if (!SAFE_LINK.test(href)) node.removeAttribute("href");
    else {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  }
});

const PURIFY = {
  FORBID_TAGS: ["img", "style", "form", "input", "button", "textarea", "select", "video", "audio", "svg", "math"],
  FORBID_ATTR: ["style", "srcset"],
  ALLOW_DATA_ATTR: false,
};

export function renderMarkdown(text) {
  return DOMPurify.sanitize(marked.parse(text || ""), PURIFY);
}
