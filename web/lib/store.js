// The client's state and how each server event changes it. Views read `store.state` and
// re-render on `subscribe`; nothing here talks to the network.

// Code points in `text` (what append deltas' offsets count): a surrogate pair is one, and so is a
// lone surrogate, as in the server's strings.
export function codePointCount(text) {
  let count = text.length;
  for (let i = 0; i < text.length - 1; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const low = text.charCodeAt(i + 1);
      if (low >= 0xdc00 && low <= 0xdfff) {
        count -= 1;
        i += 1;
      }
    }
  }
  return count;
}

// `text` without its last `count` code points: a retraction walks back from the end only.
export function dropCodePoints(text, count) {
  let end = text.length;
  for (; count > 0 && end > 0; count--) {
    end -= 1;
    const unit = text.charCodeAt(end);
    if (unit >= 0xdc00 && unit <= 0xdfff && end > 0) {
      const high = text.charCodeAt(end - 1);
      if (high >= 0xd800 && high <= 0xdbff) end -= 1;
    }
  }
  return text.slice(0, end);
}

const emptyChat = () => ({
  loaded: false,
  messages: [], // {message_id, role, text, ts, run_id?, streaming?, kind?, status?, error?}
  hasMore: false,
  loadingOlder: false,
  run: null, // the active run: {run_id, message_id}
  tools: {}, // by tool_call_id
  approvals: {}, // by approval_id: the request plus `resolved` once answered
  clarifications: {}, // by clarify_id: likewise
  attachments: [], // descriptors, in arrival order
  yolo: false,
  model: null, // model.current
  reasoning: null, // reasoning.snapshot
  notice: "", // a sentence about the last thing that went wrong here
});

// A streamed draft is drawn at an animation frame at least this long after the last drawing (the
// first text of an answer at once). Each drawing costs the page's main thread some 3–5 ms (layout,
// paint, the growing Markdown block; more on a slow device): in bench/browser_stream.py, with append
// deltas every 25 ms, a 20 s answer took 3.6 s of it drawn at every frame, 1.7–2.2 s at 50 ms, 1.5 s at
// 100 ms (the page of before, redrawing all at each 100 ms cumulative delta: 1.9 s).
const STREAM_DRAW_MS = 50;

export class Store {
  constructor() {
    this.state = {
      session: null, // {kind: "session", name}: signed in over the session cookie (the page holds no credential)
      status: "signed-out", // signed-out | connecting | open | reconnecting
      ready: false, // the first `ready` came: the person is signed in
      signInError: "",
      conversations: [],
      currentId: null,
      chats: {},
      models: null, // models.snapshot (global)
      globalModel: null,
      globalReasoning: null,
      capabilities: null,
      toast: "",
    };
    this.listeners = new Set();
    this.queued = false; // a render is due at the end of this task
    this.frameQueued = false; // a render is due at the next animation frame
    this.dirty = false; // the state changed since the last render
    this.renders = 0; // how many times something was drawn (for the tests and bench/browser_stream.py)
    // A streaming answer on screen listens to its own draft (subscribeDraft): a delta then redraws
    // that answer alone, not the page (by message_id).
    this.draftListeners = new Map();
    this.grownDrafts = new Set(); // drafts changed since the last render, for their listeners
    this.lastDraw = -Infinity; // when something was last drawn (performance.now())
    // Streamed drafts built from append deltas: their text and its length in code points, kept as
    // deltas come, so that no delta counts the whole draft again (by message_id).
    this.drafts = new Map();
    // Messages whose append deltas can't be applied (no draft, or a shorter one, for the offset):
    // ignored until a delta with offset 0 or message.complete brings the whole text.
    this.outOfSync = new Set();
  }

  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  // `deferred`: a streamed draft's change, drawn at an animation frame (STREAM_DRAW_MS after the last
  // drawing at the earliest) with every other change made by then, so that a fast stream costs at
  // most one render a frame. Anything else is drawn at
  // the end of the task: several changes in one task (an event and what follows from it) make one
  // render, and it shows the deferred changes made before them too, in order.
  set(patch, { deferred = false } = {}) {
    this.state = { ...this.state, ...patch };
    this.dirty = true;
    this.schedule(deferred);
  }

