// What the views can ask for: each action sends protocol messages or REST calls and feeds the
// answers to the store. The one place that knows which message answers which.
import { PhebyConnection, ProtocolError, socketUrl } from "./protocol.js";
import { api, login, startSession } from "./api.js";
import { turnOffNotifications } from "./push.js";

// Messages per conversation.open page; older pages load as the person scrolls up.
const HISTORY_PAGE = 100;
const SEARCH_PAGES = 5; // earlier pages a search hit may load before opening the page around it instead

// Bring a shown message into view and mark it for a moment (after the transcript has rendered it).
function scrollToMessage(messageId) {
  const reveal = () => {
    const element = document.querySelector(`.transcript [data-message-id="${CSS.escape(messageId)}"]`);
    if (!element) return;
    element.scrollIntoView({ block: "center" });
    element.classList.add("search-hit");
    setTimeout(() => element.classList.remove("search-hit"), 4000);
  };
  requestAnimationFrame(() => requestAnimationFrame(reveal));
  setTimeout(reveal, 300); // once more, after the transcript's own scroll to the bottom on new renders
}
// How long after another tab's run starts its user turn is read back (Hermes stores it first).
const SYNC_DELAY_MS = 300;

// How long a page that could not ask the server whether it is signed in waits before asking again.
const RESUME_RETRY_MS = 3000;

// A notification opens `/?conversation=<id>`: that conversation is shown once signed in.
const CONVERSATION_PARAMETER = "conversation";

// Plain sentences for the error codes a person can meet.
const SENTENCES = {
  unauthorized: "That secret or token was not accepted.",
  rate_limited: "Too many failed attempts from here. Wait a minute, then try again.",
  version_mismatch: "This page speaks a different protocol version than the server. Reload the page.",
  run_active: "The agent is still answering in this conversation. Wait for it to finish, or stop it, then send again.",
  not_implemented: "The server can't do that with this Hermes.",
  conversation_not_found: "That conversation no longer exists.",
  approval_not_found: "That approval is no longer waiting (answered elsewhere or expired).",
  clarify_not_found: "That question is no longer waiting (answered elsewhere or expired).",
  too_large: "That is too large for the server.",
  offline: "Not connected to the server right now.",
  session_ended: "Your session has ended. Sign in again.",
};

export function sentence(error) {
  const code = error && error.code;
  if (code === "not_implemented" || code === "bad_request") return error.message;
  if (code === "unauthorized" && error.message) return `Not allowed: ${error.message}`;
  return SENTENCES[code] || (error && error.message) || "Something went wrong.";
}

export class Client {
  constructor(store) {
    this.store = store;
    this.connection = null;
    this.myRuns = new Set(); // runs this tab started: other tabs' runs trigger a history re-read
    this.syncedRuns = new Set();
    this.historyPage = HISTORY_PAGE;
    this.linkedConversation = new URLSearchParams(location.search).get(CONVERSATION_PARAMETER);
    this.sessionChecks = 0; // numbers the load's session checks: only the latest (before a sign-in) counts
  }

  // --- session ---------------------------------------------------------------------------

  // The page keeps no credential: the HttpOnly session cookie is the sign-in. On load, `GET /api/me`
  // says whether it still works (200: connect; else the sign-in screen). The sign-in form stays usable while
  // it is asked (held up, it must not hold the person up), and an answer that comes after a sign-in began
  // is not heeded.
  async resume() {
    const asked = ++this.sessionChecks;
    let me;
    try {
      me = await api("GET", "/api/me");
    } catch (error) {
      if (asked !== this.sessionChecks) return;
      if (error.status === 401 || error.status === 403) {
        this.store.set({ status: "signed-out", signInError: "" });
        return;
      }
      // The server is not reachable yet (or not ready): ask again, as the socket would reconnect.
      this.store.set({ signInError: "Can't reach the server yet; still trying…" });
      clearTimeout(this.resumeTimer);
      this.resumeTimer = setTimeout(() => !this.store.state.session && this.resume(), RESUME_RETRY_MS);
      return;
    }
    if (asked !== this.sessionChecks) return;
    this.connect({ kind: "session", name: me.name });
  }

  async signInWithSecret(secret) {
    await this.signIn(() => startSession(secret.trim()), SENTENCES.unauthorized);
  }

  async signInWithPassword(username, password) {
    await this.signIn(() => login(username, password), "That username and password don't match an account.");
  }

  // Starts a session (its cookie), then connects with a hello the cookie authenticates.
  async signIn(start, refused) {
    clearTimeout(this.resumeTimer);
    this.sessionChecks++; // the load's own check, if still asked, is answered by this sign-in
    this.store.set({ signInError: "", status: "connecting" });
    try {
      const answer = await start();
      // A second factor is due (202): the sign-in form asks for the code (web/views/signin/second_factor.js).
      if (answer && answer.second_factor) return this.store.set({ secondFactor: answer, status: "signed-out" });
      const me = await api("GET", "/api/me");
      this.connect({ kind: "session", name: me.name });
    } catch (error) {
      const text =
        error.status === 401 ? refused : error.status === 429 ? SENTENCES.rate_limited : `Sign-in failed: ${error.message}`;
      this.store.set({ signInError: text, status: "signed-out" });
    }
  }

