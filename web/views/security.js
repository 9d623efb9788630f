// The Security page: this person's sessions, password, second factor and passkeys, one section each.
import { html } from "../lib/html.js";
import { PasskeysSection } from "./security/passkeys.js";
import { PasswordSection } from "./security/password.js";
import { SessionsSection } from "./security/sessions.js";
import { TotpSection } from "./security/totp.js";

export function Security({ client, state }) {
  return html`<section class="security" aria-labelledby="security-title">
    <h2 id="security-title">Security</h2>
    <${SessionsSection} client=${client} state=${state} />
    <${PasswordSection} client=${client} state=${state} />
    <${TotpSection} client=${client} state=${state} />
    <${PasskeysSection} client=${client} state=${state} />
  </section>`;
}
