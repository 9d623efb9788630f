// The sign-in screen: the owner secret, or an account's username and password.
import { html, useState } from "../lib/html.js";
import { SecondFactorStep } from "./signin/second_factor.js";
import { OidcSignIn } from "./signin/oidc.js";
import { PasskeySignIn, PasskeyTab } from "./signin/passkey.js";

export function SignIn({ client, state }) {
  const [mode, setMode] = useState("secret");
  const [secret, setSecret] = useState("");
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const busy = state.status === "connecting";
  if (state.secondFactor) {
    return html`<${SecondFactorStep} challenge=${state.secondFactor} onCancel=${() => client.store.set({ secondFactor: null })} />`;
  }
  const passkey = mode === "passkey";

  const submit = (event) => {
    event.preventDefault();
    if (mode === "secret") client.signInWithSecret(secret);
    else client.signInWithPassword(username, password);
  };

  return html`
    <main class="signin">
      <form class="signin-card" onSubmit=${submit} aria-labelledby="signin-title">
        <div class="brand"><span class="logo" aria-hidden="true">P</span><h1 id="signin-title">Pheby</h1></div>
        <p class="muted">Sign in to talk to your agent.</p>
        <div class="tabs" role="tablist" aria-label="Sign-in method">
          <button type="button" role="tab" aria-selected=${mode === "secret"} onClick=${() => setMode("secret")}>Secret</button>
          <button type="button" role="tab" aria-selected=${mode === "password"} onClick=${() => setMode("password")}>Password</button>
          <${PasskeyTab} selected=${passkey} onSelect=${() => setMode("passkey")} />
        </div>
        ${passkey ? html`<${PasskeySignIn} />` : mode === "secret"
          ? html`<label>Owner secret or token
              <input type="password" name="secret" autocomplete="current-password" required value=${secret}
                onInput=${(e) => setSecret(e.target.value)} autofocus /></label>`
          : html`<label>Username
                <input name="username" autocomplete="username" required value=${username} onInput=${(e) => setUsername(e.target.value)} /></label>
              <label>Password
                <input type="password" name="password" autocomplete="current-password" required value=${password}
                  onInput=${(e) => setPassword(e.target.value)} /></label>`}
        ${state.signInError && html`<p class="error" role="alert">${state.signInError}</p>`}
        ${!passkey && html`<button class="primary" type="submit" disabled=${busy}>${busy ? "Signing in…" : "Sign in"}</button>`}
        <${OidcSignIn} />
        <p class="muted small">The secret is printed by <code>make run</code>. This page keeps no secret: signing in starts a session that you can end under Security.</p>
      </form>
    </main>`;
}
