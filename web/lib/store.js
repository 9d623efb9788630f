// The client's state and how each server event changes it. Views read `store.state` and
// re-render on `subscribe`; nothing here talks to the network.

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

export class Store {
  constructor() {
    this.state = {
      session: null, // {secret, kind: "owner" | "password", username?}
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
    this.queued = false;
  }

  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  set(patch) {
    this.state = { ...this.state, ...patch };
    // Several changes in one task (an event and what follows from it) make one render.
    if (!this.queued) {
      this.queued = true;
      queueMicrotask(() => {
        this.queued = false;
        for (const listener of this.listeners) listener(this.state);
      });
    }
  }

  chat(id) {
    return this.state.chats[id] || emptyChat();
  }

  updateChat(id, change) {
    const next = { ...this.chat(id), ...change(this.chat(id)) };
    this.set({ chats: { ...this.state.chats, [id]: next } });
  }

  updateMessage(id, messageId, change, { create } = {}) {
    this.updateChat(id, (chat) => {
      const index = chat.messages.findIndex((m) => m.message_id === messageId);
      if (index < 0) {
        if (!create) return {};
        return { messages: [...chat.messages, { ...create, ...change(create) }] };
      }
      const messages = chat.messages.slice();
      messages[index] = { ...messages[index], ...change(messages[index]) };
      return { messages };
    });
  }

  // Replace a conversation's state with its `conversation.history` snapshot (open and reconnect).
  applySnapshot(frame) {
    const chat = this.chat(frame.conversation_id);
    const messages = frame.messages.map((m) => ({ ...m }));
    if (frame.run) {
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
        // Cumulative: the delta's text replaces the bubble's.
        this.updateMessage(id, frame.message_id, () => ({ text: frame.text }), {
          create: { message_id: frame.message_id, role: "assistant", streaming: true },
        });
        break;
      case "message.complete":
        // The final text supersedes the draft.
        this.updateMessage(id, frame.message_id, () => ({ text: frame.text, streaming: false, kind: frame.kind || null, ts: frame.ts }), {
          create: { message_id: frame.message_id, role: "assistant" },
        });
        break;
      case "run.finished":
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
