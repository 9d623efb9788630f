// The Security page's password section: change it with the current one (POST /api/auth/password).
// The request goes with the session cookie, as the page does; the server's refusal (a wrong current
// password, a new one too easy to guess, too many attempts) is shown as it was given.
import { html, useState } from "../../lib/html.js";

const MIN_CHARS = 12; // the server's policy (pheby/store/password_policy.py); it decides, this only hints

// The change itself: resolves when it was made, rejects with an Error carrying the server's message.
export async function changePassword(currentPassword, newPassword) {
  const response = await fetch("/api/auth/password", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ current_password: currentPassword, new_password: newPassword }),
    credentials: "same-origin",
  });
  if (response.ok) return;
  let message = `The password was not changed (HTTP ${response.status}).`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch {
    // not JSON: the status says enough
  }
  if (response.status === 429) {
    const wait = response.headers.get("Retry-After");
    if (wait) message = `${message} (try again in ${wait} s)`;
  }
  throw new Error(message);
}

export function PasswordSection() {
  const [current, setCurrent] = useState("");
  const [next, setNext] = useState("");
  const [confirm, setConfirm] = useState("");
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState("");
  const [done, setDone] = useState("");

  const submit = async (event) => {
    event.preventDefault();
    setProblem("");
    setDone("");
    if (next !== confirm) {
      setProblem("The new password and its confirmation differ.");
      return;
    }
    setBusy(true);
    try {
      await changePassword(current, next);
      setCurrent("");
      setNext("");
      setConfirm("");
      setDone("Password changed. Your other sessions were signed out; this one stays signed in.");
    } catch (error) {
      setProblem(error.message);
    } finally {
      setBusy(false);
    }
  };

  return html`<section class="security-password" aria-labelledby="security-password-title">
    <h3 id="security-password-title">Password</h3>
    <form class="stack" onSubmit=${submit} aria-label="Change password">
      <label>Current password
        <input type="password" name="current-password" autocomplete="current-password" value=${current}
          onInput=${(e) => setCurrent(e.target.value)} /></label>
      <label>New password
        <input type="password" name="new-password" autocomplete="new-password" required minlength=${MIN_CHARS}
          maxlength="4096" value=${next} onInput=${(e) => setNext(e.target.value)} /></label>
      <label>Confirm new password
        <input type="password" name="confirm-password" autocomplete="new-password" required value=${confirm}
          onInput=${(e) => setConfirm(e.target.value)} /></label>
      <p class="muted small">At least ${MIN_CHARS} characters, hard to guess: a few unrelated words work well.
        Changing it signs out your other sessions. No password yet? Leave the current one empty if you signed in
        with the owner secret; otherwise ask the server's operator.</p>
      ${problem && html`<p class="error" role="alert">${problem}</p>`}
      ${done && html`<p class="small" role="status">${done}</p>`}
      <button class="primary" type="submit" disabled=${busy}>${busy ? "Changing…" : "Change password"}</button>
    </form>
  </section>`;
}
