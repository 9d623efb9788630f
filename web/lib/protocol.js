// The Pheby protocol over one WebSocket: hello, requests matched to replies by request_id,
// a heartbeat, and reconnection with backoff and jitter. It knows nothing about views or state:
// every server frame goes to `onEvent`, connection changes to `onStatus`.

export const PROTOCOL_VERSION = 1;
// Protocol extensions this client asks for in its hello; `ready.features` says which were granted.
// delta_append: `message.delta` as {offset, append} against the draft held (lib/store.js applies both forms).
// delta_packed: those deltas, after a message's first, as ["d", stream, offset, append] (`unpack`).
// delta_paced: at most one every 50 ms, the rest joined: the store draws a draft no more often (lib/store.js).
export const FEATURES = ["delta_append", "delta_packed", "delta_paced"];
const MAX_STREAMS = 64; // messages a connection remembers the stream numbers of (a few stream at once)
const HEARTBEAT_MS = 20000;      // our `ping`; a missing `pong` within PONG_TIMEOUT_MS means the socket is dead
const PONG_TIMEOUT_MS = 10000;
const REQUEST_TIMEOUT_MS = 30000;
const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 15000;

// Handshake errors that retrying with the same cookie cannot fix.
const FATAL_HELLO_CODES = new Set(["unauthorized", "version_mismatch", "rate_limited"]);

// A request the server refused (its error code and message), or one that never got an answer.
export class ProtocolError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export class PhebyConnection {
  // No secret: the hello is authenticated by the session cookie the WebSocket handshake carries.
  constructor({ url, onEvent, onStatus }) {
    this.url = url;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.pending = new Map(); // request_id -> {resolve, reject, timer}
    this.nextId = 1;
    this.idPrefix = Math.random().toString(36).slice(2, 10);
    this.socket = null;
    this.attempt = 0;
    this.stopped = false;
    this.ready = false;
    this.everReady = false;
    this.features = []; // granted by the last `ready`
    // delta_packed: stream number -> the message it names, from the whole `message.delta` that carried it.
    this.streams = new Map();
    this.heartbeat = null;
    this.pongTimer = null;
    this.retryTimer = null;
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.stopHeartbeat();
    if (this.socket) this.socket.close(1000, "signed out");
    this.failPending("closed", "Signed out");
  }

  connect() {
    this.ready = false;
    this.onStatus(this.everReady ? "reconnecting" : "connecting");
    const socket = new WebSocket(this.url);
    this.socket = socket;
    this.streams.clear(); // numbered by the connection they came on
    socket.onopen = () => {
      socket.send(
        JSON.stringify({ type: "hello", protocol_version: PROTOCOL_VERSION, request_id: "hello", features: FEATURES }),
      );
    };
    socket.onmessage = (message) => this.receive(socket, message.data);
    socket.onclose = () => {
      if (socket !== this.socket) return;
      this.stopHeartbeat();
      this.ready = false;
      this.failPending("disconnected", "The connection dropped before the server answered");
      if (!this.stopped) this.scheduleReconnect();
    };
  }

  receive(socket, data) {
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    if (!this.ready) {
      if (frame.type === "ready") {
        this.ready = true;
        this.features = Array.isArray(frame.features) ? frame.features : [];
        this.attempt = 0;
        const first = !this.everReady;
        this.everReady = true;
        this.startHeartbeat();
        this.onStatus("open", { first });
      } else if (frame.type === "error") {
        const { code, message } = frame.error;
        if (FATAL_HELLO_CODES.has(code)) {
          this.stopped = true;
          socket.close();
          this.onStatus("rejected", { code, message });
        }
      }
      return;
    }
    if (Array.isArray(frame)) {
      const delta = this.unpack(frame);
      if (delta) this.onEvent(delta, { mine: false });
      return;
    }
    if (frame.type === "pong") {
      clearTimeout(this.pongTimer);
      return;
    }
    if (frame.type === "message.delta" && Number.isInteger(frame.stream)) this.nameStream(frame);
    else if (frame.type === "message.complete") this.endStreams(frame.message_id);
    const waiter = frame.request_id ? this.pending.get(frame.request_id) : undefined;
    if (waiter) {
      this.pending.delete(frame.request_id);
      clearTimeout(waiter.timer);
      if (frame.type === "error") waiter.reject(new ProtocolError(frame.error.code, frame.error.message));
      else waiter.resolve(frame);
    }
    // Every frame (replies too: approval.resolved carries the responder's request_id) updates state.
    if (frame.type !== "error" || !waiter) this.onEvent(frame, { mine: Boolean(waiter) });
  }

  // A packed append delta as the `message.delta` it stands for; null for a frame this client can't
  // place (an unknown stream, another packed kind): the store then waits for a whole text.
  unpack(frame) {
    const [tag, stream, offset, append] = frame;
    const named = tag === "d" ? this.streams.get(stream) : undefined;
    if (!named || typeof append !== "string") return null;
    return { type: "message.delta", conversation_id: named.conversation_id, message_id: named.message_id, offset, append };
  }

  nameStream(frame) {
    this.streams.delete(frame.stream); // re-inserted: the newest named stays longest
    this.streams.set(frame.stream, { conversation_id: frame.conversation_id, message_id: frame.message_id });
    if (this.streams.size > MAX_STREAMS) this.streams.delete(this.streams.keys().next().value);
  }

  endStreams(messageId) {
    for (const [stream, named] of this.streams) if (named.message_id === messageId) this.streams.delete(stream);
  }

  // Send a request; resolves with its reply, rejects with a ProtocolError.
  request(type, fields = {}) {
    if (!this.ready) return Promise.reject(new ProtocolError("offline", "Not connected to the server"));
    // Unique across tabs: some replies are broadcast to every connection with the sender's
    // request_id (run.accepted, approval.resolved), and must not resolve another tab's request.
    const request_id = `${this.idPrefix}-${this.nextId++}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(request_id);
        reject(new ProtocolError("timeout", "The server did not answer in time"));
      }, REQUEST_TIMEOUT_MS);
      this.pending.set(request_id, { resolve, reject, timer });
      this.socket.send(JSON.stringify({ type, request_id, ...fields }));
    });
  }

  // Send a message whose answer nobody waits for. A refusal is dropped: a server without an
  // extension answers it `unknown_type`, which must not disturb the page.
  notify(type, fields = {}) {
    this.request(type, fields).catch(() => {});
  }

  failPending(code, message) {
    for (const { reject, timer } of this.pending.values()) {
      clearTimeout(timer);
      reject(new ProtocolError(code, message));
    }
    this.pending.clear();
  }

  startHeartbeat() {
    this.stopHeartbeat();
    this.heartbeat = setInterval(() => {
      if (!this.ready) return;
      this.socket.send(JSON.stringify({ type: "ping" }));
      clearTimeout(this.pongTimer);
      this.pongTimer = setTimeout(() => this.socket.close(4000, "no pong"), PONG_TIMEOUT_MS);
    }, HEARTBEAT_MS);
  }

  stopHeartbeat() {
    clearInterval(this.heartbeat);
    clearTimeout(this.pongTimer);
  }

  scheduleReconnect() {
    this.onStatus(this.everReady ? "reconnecting" : "connecting", { attempt: this.attempt + 1 });
    // Exponential backoff with full jitter, so many clients don't return in step.
    const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** this.attempt);
    const delay = BACKOFF_MIN_MS / 2 + Math.random() * ceiling;
    this.attempt += 1;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.connect(), delay);
  }
}

export function socketUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/ws`;
}
