// The composer: Enter sends, Shift+Enter is a newline, Esc stops the run. Files come from the
// picker, drag and drop or paste (up to 10), upload with a progress bar, and go with chat.send.
import { html, useEffect, useRef, useState } from "../lib/html.js";
import { uploadAttachment } from "../lib/api.js";
import { PaperclipIcon, SendIcon, StopIcon } from "./icons.js";

const MAX_FILES = 10;
let nextUpload = 1;

export function Composer({ client, state, conversationId, chat }) {
  const [text, setText] = useState("");
  const [uploads, setUploads] = useState([]); // {key, file, progress, attachment?, error?}
  const [dragging, setDragging] = useState(false);
  const [sending, setSending] = useState(false);
  const input = useRef(null);
  const picker = useRef(null);
  const running = Boolean(chat.run);
  const online = state.status === "open";

  useEffect(() => {
    // A new conversation starts with an empty composer; the text typed while offline stays.
    setUploads([]);
    input.current && input.current.focus();
  }, [conversationId]);

  const update = (key, change) => setUploads((list) => list.map((u) => (u.key === key ? { ...u, ...change } : u)));

  const addFiles = (files) => {
    const room = MAX_FILES - uploads.length;
    const chosen = [...files].slice(0, Math.max(0, room));
    if (files.length > room) client.toast(`Up to ${MAX_FILES} files per message.`);
    for (const file of chosen) {
      const key = nextUpload++;
      setUploads((list) => [...list, { key, file, progress: 0 }]);
      uploadAttachment(conversationId, file, (progress) => update(key, { progress }))
        .then((attachment) => update(key, { attachment, progress: 1 }))
        .catch((error) => update(key, { error: error.message || "Upload failed" }));
    }
  };

  const uploading = uploads.some((u) => !u.attachment && !u.error);
  const canSend = online && !running && !sending && !uploading && text.trim().length > 0;

  const send = async () => {
    if (!canSend) return;
    setSending(true);
    const ready = uploads.filter((u) => u.attachment).map((u) => u.attachment);
    // Sent once: on failure the text and files stay for the person to send again themselves.
    const accepted = await client.send(conversationId, text, ready);
    setSending(false);
    if (accepted) {
      setText("");
      setUploads([]);
    }
  };

  const onKeyDown = (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    } else if (event.key === "Escape" && running) {
      event.preventDefault();
      client.stop(conversationId);
    }
  };

  const onDrop = (event) => {
    event.preventDefault();
    setDragging(false);
    if (event.dataTransfer.files.length) addFiles(event.dataTransfer.files);
  };

  const onPaste = (event) => {
    const files = event.clipboardData && event.clipboardData.files;
    if (files && files.length) {
      event.preventDefault();
      addFiles(files);
    }
  };

  return html`<form class=${`composer${dragging ? " dragging" : ""}`} onSubmit=${(e) => { e.preventDefault(); send(); }}
      onDragOver=${(e) => { e.preventDefault(); setDragging(true); }} onDragLeave=${() => setDragging(false)} onDrop=${onDrop}>
    ${uploads.length > 0 && html`<ul class="uploads" aria-label="Files to send">
      ${uploads.map((u) => html`<li key=${u.key} class=${u.error ? "failed" : u.attachment ? "done" : ""}>
        <span class="filename">${u.file.name}</span>
        ${u.error ? html`<span class="error small">${u.error}</span>` : html`<progress max="1" value=${u.progress} aria-label=${`Uploading ${u.file.name}`}></progress>`}
        <button type="button" class="icon" aria-label=${`Remove ${u.file.name}`} onClick=${() => setUploads((l) => l.filter((x) => x.key !== u.key))}>×</button>
      </li>`)}
    </ul>`}
    <div class="composer-row">
      <button type="button" class="icon attach" aria-label="Attach files" title="Attach files" onClick=${() => picker.current.click()}><${PaperclipIcon} /></button>
      <input ref=${picker} type="file" multiple hidden aria-label="Choose files" onChange=${(e) => { addFiles(e.target.files); e.target.value = ""; }} />
      <textarea ref=${input} rows="1" aria-label="Message" placeholder=${!online ? "Offline — your text stays here" : running ? "The agent is answering — Esc stops it" : "Message Pheby…"}
        value=${text} onInput=${(e) => setText(e.target.value)} onKeyDown=${onKeyDown} onPaste=${onPaste}></textarea>
      ${running
        ? html`<button type="button" class="stop" aria-label="Stop" title="Stop (Esc)" onClick=${() => client.stop(conversationId)}><${StopIcon} /></button>`
        : html`<button type="submit" class="send primary" aria-label="Send" title="Send (Enter)" disabled=${!canSend}><${SendIcon} /></button>`}
    </div>
  </form>`;
}
