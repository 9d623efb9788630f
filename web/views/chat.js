// One conversation: its turns (text, tools, decisions, files), paging back on scroll, and the composer.
import { Component, html, useCallback, useEffect, useLayoutEffect, useRef, useState } from "../lib/html.js";
import { renderMarkdownNodes, splitBlocks } from "../lib/markdown.js";
import { ApprovalCard, ClarifyCard, ToolCard } from "./cards.js";
import { AttachmentList } from "./attachments.js";
import { Composer } from "./composer.js";

// An answer's Markdown, block by block (lib/markdown.js splitBlocks), written to the DOM here rather
// than by Preact: while an answer streams only its last block changes, so only that one is parsed,
// sanitised and replaced; a finished block renders once and its nodes stay. Finished blocks sit in
// one contained box (.md-done), which layout and paint then take as a whole instead of block by block.
class Markdown extends Component {
  constructor(props) {
    super(props);
    this.blocks = []; // {text, start, node}, in order: all but the last in .md-done
    this.text = "";
  }

  shouldComponentUpdate(next) {
    if (next.text !== this.text) this.write(next.text);
    return false;
  }

  componentDidMount() {
    this.write(this.props.text);
  }

  render() {
    return html`<div class="markdown" ref=${(el) => (this.root = el)}><div class="md-done" ref=${(el) => (this.done = el)}></div></div>`;
  }

  write(text) {
    const blocks = this.blocks;
    // Split again from the start of the last block but one: the edge before the last block may still
    // move while the line it starts on grows; the ones before are set, as long as the text before
    // them is the same (a retraction may shorten it: then all is split again, unchanged blocks kept).
    let kept = Math.max(0, blocks.length - 2);
    if (kept && !text.startsWith(this.text.slice(0, blocks[kept].start))) kept = 0;
    let start = kept ? blocks[kept].start : 0;
    const fresh = splitBlocks(text.slice(start)).map((block) => {
      const at = start;
      start += block.length;
      return { text: block, start: at };
    });
    let same = 0;
    while (same < fresh.length && kept + same < blocks.length && blocks[kept + same].text === fresh[same].text) same += 1;
    const stale = blocks.splice(kept + same);
    for (const block of fresh.slice(same)) {
      // A changed block keeps its box: the growing last block stays the same last child, so no
      // structural selector (:last-child) restyles the blocks before it.
      block.node = stale.length ? stale.shift().node : document.createElement("div");
      block.node.className = "md-block";
      // The only place text becomes HTML, and it has been through the sanitiser.
      block.node.replaceChildren(renderMarkdownNodes(block.text));
      blocks.push(block);
    }
    for (const { node } of stale) node.remove();
    this.text = text;
    // Those before `kept` are in .md-done already, in order; the others go where they belong, in order.
    for (let index = kept; index < blocks.length; index++) {
      const parent = index < blocks.length - 1 ? this.done : this.root;
      if (blocks[index].node.parentNode !== parent) parent.appendChild(blocks[index].node);
    }
  }
}

const Typing = () => html`<span class="typing" role="img" aria-label="The agent is thinking"><i></i><i></i><i></i></span>`;

// An answer's text. While it streams, it follows its draft in the store by itself, so a delta
// redraws this answer, not the page, and `onGrow` keeps the transcript at the bottom.
function Answer({ store, message, onGrow }) {
  const { message_id: messageId, streaming } = message;
  const [, redraw] = useState(0);
  useLayoutEffect(() => (streaming ? store.subscribeDraft(messageId, () => redraw((n) => n + 1)) : undefined), [store, messageId, streaming]);
  useLayoutEffect(() => {
    if (streaming) onGrow();
  });
  const text = (streaming && store.draftText(messageId)) || message.text;
  return text ? html`<${Markdown} text=${text} />` : html`<${Typing} />`;
}

const STATUS_NOTES = { cancelled: "Stopped.", failed: "The run failed." };