  connect(session) {
    if (this.connection) this.connection.stop();
    this.store.set({ session, signInError: "", status: "connecting", ready: false });
    this.connection = new PhebyConnection({
      url: socketUrl(),
      onEvent: (frame, meta) => this.onEvent(frame, meta),
      onStatus: (status, detail) => this.onStatus(status, detail),
    });
    this.connection.start();
  }

  async signOut() {
    // Notifications are for the person signed in: the next one here must turn them on again.
    await turnOffNotifications();
    try {
      await api("POST", "/api/auth/logout"); // ends the session, its cookie and its sockets
    } catch {
      // an already ended session: signed out either way
    }
    if (this.connection) this.connection.stop();
    this.connection = null;
    this.store.set({ session: null, ready: false, status: "signed-out", conversations: [], chats: {}, currentId: null, capabilities: null });
  }

  onStatus(status, detail = {}) {
    if (status === "rejected") {
      // An expired or ended session (or a locked-out address): back to the sign-in screen.
      this.connection = null;
      const text = detail.code === "unauthorized" ? SENTENCES.session_ended : SENTENCES[detail.code] || detail.message;
      this.store.set({ session: null, ready: false, status: "signed-out", signInError: text });
      return;
    }
    this.store.set({ status });
    if (status === "connecting" && detail.attempt > 0 && !this.store.state.ready) {
      this.store.set({ signInError: "Can't reach the server yet; still trying…" });
    }
    if (status === "open") {
      this.store.set({ ready: true, signInError: "" });
      this.afterReady(detail.first);
    }
  }

  // After every `ready`: presence, the list, the open conversation's snapshot (or the one the
  // page's address names), and the settings it shows.
  async afterReady(first) {
    this.sendPresence();
    const listed = this.refreshList();
    this.request("models.list").catch(() => {});
    this.request("models.current").catch(() => {});
    this.request("reasoning.current").catch(() => {});
    if (first) this.loadCapabilities();
    if (this.linkedConversation) {
      // Against the list: a conversation deleted since the notification is said so, not opened.
      if (await listed) this.openLinkedConversation();
      return;
    }
    const { currentId } = this.store.state;
    if (currentId) this.open(currentId);
  }

  // Shows the conversation named in the address, then takes the name out of it, so that a reload
  // later shows what the person chose since.
  openLinkedConversation() {
    const id = this.linkedConversation;
    this.linkedConversation = null;
    const address = new URL(location.href);
    address.searchParams.delete(CONVERSATION_PARAMETER);
    history.replaceState(history.state, "", address.pathname + address.search + address.hash);
    if (this.store.state.conversations.some((c) => c.conversation_id === id)) this.select(id);
    else this.toast(SENTENCES.conversation_not_found);
  }

  // Whether this tab is in front, for the server's choice of what to push to this person's devices.
  sendPresence() {
    if (!this.connection) return;
    this.connection.notify("presence.set", { state: document.visibilityState === "visible" ? "foreground" : "background" });
  }

  async loadCapabilities() {
    try {
      const { capabilities } = await api("GET", "/api/capabilities");
      this.store.set({ capabilities });
    } catch {
      this.store.set({ capabilities: null });
    }
  }

  request(type, fields) {
    if (!this.connection) return Promise.reject(new ProtocolError("offline", "Not signed in"));
    return this.connection.request(type, fields);
  }

  onEvent(frame, { mine }) {
    this.store.apply(frame);
    const id = frame.conversation_id;
    if (!id || id !== this.store.state.currentId || !frame.run_id || this.myRuns.has(frame.run_id)) return;
    // A run another tab or device started: its user text is no event, so read the transcript
    // (once, shortly after the run starts, and again when it ends).
    if (frame.type === "run.finished") this.open(id);
    else if (!mine && !this.syncedRuns.has(frame.run_id)) {
      this.syncedRuns.add(frame.run_id);
      setTimeout(() => this.open(id), SYNC_DELAY_MS);
    }
  }

  // --- conversations -----------------------------------------------------------------------

  // Resolves with the list's snapshot, or undefined when it could not be read.
  refreshList() {
    return this.request("conversation.list").catch((error) => this.toast(sentence(error)));
  }

  async create() {
    try {
      const created = await this.request("conversation.create", { name: "New chat" });
      this.select(created.conversation_id);
      return created.conversation_id;
    } catch (error) {
      this.toast(sentence(error));
      return null;
    }
  }

  select(id) {
    this.store.set({ currentId: id });
    if (id) this.open(id);
  }

  async open(id) {
    try {
      const history = await this.request("conversation.open", { conversation_id: id, limit: this.historyPage });
      this.store.applySnapshot(history);
      this.request("yolo.current", { conversation_id: id }).catch(() => {});
      this.request("models.current", { conversation_id: id }).catch(() => {});
      this.request("reasoning.current", { conversation_id: id }).catch(() => {});
    } catch (error) {
      if (error.code === "conversation_not_found") this.store.apply({ type: "conversation.deleted", conversation_id: id });
      else if (error.code !== "disconnected") this.toast(sentence(error));
    }
  }

