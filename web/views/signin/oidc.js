// Signing in through the operator's identity provider (OpenID Connect): the "Sign in with …" button when
// the server offers it (GET /api/auth/oidc), and why a sign-in that went there came back refused
// (`/?signin_error=<code>`, set by /api/auth/oidc/callback). The button only navigates: the server sends
// the browser to the provider and back, and a sign-in ends at `/` with the session cookie set.
import { html, useEffect, useState } from "../../lib/html.js";

const REASONS = {
  disabled: "Single sign-on is not set up on this server.",
  state: "That sign-in link has expired or was already used. Please start again.",
  denied: "The sign-in was cancelled at the identity provider.",
  provider: "The identity provider could not be reached or gave an answer Pheby could not use. Please try again.",
  token: "The identity provider's answer could not be verified, so you were not signed in.",
  not_allowed: "Your account at the identity provider is not allowed to use this server.",
  unlinked: "No Pheby account is linked to your identity yet. Ask the server's owner to link it.",
  account_disabled: "Your Pheby account is disabled.",
  busy: "Too many sign-ins are under way right now. Please try again in a few minutes.",
};

// Read once per page load, then removed from the address bar so a reload doesn't show it again.
function takeSignInError() {
  const params = new URLSearchParams(location.search);
  const code = params.get("signin_error");
  if (code === null) return null;
  params.delete("signin_error");
  const query = params.toString();
  history.replaceState(history.state, "", location.pathname + (query ? `?${query}` : "") + location.hash);
  return REASONS[code] || "Signing in with single sign-on failed.";
}

export function OidcSignIn() {
  const [offer, setOffer] = useState(null);
  const [error] = useState(takeSignInError);
  useEffect(() => {
    let live = true;
    fetch("/api/auth/oidc", { credentials: "same-origin" })
      .then((response) => (response.ok ? response.json() : null))
      .then((body) => live && setOffer(body), () => live && setOffer(null));
    return () => { live = false; };
  }, []);
  return html`
    ${error && html`<p class="error" role="alert" data-signin-error>${error}</p>`}
    ${offer && offer.enabled && html`
      <button type="button" class="oidc" onClick=${() => location.assign("/api/auth/oidc/start")}>
        Sign in with ${offer.name}
      </button>`}`;
}