  schedule(deferred) {
    if (this.queued) return;
    if (!deferred) {
      this.queued = true;
      queueMicrotask(() => {
        this.queued = false;
        this.flush();
      });
    } else if (!this.frameQueued) {
      this.frameQueued = true;
      const draw = () =>
        requestAnimationFrame(() => {
          this.frameQueued = false;
          this.flush();
        });
      const wait = this.lastDraw + STREAM_DRAW_MS - performance.now();
      if (wait > 0) setTimeout(draw, wait);
      else draw();
    }
  }

  flush() {
    // Nothing to do when an event that came after the deferred change has drawn it already.
    if (!this.dirty && !this.grownDrafts.size) return;
    this.renders += 1;
    this.lastDraw = performance.now();
    if (this.dirty) {
      this.dirty = false;
      for (const listener of this.listeners) listener(this.state);
    }
    const grown = [...this.grownDrafts];
    this.grownDrafts.clear();
    for (const messageId of grown) for (const listener of this.draftListeners.get(messageId) || []) listener();
  }

  // `listener()` after each change of the streamed draft of `messageId` (read it with draftText).
  subscribeDraft(messageId, listener) {
    if (!this.draftListeners.has(messageId)) this.draftListeners.set(messageId, new Set());
    this.draftListeners.get(messageId).add(listener);
    return () => {
      const listeners = this.draftListeners.get(messageId);
      listeners.delete(listener);
      if (!listeners.size) this.draftListeners.delete(messageId);
    };
  }

  // The newest streamed draft of `messageId`, or undefined when it has none (any more).
  draftText(messageId) {
    const kept = this.drafts.get(messageId);
    return kept && kept.text;
  }

  // A streamed draft changed. The state has it at once; what is drawn changes at the next animation
  // frame: only the answer, when it is on screen and listening, else the page.
  setDraft(id, messageId, text, points) {
    this.drafts.set(messageId, { text, points });
    const chat = this.chat(id);
    const index = chat.messages.findIndex((m) => m.message_id === messageId);
    if (index < 0 || !chat.messages[index].streaming || !this.draftListeners.has(messageId)) {
      this.updateMessage(id, messageId, () => ({ text }), {
        create: { message_id: messageId, role: "assistant", streaming: true },
        deferred: true,
      });
      return;
    }
    const messages = chat.messages.slice();
    messages[index] = { ...messages[index], text };
    this.state = { ...this.state, chats: { ...this.state.chats, [id]: { ...chat, messages } } };
    this.grownDrafts.add(messageId);
    this.schedule(true);
  }

  chat(id) {
    return this.state.chats[id] || emptyChat();
  }

  updateChat(id, change, options) {
    const next = { ...this.chat(id), ...change(this.chat(id)) };
    this.set({ chats: { ...this.state.chats, [id]: next } }, options);
  }

  updateMessage(id, messageId, change, { create, deferred } = {}) {
    this.updateChat(id, (chat) => {
      const index = chat.messages.findIndex((m) => m.message_id === messageId);
      if (index < 0) {
        if (!create) return {};
        return { messages: [...chat.messages, { ...create, ...change(create) }] };
      }
      const messages = chat.messages.slice();
      messages[index] = { ...messages[index], ...change(messages[index]) };
      return { messages };
    }, { deferred });
  }

  // The streamed text of a message ends (complete, or a snapshot's text in its place).
  forgetDraft(messageId) {
    this.drafts.delete(messageId);
    this.outOfSync.delete(messageId);
  }

  // The length in code points of `text`, the draft of `messageId`: kept from its deltas, else counted.
  draftLength(messageId, text) {
    const kept = this.drafts.get(messageId);
    return kept && kept.points !== null && kept.text === text ? kept.points : codePointCount(text);
  }

  // An append delta (`delta_append`): the first `offset` code points of the draft stay, `append`
  // replaces the rest. Offset 0 is the whole text; a delta that does not fit the draft held (none,
  // or a shorter one) is not shown, nor is any after it, until one with offset 0 or the complete text.
  applyAppend(frame) {
    const { conversation_id: id, message_id: messageId, offset } = frame;
    const append = frame.append || "";
    let kept = "";
    if (offset === 0) this.outOfSync.delete(messageId);
    else {
      if (this.outOfSync.has(messageId)) return;
      const message = this.chat(id).messages.find((m) => m.message_id === messageId);
      const draft = message && typeof message.text === "string" ? message.text : null;
      const length = draft === null ? -1 : this.draftLength(messageId, draft);
      if (!Number.isInteger(offset) || offset < 0 || offset > length) {
        this.outOfSync.add(messageId);
        return;
      }
      kept = offset === length ? draft : dropCodePoints(draft, length - offset);
    }
    this.setDraft(id, messageId, kept + append, offset + codePointCount(append));
  }

