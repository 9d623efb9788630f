// The Security page's two-step sign-in section: an authenticator app's codes (TOTP) after the password.
// Set up: a new key shown as text and as an otpauth:// link (no QR library is vendored), confirmed by a
// code from the app; the recovery codes are shown once. Turning it off needs a code too.
import { api } from "../../lib/api.js";
import { html, useEffect, useState } from "../../lib/html.js";

function refusal(error) {
  if (error.status === 429) return "Too many wrong codes. Wait a few minutes, then try again.";
  return error.message || "Something went wrong.";
}

// The key in groups of four, as authenticator apps show keys typed by hand.
function grouped(key) {
  return key.replace(/(.{4})(?=.)/g, "$1 ");
}

function CodeForm({ label, action, onSubmit }) {
  const [code, setCode] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    const done = await onSubmit(code.trim());
    setBusy(false);
    if (!done) setCode("");
  };
  return html`<form class="row wrap" onSubmit=${submit}>
    <label>${label}
      <input name="code" autocomplete="one-time-code" autocapitalize="off" spellcheck="false" maxlength="64" required
        value=${code} onInput=${(e) => setCode(e.target.value)} /></label>
    <button type="submit" disabled=${busy}>${action}</button>
  </form>`;
}

export function TotpSection() {
  const [status, setStatus] = useState(null);
  const [setup, setSetup] = useState(null); // {key, uri} while it waits for its confirming code
  const [recoveryCodes, setRecoveryCodes] = useState(null); // shown once, right after turning it on
  const [error, setError] = useState("");

  const load = async () => {
    try {
      setStatus(await api("GET", "/api/auth/totp"));
    } catch (e) {
      setError(refusal(e));
    }
  };
  useEffect(() => {
    load();
  }, []);

  const startSetup = async () => {
    setError("");
    try {
      setSetup(await api("POST", "/api/auth/totp/setup"));
    } catch (e) {
      setError(refusal(e));
    }
  };
  const enable = async (code) => {
    setError("");
    try {
      const answer = await api("POST", "/api/auth/totp/enable", { code });
      setSetup(null);
      setRecoveryCodes(answer.recovery_codes);
      await load();
      return true;
    } catch (e) {
      setError(refusal(e));
      return false;
    }
  };
  const disable = async (code) => {
    setError("");
    try {
      setStatus(await api("POST", "/api/auth/totp/disable", { code }));
      setRecoveryCodes(null);
      return true;
    } catch (e) {
      setError(refusal(e));
      return false;
    }
  };

  let body;
  if (!status) body = html`<p class="muted">Loading…</p>`;
  else if (status.enabled) {
    body = html`<p>Two-step sign-in is <strong>on</strong>: a password sign-in also asks for a code from your
        authenticator app. ${status.recovery_codes_left} of 10 recovery codes left.</p>
      ${recoveryCodes && html`<div class="stack recovery-codes" role="group" aria-label="Recovery codes">
        <p><strong>Keep these recovery codes somewhere safe</strong> (a password manager, or on paper). Each one signs
          you in once if you lose your phone. They are shown only now.</p>
        <ul>${recoveryCodes.map((code) => html`<li><code>${code}</code></li>`)}</ul>
        <div class="row"><button type="button" onClick=${() => setRecoveryCodes(null)}>I have kept them</button></div>
      </div>`}
      <${CodeForm} label="Code or recovery code to turn it off" action="Turn off" onSubmit=${disable} />`;
  } else if (setup) {
    body = html`<div class="stack">
      <p>Add this key to your authenticator app (for example by typing it in, or opening the link on your phone),
        then enter the code the app shows.</p>
      <p>Key: <code class="totp-key">${grouped(setup.key)}</code></p>
      <p class="small">Link: <a href=${setup.uri} class="totp-uri">${setup.uri}</a></p>
      <${CodeForm} label="Code from the app" action="Turn on" onSubmit=${enable} />
      <div class="row"><button type="button" onClick=${() => setSetup(null)}>Cancel</button></div>
    </div>`;
  } else {
    body = html`<p>Two-step sign-in is <strong>off</strong>.${status.required
        ? " This server asks for it: without it, this account can't sign in with a password."
        : " Turn it on so a password alone is not enough to sign in."}</p>
      <div class="row"><button type="button" onClick=${startSetup}>Set up an authenticator app</button></div>`;
  }

  return html`<section class="stack" aria-labelledby="totp-title">
    <h3 id="totp-title">Two-step sign-in</h3>
    ${body}
    ${error && html`<p class="error" role="alert">${error}</p>`}
  </section>`;
}