  // Open a conversation at one of its messages (a search hit): earlier pages load until it is shown
  // (at most SEARCH_PAGES of them; beyond, the page around it, `around_message_id`), then it is
  // scrolled to. A hit without a message (a conversation's name) just opens the conversation.
  async openAt(id, messageId) {
    this.select(id);
    if (!messageId) return;
    const shown = () => this.store.chat(id).messages.some((m) => m.message_id === messageId);
    await this.open(id);
    for (let page = 0; !shown() && this.store.chat(id).hasMore && page < SEARCH_PAGES; page++) await this.loadOlder(id);
    if (!shown()) {
      try {
        const around = { conversation_id: id, limit: this.historyPage, around_message_id: messageId };
        this.store.applySnapshot(await this.request("conversation.open", around));
      } catch (error) {
        this.toast(sentence(error));
        return;
      }
    }
    scrollToMessage(messageId);
  }

  async loadOlder(id) {
    const chat = this.store.chat(id);
    if (!chat.hasMore || chat.loadingOlder || !chat.messages.length) return;
    const first = chat.messages.find((m) => /^m\d+$/.test(m.message_id));
    if (!first) return;
    this.store.updateChat(id, () => ({ loadingOlder: true }));
    try {
      const page = await this.request("conversation.open", {
        conversation_id: id,
        limit: this.historyPage,
        before_message_id: first.message_id,
      });
      this.store.prependPage(page);
    } catch (error) {
      this.store.updateChat(id, () => ({ loadingOlder: false }));
      this.toast(sentence(error));
    }
  }

  async rename(id, name) {
    try {
      await this.request("conversation.rename", { conversation_id: id, name });
    } catch (error) {
      this.toast(sentence(error));
    }
  }

  async remove(id) {
    try {
      await this.request("conversation.delete", { conversation_id: id });
    } catch (error) {
      this.toast(sentence(error));
    }
  }

  // --- chat --------------------------------------------------------------------------------

  // Resolves true when the server accepted the run; the composer keeps the text otherwise.
  async send(id, text, attachments = []) {
    const localId = `local-${Date.now()}`;
    this.store.updateMessage(id, localId, () => ({}), {
      create: { message_id: localId, role: "user", text, ts: new Date().toISOString(), pending: true },
    });
    try {
      const fields = { conversation_id: id, text };
      if (attachments.length) fields.attachment_ids = attachments.map((a) => a.attachment_id);
      const reply = await this.request("chat.send", fields); // run.accepted
      // Recorded before the run's next frame is handled (that is a later task), so its events count as this tab's.
      this.myRuns.add(reply.run_id);
      // The server anchors this turn's uploads to `user-<run_id>`.
      this.store.updateMessage(id, localId, () => ({ message_id: `user-${reply.run_id}`, pending: false, run_id: reply.run_id }));
      return true;
    } catch (error) {
      this.store.updateChat(id, (chat) => ({
        messages: chat.messages.filter((m) => m.message_id !== localId),
        notice: sentence(error),
      }));
      return false;
    }
  }

  async stop(id) {
    const chat = this.store.chat(id);
    if (!chat.run) return;
    try {
      await this.request("run.cancel", { conversation_id: id, run_id: chat.run.run_id });
    } catch (error) {
      if (error.code !== "not_found") this.toast(sentence(error));
    }
  }

  async approve(approvalId, choice, reason) {
    const fields = { approval_id: approvalId, choice };
    if (reason) fields.reason = reason;
    try {
      await this.request("approval.respond", fields);
    } catch (error) {
      this.toast(sentence(error));
    }
  }

  async clarify(id, clarifyId, response) {
    try {
      await this.request("clarify.respond", { clarify_id: clarifyId, response });
      this.store.updateChat(id, (chat) => ({
        clarifications: { ...chat.clarifications, [clarifyId]: { ...chat.clarifications[clarifyId], answer: response } },
      }));
    } catch (error) {
      this.toast(sentence(error));
    }
  }

  async setYolo(id, enabled) {
    try {
      await this.request("yolo.set", { conversation_id: id, enabled });
    } catch (error) {
      this.toast(sentence(error));
    }
  }

  // --- models and reasoning -----------------------------------------------------------------

  // Resolves with a sentence for the person, or "" on success.
  async setModel(model, provider, conversationId) {
    const fields = { model };
    if (provider) fields.provider = provider;
    if (conversationId) fields.conversation_id = conversationId;
    try {
      await this.request("model.set", fields);
      return "";
    } catch (error) {
      return sentence(error);
    }
  }

  async setReasoning(effort, conversationId) {
    const fields = { effort };
    if (conversationId) fields.conversation_id = conversationId;
    try {
      await this.request("reasoning.set", fields);
      return "";
    } catch (error) {
      return sentence(error);
    }
  }

  toast(text) {
    this.store.set({ toast: text });
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => this.store.set({ toast: "" }), 6000);
  }
}
