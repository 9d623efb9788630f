// Attachments in the transcript: inline images (fetched over the session cookie into blob: URLs, so a
// refusal is seen and said) and download chips for everything else.
import { html, useEffect, useState } from "../lib/html.js";
import { fetchBlob, saveBlob } from "../lib/api.js";

function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(0)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function expiry(attachment) {
  if (!attachment.expires_at) return "";
  const date = new Date(attachment.expires_at);
  return date < new Date() ? "expired" : `until ${date.toLocaleDateString()}`;
}

function InlineImage({ attachment }) {
  const [url, setUrl] = useState(null);
  const [blob, setBlob] = useState(null);
  const [failed, setFailed] = useState(false);
  useEffect(() => {
    let objectUrl = null;
    let live = true;
    fetchBlob(attachment.download_path)
      .then((bytes) => {
        if (!live) return;
        objectUrl = URL.createObjectURL(bytes);
        setBlob(bytes);
        setUrl(objectUrl);
      })
      .catch(() => live && setFailed(true));
    return () => {
      live = false;
      if (objectUrl) URL.revokeObjectURL(objectUrl);
    };
  }, [attachment.attachment_id]);
  if (failed) return html`<${DownloadChip} attachment=${attachment} />`;
  return url
    ? html`<figure class="inline-image"><img src=${url} alt=${attachment.filename} data-attachment-id=${attachment.attachment_id} />
        <figcaption><${DownloadChip} attachment=${attachment} blob=${blob} /></figcaption></figure>`
    : html`<div class="inline-image loading" aria-label="Loading image">…</div>`;
}

// With `blob`, the chip saves the very bytes already fetched (the inline image's).
function DownloadChip({ attachment, blob }) {
  const [error, setError] = useState("");
  const expired = attachment.expires_at && new Date(attachment.expires_at) < new Date();
  const download = async () => {
    try {
      saveBlob(blob || (await fetchBlob(attachment.download_path)), attachment.filename);
    } catch {
      setError("no longer available");
    }
  };
  return html`<span class="chip" data-attachment-id=${attachment.attachment_id}>
    <button class="link" onClick=${download} disabled=${expired} aria-label=${`Download ${attachment.filename}`}>⤓ ${attachment.filename}</button>
    <span class="muted small">${formatSize(attachment.size)}${expiry(attachment) && ` · ${expiry(attachment)}`}${error && ` · ${error}`}</span>
  </span>`;
}

export function AttachmentList({ attachments }) {
  if (!attachments.length) return null;
  return html`<div class="attachments">
    ${attachments.map((a) => (a.inline_image ? html`<${InlineImage} key=${a.attachment_id} attachment=${a} />` : html`<${DownloadChip} key=${a.attachment_id} attachment=${a} />`))}
  </div>`;
}
