// One conversation: its turns (text, tools, decisions, files), paging back on scroll, and the composer.
import { Component, html, useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState } from "../lib/html.js";
import { renderMarkdown, splitBlocks } from "../lib/markdown.js";
import { ApprovalCard, ClarifyCard, ToolCard } from "./cards.js";
import { AttachmentList } from "./attachments.js";
import { Composer } from "./composer.js";

// One top-level block of an answer, rendered once for its text: while an answer streams, only its
// last block changes, so only that one is parsed again and only its nodes are replaced.
class MarkdownBlock extends Component {
  shouldComponentUpdate(next) {
    return next.text !== this.props.text;
  }

  render({ text }) {
    // The only place text becomes HTML, and it has been through the sanitiser.
    return html`<div class="md-block" dangerouslySetInnerHTML=${{ __html: renderMarkdown(text) }}></div>`;
  }
}

function Markdown({ text }) {
  const blocks = useMemo(() => splitBlocks(text), [text]);
  return html`<div class="markdown">${blocks.map((block, index) => html`<${MarkdownBlock} key=${index} text=${block} />`)}</div>`;
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
