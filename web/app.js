// Pheby Web: the entry point. The state lives in lib/store.js, the protocol in lib/protocol.js,
// the actions that join them in lib/client.js; views/ only draw the state and call actions.
import { html, render, useEffect, useRef, useState } from "./lib/html.js";
import { Store } from "./lib/store.js";
import { Client } from "./lib/client.js";
import { registerServiceWorker } from "./lib/push.js";
import { SignIn } from "./views/signin.js";
import { Sidebar } from "./views/sidebar.js";
import { ChatView } from "./views/chat.js";
import { ChatSettings, YoloSwitch, YoloWarning } from "./views/settings.js";
import { Workspace } from "./views/workspace.js";
import { Security } from "./views/security.js";
import { SlidersIcon, MenuIcon } from "./views/icons.js";

const store = new Store();
const client = new Client(store);

const STATUS_TEXT = { connecting: "Connecting…", reconnecting: "Reconnecting…" };
// The width below which the sidebar is a drawer and the workspace covers the page (web/app.css).
const PHONE_LAYOUT = window.matchMedia("(max-width: 760px)");

function usePhoneLayout() {
  const [phone, setPhone] = useState(PHONE_LAYOUT.matches);
  useEffect(() => {
    const follow = () => setPhone(PHONE_LAYOUT.matches);
    PHONE_LAYOUT.addEventListener("change", follow);
    return () => PHONE_LAYOUT.removeEventListener("change", follow);
  }, []);
  return phone;
}

function Header({ state, conversation, onMenu, menuOpen, menuButtonRef, settingsOpen, onSettings }) {
  const chat = conversation ? store.chat(conversation.conversation_id) : null;
  return html`<header class="topbar">
    <button class="icon menu" aria-label="Conversations" aria-expanded=${menuOpen} ref=${menuButtonRef} onClick=${onMenu}><${MenuIcon} /></button>
    <h1 class="title">${conversation ? conversation.name : "Pheby"}</h1>
    ${STATUS_TEXT[state.status] && html`<span class="connection" role="status">${STATUS_TEXT[state.status]}</span>`}
    ${conversation && html`<${YoloSwitch} client=${client} conversationId=${conversation.conversation_id} chat=${chat} />
      <button class="icon" aria-label="Model and reasoning" aria-expanded=${settingsOpen} title="Model and reasoning" onClick=${onSettings}><${SlidersIcon} /></button>`}
  </header>`;
}

function App() {
  const [state, setState] = useState(store.state);
  const [menuOpen, setMenuOpen] = useState(false);
  const [workspaceOpen, setWorkspaceOpen] = useState(false);
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [securityOpen, setSecurityOpen] = useState(false);
  const phone = usePhoneLayout();
  const drawerOpen = phone && menuOpen;
  const sidebar = useRef(null);
  const menuButton = useRef(null);
  const workspaceButton = useRef(null);
  useEffect(() => store.subscribe(setState), []);
  useEffect(() => {
    const onKey = (event) => {
      if (event.key !== "Escape" || event.defaultPrevented) return;
      if (drawerOpen) {
        event.preventDefault();
        setMenuOpen(false);
      } else if (state.currentId && store.chat(state.currentId).run) client.stop(state.currentId);
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [state.currentId, drawerOpen]);
  // Focus follows the drawer: into it when it opens; back to its button when it closes, unless the
  // person's pick already put focus elsewhere (a new conversation's composer).
  useEffect(() => {
    const nav = sidebar.current;
    if (!phone || !nav) return;
    if (menuOpen) (nav.querySelector(".conversation.current .open") || nav.querySelector("button")).focus();
    else if (nav.contains(document.activeElement) || document.activeElement === document.body) menuButton.current && menuButton.current.focus();
  }, [menuOpen]);
  // And the workspace: its panel takes focus when it opens (Workspace does that); when it closes,
  // focus goes back to what opened it (on a phone the drawer closed meanwhile: its button).
  const workspaceWasOpen = useRef(false);
  useEffect(() => {
    if (workspaceWasOpen.current && !workspaceOpen) {
      const opener = phone ? menuButton.current : workspaceButton.current;
      if (opener) opener.focus();
    }
    workspaceWasOpen.current = workspaceOpen;
  }, [workspaceOpen]);

  if (!state.session || !state.ready) return html`<${SignIn} client=${client} state=${state} />`;
  const conversation = state.conversations.find((c) => c.conversation_id === state.currentId) || null;
  const chat = conversation ? store.chat(conversation.conversation_id) : null;
  // On a phone the open drawer, or the workspace, covers the page: what is under it is out of reach.
  const workspaceCovers = phone && workspaceOpen;
  return html`<div class=${`shell${workspaceOpen ? " with-workspace" : ""}`}>
    <${Sidebar} client=${client} state=${state} open=${menuOpen} hidden=${(phone && !menuOpen) || workspaceCovers}
      navRef=${sidebar} workspaceButtonRef=${workspaceButton} workspaceOpen=${workspaceOpen}
      securityOpen=${securityOpen} onSecurity=${() => { setSecurityOpen(true); setMenuOpen(false); }}
      onPick=${() => { setMenuOpen(false); setSecurityOpen(false); }} onWorkspace=${() => { setWorkspaceOpen(!workspaceOpen); setMenuOpen(false); }} />
    ${menuOpen && html`<div class="scrim" onClick=${() => setMenuOpen(false)}></div>`}
    <main class="main" inert=${drawerOpen || workspaceCovers} onClick=${() => menuOpen && setMenuOpen(false)}>
      <${Header} state=${state} conversation=${conversation} menuOpen=${menuOpen} menuButtonRef=${menuButton}
        onMenu=${(e) => { e.stopPropagation(); setMenuOpen(!menuOpen); }}
        settingsOpen=${settingsOpen} onSettings=${() => setSettingsOpen(!settingsOpen)} />
      ${conversation && settingsOpen && html`<${ChatSettings} client=${client} state=${state} conversationId=${conversation.conversation_id} chat=${chat} />`}
      ${conversation && html`<${YoloWarning} chat=${chat} />`}
      ${securityOpen
        ? html`<div class="security-page">
            <button class="back" onClick=${() => setSecurityOpen(false)}>Back to the conversation</button>
            <${Security} client=${client} state=${state} />
          </div>`
        : conversation
        ? html`<${ChatView} key=${conversation.conversation_id} client=${client} state=${state} conversation=${conversation} />`
        : html`<div class="welcome"><h2>Welcome</h2><p class="muted">Pick a conversation or start a new one.</p>
            <button class="primary" onClick=${() => client.create()}>New chat</button></div>`}
    </main>
    ${workspaceOpen && html`<${Workspace} state=${state} onClose=${() => setWorkspaceOpen(false)} />`}
    ${state.toast && html`<div class="toast" role="alert">${state.toast}</div>`}
  </div>`;
}

registerServiceWorker();
client.resume();
// Deletions are not broadcast to other tabs: read the list again whenever the person comes back.
window.addEventListener("focus", () => client.store.state.status === "open" && client.refreshList());
document.addEventListener("visibilitychange", () => client.sendPresence());
render(html`<${App} />`, document.getElementById("app"));
// For people reading the protocol in the console (and for the tests): the live objects.
window.pheby = { store, client };
