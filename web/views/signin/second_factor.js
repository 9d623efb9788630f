// The code step of a password sign-in: the password was right and the account has a second factor,
// so the server answered a ticket (202) instead of a session. The ticket and a code from the
// authenticator app (or a recovery code) start the session, set as this page's cookie; then the
// page loads afresh from it.
import { html, useState } from "../../lib/html.js";

const SENTENCES = {
  401: "That code is wrong, or was used already. Wait for the app's next code and try it.",
  429: "Too many wrong codes. Wait a few minutes, then try again.",
};

async function redeem(ticket, code) {
  const response = await fetch("/api/auth/login/totp", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ ticket, code }),
    credentials: "same-origin", // the session comes back as a cookie, which this page must keep
  });
  if (response.ok) return "";
  let message = "";
  try {
    message = (await response.json()).error.message;
  } catch {
    // not JSON: the status says enough
  }
  if (/expired/.test(message)) return "expired";
  return SENTENCES[response.status] || `Sign-in failed: ${message || response.statusText}`;
}

export function SecondFactorStep({ challenge, onCancel }) {
  const [code, setCode] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const expired = error === "expired";

  const submit = async (event) => {
    event.preventDefault();
    if (Date.now() / 1000 >= challenge.expires_at) return setError("expired");
    setBusy(true);
    const failure = await redeem(challenge.ticket, code.trim());
    if (!failure) {
      location.assign("/");
      return;
    }
    setBusy(false);
    setError(failure);
    setCode("");
  };

  return html`
    <main class="signin">
      <form class="signin-card" onSubmit=${submit} aria-labelledby="second-factor-title">
        <div class="brand"><span class="logo" aria-hidden="true">P</span><h1 id="second-factor-title">Two-step sign-in</h1></div>
        <p class="muted">Enter the 6-digit code your authenticator app shows for Pheby, or one of your recovery codes.</p>
        <label>Code
          <input name="code" autocomplete="one-time-code" autocapitalize="off" spellcheck="false" maxlength="64" required
            value=${code} onInput=${(e) => setCode(e.target.value)} autofocus disabled=${expired} /></label>
        ${error && html`<p class="error" role="alert">${expired ? "This sign-in expired. Enter your password again." : error}</p>`}
        ${expired
          ? html`<button class="primary" type="button" onClick=${onCancel}>Back to the password</button>`
          : html`<button class="primary" type="submit" disabled=${busy}>${busy ? "Checking…" : "Verify"}</button>
              <button type="button" onClick=${onCancel}>Back</button>`}
      </form>
    </main>`;
}
