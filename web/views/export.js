// A conversation's Export menu: its transcript as Markdown or JSON, downloaded over the session cookie.
import { fetchBlob, saveBlob } from "../lib/api.js";
import { html, useState } from "../lib/html.js";
import { sentence } from "../lib/client.js";

const FORMATS = [["md", "Markdown"], ["json", "JSON"]];

export function ExportMenu({ client, conversation }) {
  const [open, setOpen] = useState(false);
  const id = conversation.conversation_id;
  const download = async (format) => {
    setOpen(false);
    try {
      const blob = await fetchBlob(`/api/conversations/${encodeURIComponent(id)}/export?format=${format}`);
      saveBlob(blob, `${conversation.name}.${format}`);
    } catch (error) {
      client.toast(sentence(error));
    }
  };
  return html`<span class="export">
    <button class="icon export-toggle" aria-label=${`Export ${conversation.name}`} aria-expanded=${open} title="Export"
      onClick=${() => setOpen(!open)}>⤓</button>
    ${open && html`<span class="export-menu" role="menu">
      ${FORMATS.map(([format, label]) => html`<button role="menuitem" key=${format} onClick=${() => download(format)}>
        Export ${label}</button>`)}
    </span>`}
  </span>`;
}
