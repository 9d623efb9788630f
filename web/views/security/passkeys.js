// The Security page's passkeys section: this account's passkeys, adding one (after confirming the
// password or the owner secret when the server asks for a recent sign-in), removing one.
import { api } from "../../lib/api.js";
import { html, useEffect, useState } from "../../lib/html.js";
import { createPasskey, passkeyPromptMessage, passkeysSupported } from "../../lib/webauthn.js";

// Register a passkey named `name`: the server's options, the browser's prompt, the server's check.
// Rejects with the server's HttpError (code `reauthentication_required` when a confirmation is due).
export async function addPasskey(name) {
  const options = await api("POST", "/api/auth/passkeys/options");
  const credential = await createPasskey(options);
  return api("POST", "/api/auth/passkeys", { name, credential });
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "never";
}

function messageOf(error) {
  return error instanceof DOMException ? passkeyPromptMessage(error) : error.message;
}

function Confirm({ onConfirmed, onCancel }) {
  const [kind, setKind] = useState("password");
  const [value, setValue] = useState("");
  const [code, setCode] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);

  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError("");
    try {
      const withCode = kind === "password" && code.trim() ? { code: code.trim() } : {};
      await api("POST", "/api/auth/reauthenticate", { [kind]: value, ...withCode });
      setValue("");
      setCode("");
      await onConfirmed();
    } catch (failure) {
      setError(messageOf(failure));
    } finally {
      setBusy(false);
    }
  };

  return html`<form class="stack" onSubmit=${submit} aria-label="Confirm it's you">
    <p class="small">Adding a passkey needs a recent sign-in: confirm it's you first.</p>
    <div class="tabs" role="tablist" aria-label="Confirm with">
      <button type="button" role="tab" aria-selected=${kind === "password"} onClick=${() => setKind("password")}>Password</button>
      <button type="button" role="tab" aria-selected=${kind === "secret"} onClick=${() => setKind("secret")}>Owner secret</button>
    </div>
    <label>${kind === "password" ? "Your password" : "The owner secret"}
      <input type="password" autocomplete="current-password" required value=${value} onInput=${(e) => setValue(e.target.value)} /></label>
    ${kind === "password" && html`<label>Code from your authenticator (if two-step sign-in is on)
      <input inputmode="numeric" autocomplete="one-time-code" value=${code} onInput=${(e) => setCode(e.target.value)} /></label>`}
    ${error && html`<p class="error" role="alert">${error}</p>`}
    <div class="row">
      <button class="primary" type="submit" disabled=${busy}>Confirm and add</button>
      <button type="button" onClick=${onCancel}>Cancel</button>
    </div>
  </form>`;
}

export function PasskeysSection() {
  const [listing, setListing] = useState(null);
  const [name, setName] = useState("");
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");

  const load = async () => {
    try {
      setListing(await api("GET", "/api/auth/passkeys"));
    } catch (failure) {
      setError(messageOf(failure));
    }
  };
  useEffect(() => {
    load();
  }, []);

  const add = async () => {
    setBusy(true);
    setError("");
    try {
      await addPasskey(name.trim() || "Passkey");
      setName("");
      setConfirming(false);
      await load();
    } catch (failure) {
      if (failure.code === "reauthentication_required") setConfirming(true);
      else setError(messageOf(failure));
    } finally {
      setBusy(false);
    }
  };

  const remove = async (passkey) => {
    if (!confirm(`Remove the passkey “${passkey.name}”? It can't sign in here any more.`)) return;
    try {
      await api("DELETE", `/api/auth/passkeys/${encodeURIComponent(passkey.id)}`);
      await load();
    } catch (failure) {
      setError(messageOf(failure));
    }
  };

  const here = listing && listing.origin === location.origin && passkeysSupported();
  const why = !listing
    ? ""
    : listing.unavailable ||
      (listing.origin !== location.origin ? `Passkeys work at ${listing.origin} only.` : "This browser has no passkeys.");

  return html`<section class="passkeys stack" aria-labelledby="passkeys-title">
    <h3 id="passkeys-title">Passkeys</h3>
    <p class="muted small">Sign in with your device's screen lock or a security key instead of a password.</p>
    ${listing &&
    (listing.passkeys.length
      ? html`<ul class="item-list" aria-label="Your passkeys">
          ${listing.passkeys.map(
            (p) => html`<li key=${p.id} class="row">
              <span><strong>${p.name}</strong>
                <span class="muted small"> added ${when(p.created_at)}, last used ${when(p.last_used_at)}</span></span>
              <button type="button" class="danger" onClick=${() => remove(p)} aria-label=${`Remove passkey ${p.name}`}>Remove</button>
            </li>`,
          )}
        </ul>`
      : html`<p class="muted small">No passkeys yet.</p>`)}
    ${listing && !here && html`<p class="muted small">${why}</p>`}
    ${here &&
    (confirming
      ? html`<${Confirm} onConfirmed=${add} onCancel=${() => setConfirming(false)} />`
      : html`<div class="row">
          <label>Name <input value=${name} maxlength="64" placeholder="This laptop" onInput=${(e) => setName(e.target.value)} /></label>
          <button type="button" onClick=${add} disabled=${busy}>Add a passkey</button>
        </div>`)}
    ${error && html`<p class="error" role="alert">${error}</p>`}
  </section>`;
}
