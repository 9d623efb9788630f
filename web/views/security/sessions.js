// The Security page's sessions section: where this person is signed in (each session's device,
// when it started and was last used), "this device" marked; any other can be ended, or all of them.
import { html, useEffect, useState } from "../../lib/html.js";
import { api } from "../../lib/api.js";
import { relativeTime } from "../sidebar.js";

const METHODS = { secret: "secret or token", password: "password", totp: "password and code", recovery_code: "recovery code", passkey: "passkey", oidc: "single sign-on" };

const when = (seconds) => (seconds ? new Date(seconds * 1000).toISOString() : "");

// A User-Agent in a few words: the browser and the system it runs on.
export function deviceName(agent) {
  if (!agent) return "Unknown device";
  const browser = /Edg\//.test(agent) ? "Edge" : /Firefox\//.test(agent) ? "Firefox" : /Chrom(e|ium)\//.test(agent) ? "Chrome"
    : /Safari\//.test(agent) ? "Safari" : /Pheby/i.test(agent) ? "Pheby app" : "";
  const system = /Android/.test(agent) ? "Android" : /iPhone|iPad/.test(agent) ? "iOS" : /Mac OS X/.test(agent) ? "macOS"
    : /Windows/.test(agent) ? "Windows" : /Linux/.test(agent) ? "Linux" : "";
  const named = [browser, system].filter(Boolean).join(" on ");
  return named || agent.slice(0, 60);
}

export function SessionsSection() {
  const [sessions, setSessions] = useState(null);
  const [note, setNote] = useState("");

  const load = async () => {
    try {
      const body = await api("GET", "/api/auth/sessions");
      setSessions(body.sessions);
    } catch (error) {
      setNote(`The sessions could not be read: ${error.message}`);
    }
  };
  useEffect(() => {
    load();
  }, []);

  const end = async (path, done) => {
    try {
      await api("DELETE", path);
      setNote(done);
    } catch (error) {
      setNote(`That did not work: ${error.message}`);
    }
    load();
  };

  const others = (sessions || []).filter((s) => !s.current);
  return html`<section class="security-section" aria-labelledby="sessions-title">
    <h3 id="sessions-title">Sessions</h3>
    <p class="muted small">Where you are signed in. End a session you don't recognise: its device is signed out at once.</p>
    ${sessions === null && !note && html`<p class="muted">Loading…</p>`}
    ${sessions && html`<ul class="sessions" aria-label="Sessions">
      ${sessions.map((s) => html`<li key=${s.id} class=${`session${s.current ? " current" : ""}`}>
        <div class="session-what">
          <strong>${deviceName(s.device)}</strong>${s.current && html` <span class="badge">This device</span>`}
          <span class="muted small">${`Signed in ${relativeTime(when(s.created_at))} with ${METHODS[s.method] || s.method || "a token"} · last used ${relativeTime(when(s.last_used_at || s.created_at))}`}</span>
        </div>
        ${!s.current && html`<button onClick=${() => end(`/api/auth/sessions/${encodeURIComponent(s.id)}`, "Session ended.")}
          aria-label=${`End the session of ${deviceName(s.device)}, signed in ${relativeTime(when(s.created_at))}`}>End</button>`}
      </li>`)}
    </ul>`}
    ${others.length > 0 && html`<button onClick=${() => end("/api/auth/sessions", "Every other session was ended.")}>End all other sessions</button>`}
    ${note && html`<p class="muted" role="status">${note}</p>`}
  </section>`;
}