  // Replace a conversation's state with its `conversation.history` snapshot (open and reconnect).
  applySnapshot(frame) {
    const chat = this.chat(frame.conversation_id);
    const messages = frame.messages.map((m) => ({ ...m }));
    if (frame.run) {
      this.forgetDraft(frame.run.message_id);
      messages.push({
        message_id: frame.run.message_id,
        role: "assistant",
        text: frame.run.text,
        run_id: frame.run.run_id,
        streaming: true,
      });
    }
    const byId = (list, key) => Object.fromEntries(list.map((item) => [item[key], { ...item, resolved: null }]));
    this.updateChat(frame.conversation_id, () => ({
      loaded: true,
      messages,
      hasMore: frame.has_more,
      loadingOlder: false,
      run: frame.run ? { run_id: frame.run.run_id, message_id: frame.run.message_id } : null,
      tools: Object.fromEntries(frame.tools.map((t) => [t.tool_call_id, t])),
      approvals: byId(frame.approvals, "approval_id"),
      clarifications: byId(frame.clarifications, "clarify_id"),
      attachments: frame.attachments,
      yolo: chat.yolo,
    }));
  }

  prependPage(frame) {
    this.updateChat(frame.conversation_id, (chat) => {
      const known = new Set(chat.messages.map((m) => m.message_id));
      const older = frame.messages.filter((m) => !known.has(m.message_id));
      const seen = new Set(chat.attachments.map((a) => a.attachment_id));
      const attachments = [...frame.attachments.filter((a) => !seen.has(a.attachment_id)), ...chat.attachments];
      return { messages: [...older, ...chat.messages], hasMore: frame.has_more, loadingOlder: false, attachments };
    });
  }

  touchConversation(id, fields = {}) {
    const now = new Date().toISOString();
    const list = this.state.conversations.slice();
    const index = list.findIndex((c) => c.conversation_id === id);
    const entry = { conversation_id: id, name: "New chat", last_active: now, ...(index >= 0 ? list[index] : {}), ...fields };
    if (index >= 0) list.splice(index, 1);
    list.unshift(entry);
    this.set({ conversations: list });
  }

