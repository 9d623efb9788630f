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

// The whole text as sanitised HTML: what an answer's blocks, one after another, must equal (the tests
// compare them; the page itself inserts nodes, below).
export function renderMarkdown(text) {
  return DOMPurify.sanitize(marked.parse(text || ""), PURIFY);
}

// The same, as nodes to insert: the sanitiser's own tree, with no serialising and parsing again.
const PURIFY_NODES = { ...PURIFY, RETURN_DOM_FRAGMENT: true };

export function renderMarkdownNodes(text) {
  return DOMPurify.sanitize(marked.parse(text || ""), PURIFY_NODES);
}

// --- a growing answer, block by block -------------------------------------------------------
// The top-level blocks of `text`, so that a streamed answer re-parses only its last (growing) block:
// each finished block renders once (views/chat.js), and the HTML of the blocks, one after another,
// is what the whole text renders to. Blocks part at blank lines, except where Markdown carries a
// construct over a blank line: inside a fenced code block (``` or ~~~, never split) or an HTML block
// that ends at a marker (<pre>, <!-- … -->, …); before an indented line (a list item's next
// paragraph, indented code); before a list item when the block holds one (a loose list stays one
// list). Keeping blocks together is always safe, splitting is what must be right. The limitation
// accepted: a link reference definition (`[x]: https://…`) serves only links of its own block.
const BLANK = /^[ \t]*$/;
const INDENTED = /^[ \t]/;
const LIST_ITEM = /^[ \t]*([*+-]|\d{1,9}[.)])([ \t]|$)/;
const FENCE_OPEN = /^ {0,3}(`{3,}(?=[^`]*$)|~{3,})/;
const FENCE_CLOSE = /^ {0,3}(`{3,}|~{3,})[ \t]*$/;
const HTML_BLOCKS = [
  [/^ {0,3}<(pre|script|style|textarea)([\s>]|$)/i, /<\/(pre|script|style|textarea)>/i],
  [/^ {0,3}<!--/, /-->/],
  [/^ {0,3}<\?/, /\?>/],
  [/^ {0,3}<![A-Za-z]/, />/],
  [/^ {0,3}<!\[CDATA\[/, /\]\]>/],
];

// Whether `line` closes the fence `open` (the opening run of backticks or tildes).
const closesFence = (line, open) => {
  const match = FENCE_CLOSE.exec(line);
  return Boolean(match) && match[1][0] === open[0] && match[1].length >= open.length;
};

// The end marker of an HTML block that `line` starts and does not end itself, or null.
function htmlBlockEnd(line) {
  for (const [start, end] of HTML_BLOCKS) {
    const match = start.exec(line);
    if (match) return end.test(line.slice(match[0].length)) ? null : end;
  }
  return null;
}

export function splitBlocks(text) {
  // Each block is a slice of `text`, the blank lines after it included: the slices make up the text.
  const source = text || "";
  const blocks = [];
  let blockStart = 0; // where the current block starts in `source`
  let open = false; // the current block has a line that is not blank
  let fence = null; // the opening run of the fenced code block we are in
  let htmlEnd = null; // the end marker of the HTML block we are in
  let hasListItem = false;
  let blankBefore = false;
  for (let lineStart = 0; lineStart <= source.length; ) {
    const newline = source.indexOf("\n", lineStart);
    const lineEnd = newline < 0 ? source.length : newline;
    const line = source.slice(lineStart, lineEnd);
    const next = lineEnd + 1;
    if (fence) {
      if (closesFence(line, fence)) fence = null;
    } else if (htmlEnd) {
      if (htmlEnd.test(line)) htmlEnd = null;
    } else if (BLANK.test(line)) {
      blankBefore = open;
    } else {
      const listItem = LIST_ITEM.test(line);
      if (blankBefore && !INDENTED.test(line) && !(listItem && hasListItem)) {
        blocks.push(source.slice(blockStart, lineStart));
        blockStart = lineStart;
        hasListItem = false;
      }
      open = true;
      blankBefore = false;
      hasListItem ||= listItem;
      const opening = FENCE_OPEN.exec(line);
      if (opening) fence = opening[1];
      else htmlEnd = htmlBlockEnd(line);
    }
    lineStart = next;
  }
  if (blockStart < source.length) blocks.push(source.slice(blockStart));
  return blocks;
}
