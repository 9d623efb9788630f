// "Sign in with a passkey" on the sign-in screen: the server's challenge, the browser's prompt, the
// signed answer; the server answers with the session cookie, and a fresh load starts from it.
import { html, useState } from "../../lib/html.js";
import { getPasskey, passkeyPromptMessage, passkeysSupported } from "../../lib/webauthn.js";

async function postJSON(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin", // the answer sets the session cookie
  });
  const answer = await response.json().catch(() => null);
  if (!response.ok) {
    const error = new Error((answer && answer.error && answer.error.message) || `The server answered ${response.status}`);
    error.code = answer && answer.error ? answer.error.code : `http_${response.status}`;
    throw error;
  }
  return answer;
}

// The whole sign-in; resolves once the session cookie is set (the page then reloads from it).
export async function signInWithPasskey() {
  const options = await postJSON("/api/auth/passkey/options");
  const credential = await getPasskey(options);
  await postJSON("/api/auth/passkey", { credential });
  location.assign("/");
}

// The sign-in screen's "Passkey" tab, where the browser can use passkeys at all.
export function PasskeyTab({ selected, onSelect }) {
  if (!passkeysSupported()) return null;
  return html`<button type="button" role="tab" aria-selected=${selected} onClick=${onSelect}>Passkey</button>`;
}

export function PasskeySignIn() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  if (!passkeysSupported()) return null;

  const click = async () => {
    setBusy(true);
    setError("");
    try {
      await signInWithPasskey();
    } catch (failure) {
      setError(failure instanceof DOMException ? passkeyPromptMessage(failure) : failure.message);
      setBusy(false);
    }
  };

  return html`<div class="passkey-signin stack">
    <p class="muted small">Your browser or phone asks which passkey to use; no username needed.</p>
    <button class="primary" type="button" onClick=${click} disabled=${busy}>${busy ? "Waiting for your passkey…" : "Sign in with a passkey"}</button>
    ${error && html`<p class="error" role="alert">${error}</p>`}
  </div>`;
}
