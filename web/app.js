// Pheby Web: the entry point. The state lives in lib/store.js, the protocol in lib/protocol.js,
// the actions that join them in lib/client.js; views/ only draw the state and call actions.
import { html, render, useEffect, useState } from "./lib/html.js";
import { Store } from "./lib/store.js";
import { Client } from "./lib/client.js";
import { registerServiceWorker } from "./lib/push.js";
import { SignIn } from "./views/signin.js";
import { Sidebar } from "./views/sidebar.js";
import { ChatView } from "./views/chat.js";
import { ChatSettings, YoloSwitch, YoloWarning } from "./views/settings.js";
import { Workspace } from "./views/workspace.js";
import { SlidersIcon, MenuIcon } from "./views/icons.js";

const store = new Store();
const client = new Client(store);

const STATUS_TEXT = { connecting: "Connecting…", reconnecting: "Reconnecting…" };

function Header({ state, conversation, onMenu, settingsOpen, onSettings }) {
  const chat = conversation ? store.chat(conversation.conversation_id) : null;
  return html`<header class="topbar">
    <button class="icon menu" aria-label="Conversations" onClick=${onMenu}><${MenuIcon} /></button>
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
  useEffect(() => store.subscribe(setState), []);
  useEffect(() => {
    const onKey = (event) => {
      if (event.key === "Escape" && !event.defaultPrevented && state.currentId && store.chat(state.currentId).run) client.stop(state.currentId);
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [state.currentId]);

  if (!state.session || !state.ready) return html`<${SignIn} client=${client} state=${state} />`;
  const conversation = state.conversations.find((c) => c.conversation_id === state.currentId) || null;
  const chat = conversation ? store.chat(conversation.conversation_id) : null;
  return html`<div class=${`shell${workspaceOpen ? " with-workspace" : ""}`}>
    <${Sidebar} client=${client} state=${state} open=${menuOpen} onPick=${() => setMenuOpen(false)} onWorkspace=${() => { setWorkspaceOpen(!workspaceOpen); setMenuOpen(false); }} />
    ${menuOpen && html`<div class="scrim" onClick=${() => setMenuOpen(false)}></div>`}
    <main class="main" onClick=${() => menuOpen && setMenuOpen(false)}>
      <${Header} state=${state} conversation=${conversation} onMenu=${(e) => { e.stopPropagation(); setMenuOpen(!menuOpen); }}
        settingsOpen=${settingsOpen} onSettings=${() => setSettingsOpen(!settingsOpen)} />
      ${conversation && settingsOpen && html`<${ChatSettings} client=${client} state=${state} conversationId=${conversation.conversation_id} chat=${chat} />`}
      ${conversation && html`<${YoloWarning} chat=${chat} />`}
      ${conversation
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