  // One server event (broadcast or reply) into the state.
  apply(frame) {
    const id = frame.conversation_id;
    switch (frame.type) {
      case "conversation.snapshot": {
        const byActivity = (a, b) => (b.last_active || "").localeCompare(a.last_active || "");
        const conversations = frame.conversations.slice().sort(byActivity);
        const stillThere = conversations.some((c) => c.conversation_id === this.state.currentId);
        this.set({ conversations, currentId: stillThere ? this.state.currentId : null });
        break;
      }
      case "conversation.created":
      case "conversation.updated":
        this.touchConversation(id, { name: frame.name });
        break;
      case "conversation.renamed":
        this.set({
          conversations: this.state.conversations.map((c) => (c.conversation_id === id ? { ...c, name: frame.name } : c)),
        });
        break;
      case "conversation.deleted": {
        const chats = { ...this.state.chats };
        delete chats[id];
        this.set({
          conversations: this.state.conversations.filter((c) => c.conversation_id !== id),
          chats,
          currentId: this.state.currentId === id ? null : this.state.currentId,
        });
        break;
      }
      case "run.accepted":
        this.updateChat(id, () => ({ run: { run_id: frame.run_id, message_id: null }, notice: "" }));
        this.touchConversation(id);
        break;
      case "message.start":
        this.updateChat(id, (chat) => ({ run: { ...(chat.run || {}), run_id: frame.run_id, message_id: frame.message_id } }));
        this.updateMessage(id, frame.message_id, () => ({}), {
          create: { message_id: frame.message_id, role: "assistant", text: "", run_id: frame.run_id, streaming: true },
        });
        break;
      case "message.delta":
        if (typeof frame.text !== "string") {
          this.applyAppend(frame);
          break;
        }
        // Cumulative (a server that did not grant delta_append): the delta's text replaces the bubble's.
        this.setDraft(id, frame.message_id, frame.text, null);
        break;
      case "message.complete":
        this.forgetDraft(frame.message_id);
        // The final text supersedes the draft.
        this.updateMessage(id, frame.message_id, () => ({ text: frame.text, streaming: false, kind: frame.kind || null, ts: frame.ts }), {
          create: { message_id: frame.message_id, role: "assistant" },
        });
        break;
      case "run.finished":
        for (const m of this.chat(id).messages) if (m.run_id === frame.run_id) this.forgetDraft(m.message_id);
        this.updateChat(id, (chat) => {
          const messages = chat.messages.map((m) =>
            m.run_id === frame.run_id && m.role === "assistant"
              ? { ...m, streaming: false, status: frame.status, error: frame.error || null }
              : m,
          );
          const hasTurn = messages.some((m) => m.run_id === frame.run_id && m.role === "assistant");
          if (!hasTurn && frame.status !== "completed") {
            messages.push({ message_id: `end-${frame.run_id}`, role: "assistant", text: "", run_id: frame.run_id, status: frame.status, error: frame.error || null });
          }
          const run = chat.run && chat.run.run_id === frame.run_id ? null : chat.run;
          return { messages, run };
        });
        break;
      case "tool.event":
        this.updateChat(id, (chat) => ({
          tools: { ...chat.tools, [frame.tool_call_id]: { ...(chat.tools[frame.tool_call_id] || {}), ...frame } },
        }));
        break;
      case "approval.request":
        this.updateChat(id, (chat) => ({ approvals: { ...chat.approvals, [frame.approval_id]: { ...frame, resolved: null } } }));
        break;
      case "approval.resolved":
        this.resolveDecision("approvals", frame.approval_id, frame);
        break;
      case "clarify.request":
        this.updateChat(id, (chat) => ({
          clarifications: { ...chat.clarifications, [frame.clarify_id]: { ...frame, resolved: null } },
        }));
        break;
      case "clarify.resolved":
        this.resolveDecision("clarifications", frame.clarify_id, frame);
        break;
      case "yolo.snapshot":
      case "yolo.changed":
        this.updateChat(id, () => ({ yolo: frame.enabled }));
        break;
      case "models.snapshot":
        this.set({ models: frame });
        break;
      case "model.current":
        if (frame.conversation_id) this.updateChat(frame.conversation_id, () => ({ model: frame }));
        else this.set({ globalModel: frame });
        break;
      case "model.changed":
        if (frame.scope === "global") {
          this.set({ globalModel: frame, models: this.state.models && { ...this.state.models, current_model: frame.model } });
          // Every conversation without its own override now follows the new default.
          for (const [cid, chat] of Object.entries(this.state.chats)) {
            if (!chat.model || chat.model.scope !== "conversation") this.updateChat(cid, () => ({ model: { ...frame, scope: "global" } }));
          }
        } else if (frame.conversation_id) this.updateChat(frame.conversation_id, () => ({ model: frame }));
        break;
      case "reasoning.snapshot":
        if (frame.conversation_id) this.updateChat(frame.conversation_id, () => ({ reasoning: frame }));
        else this.set({ globalReasoning: frame });
        break;
      case "reasoning.changed":
        if (frame.scope === "global") {
          for (const [cid, chat] of Object.entries(this.state.chats)) {
            if (!chat.reasoning || chat.reasoning.scope !== "conversation") {
              this.updateChat(cid, (c) => ({ reasoning: { ...(c.reasoning || {}), effort: frame.effort, scope: "global" } }));
            }
          }
        } else if (frame.conversation_id) {
          this.updateChat(frame.conversation_id, (c) => ({ reasoning: { ...(c.reasoning || {}), effort: frame.effort, scope: frame.scope } }));
        }
        break;
      case "attachment.added":
        this.updateChat(id, (chat) => ({
          attachments: [...chat.attachments.filter((a) => a.attachment_id !== frame.attachment.attachment_id), frame.attachment],
        }));
        break;
      default:
        break; // unknown events are ignored, as the protocol allows new ones
    }
  }

  // A resolution names only the decision's id: find the conversation that holds it.
  resolveDecision(kind, decisionId, frame) {
    for (const [cid, chat] of Object.entries(this.state.chats)) {
      if (chat[kind][decisionId]) {
        this.updateChat(cid, (c) => ({ [kind]: { ...c[kind], [decisionId]: { ...c[kind][decisionId], resolved: frame } } }));
      }
    }
  }
}