function Turn({ client, chat, conversationId, message, onGrow }) {
  const runId = message.run_id;
  const attachments = chat.attachments.filter((a) => a.message_id === message.message_id);
  if (message.role === "user") {
    return html`<div class="turn user" data-message-id=${message.message_id}>
      <div class=${`bubble user${message.pending ? " pending" : ""}`}><p class="plain">${message.text}</p></div>
      <${AttachmentList} attachments=${attachments} />
    </div>`;
  }
  if (message.kind === "notice") {
    return html`<p class="notice-line" data-message-id=${message.message_id}>${message.text}</p>`;
  }
  const tools = runId ? Object.values(chat.tools).filter((t) => t.run_id === runId) : [];
  const approvals = runId ? Object.values(chat.approvals).filter((a) => a.run_id === runId) : [];
  const clarifications = runId ? Object.values(chat.clarifications).filter((c) => c.run_id === runId) : [];
  return html`<div class="turn assistant" data-message-id=${message.message_id} data-run-id=${runId}>
    ${tools.map((tool) => html`<${ToolCard} key=${tool.tool_call_id} tool=${tool} />`)}
    ${approvals.map((a) => html`<${ApprovalCard} key=${a.approval_id} client=${client} approval=${a} />`)}
    ${clarifications.map((c) => html`<${ClarifyCard} key=${c.clarify_id} client=${client} conversationId=${conversationId} clarify=${c} />`)}
    ${(message.text || message.streaming) &&
    html`<div class=${`bubble assistant${message.streaming ? " streaming" : ""}`} aria-busy=${message.streaming ? "true" : "false"}>
      <${Answer} store=${client.store} message=${message} onGrow=${onGrow} />
    </div>`}
    <${AttachmentList} attachments=${attachments} />
    ${STATUS_NOTES[message.status] && html`<p class=${`run-status ${message.status}`}>${STATUS_NOTES[message.status]}${message.error ? ` ${message.error}` : ""}</p>`}
  </div>`;
}

export function ChatView({ client, state, conversation }) {
  const id = conversation.conversation_id;
  const chat = client.store.chat(id);
  const scroller = useRef(null);
  const pinned = useRef(true); // follow new text while the person is at the bottom
  const previousHeight = useRef(0);

  const onScroll = () => {
    const el = scroller.current;
    pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
    if (el.scrollTop < 60 && chat.hasMore && !chat.loadingOlder) {
      previousHeight.current = el.scrollHeight;
      client.loadOlder(id);
    }
  };

  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    if (previousHeight.current && !chat.loadingOlder) {
      // An older page was put on top: keep the person's place.
      el.scrollTop += el.scrollHeight - previousHeight.current;
      previousHeight.current = 0;
    } else if (pinned.current) {
      el.scrollTop = el.scrollHeight;
    }
  });

  useEffect(() => {
    pinned.current = true;
  }, [id]);

  // A streaming answer grew (it redraws by itself): follow it while the person is at the bottom.
  const follow = useCallback(() => {
    const el = scroller.current;
    if (el && pinned.current && !previousHeight.current) el.scrollTop = el.scrollHeight;
  }, []);

  const known = new Set(chat.messages.map((m) => m.message_id));
  const loose = chat.attachments.filter((a) => !known.has(a.message_id));
  const runIds = new Set(chat.messages.map((m) => m.run_id).filter(Boolean));
  const looseDecisions = [...Object.values(chat.approvals), ...Object.values(chat.clarifications)].filter((d) => !runIds.has(d.run_id));

  return html`<section class="chat" aria-label=${conversation.name}>
    <div class="transcript" ref=${scroller} onScroll=${onScroll}>
      ${chat.hasMore && html`<button class="link older" onClick=${() => client.loadOlder(id)}>${chat.loadingOlder ? "Loading…" : "Load earlier messages"}</button>`}
      ${!chat.loaded && html`<p class="muted center">Loading…</p>`}
      ${chat.loaded && chat.messages.length === 0 && html`<div class="empty-chat"><h2>What can I help with?</h2>
        <p class="muted">Try <code>/demo tool</code>, <code>/demo approve</code>, <code>/demo clarify</code> or <code>/demo image</code> on the demo agent.</p></div>`}
      ${chat.messages.map((m) => html`<${Turn} key=${m.message_id} client=${client} chat=${chat} conversationId=${id} message=${m} onGrow=${follow} />`)}
      ${looseDecisions.map((d) =>
        d.approval_id
          ? html`<${ApprovalCard} key=${d.approval_id} client=${client} approval=${d} />`
          : html`<${ClarifyCard} key=${d.clarify_id} client=${client} conversationId=${id} clarify=${d} />`,
      )}
      <${AttachmentList} attachments=${loose} />
    </div>
    ${chat.notice && html`<p class="chat-notice" role="alert">${chat.notice}</p>`}
    <${Composer} client=${client} state=${state} conversationId=${id} chat=${chat} />
  </section>`;
}
