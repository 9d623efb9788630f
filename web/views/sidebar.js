// The conversation list: newest activity first, with search, create, rename, export and delete; below it this
// browser's notifications switch, the workspace, the Security page and sign-out.
import { html, useState } from "../lib/html.js";
import { ExportMenu } from "./export.js";
import { PencilIcon, TrashIcon } from "./icons.js";
import { SearchBox } from "./search.js";
import { NotificationsSwitch } from "./settings.js";

export function relativeTime(iso) {
  if (!iso) return "";
  const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

function ConversationItem({ client, conversation, current, onPick }) {
  const [editing, setEditing] = useState(false);
  const [name, setName] = useState(conversation.name);
  const id = conversation.conversation_id;

  const save = (event) => {
    event.preventDefault();
    setEditing(false);
    if (name.trim() && name !== conversation.name) client.rename(id, name.trim());
  };
  const remove = () => {
    if (confirm(`Delete “${conversation.name}”? Its history is deleted from Hermes too.`)) client.remove(id);
  };

  if (editing) {
    return html`<li class="conversation editing">
      <form onSubmit=${save}>
        <input aria-label="Conversation name" value=${name} onInput=${(e) => setName(e.target.value)} maxlength="200"
          onKeyDown=${(e) => e.key === "Escape" && setEditing(false)} autofocus />
      </form></li>`;
  }
  return html`<li class=${`conversation${current ? " current" : ""}`}>
    <button class="open" aria-current=${current ? "page" : undefined} onClick=${() => { client.select(id); onPick(); }}>
      <span class="name">${conversation.name}</span>
      <span class="when">${relativeTime(conversation.last_active)}</span>
    </button>
    <span class="actions">
      <button class="icon" aria-label=${`Rename ${conversation.name}`} title="Rename" onClick=${() => { setName(conversation.name); setEditing(true); }}><${PencilIcon} /></button>
      <button class="icon" aria-label=${`Delete ${conversation.name}`} title="Delete" onClick=${remove}><${TrashIcon} /></button>
      <${ExportMenu} client=${client} conversation=${conversation} />
    </span>
  </li>`;
}

// `hidden`: off screen (the phone layout's closed drawer), so out of reach of the keyboard and of
// assistive technology as well as of the eye.
export function Sidebar({ client, state, onWorkspace, workspaceOpen, onSecurity, securityOpen, open, hidden, onPick, navRef, workspaceButtonRef }) {
  return html`<nav class=${`sidebar${open ? " open" : ""}`} aria-label="Conversations" inert=${hidden} ref=${navRef}>
    <div class="sidebar-head">
      <div class="brand"><span class="logo" aria-hidden="true">P</span><span>Pheby</span></div>
      <button class="primary" onClick=${() => { client.create(); onPick(); }}>New chat</button>
    </div>
    <${SearchBox} client=${client} onPick=${onPick} />
    <ul class="conversation-list">
      ${state.conversations.map((c) => html`<${ConversationItem} key=${c.conversation_id} client=${client} conversation=${c}
        current=${c.conversation_id === state.currentId} onPick=${onPick} />`)}
      ${state.conversations.length === 0 && html`<li class="muted empty">No conversations yet.</li>`}
    </ul>
    <div class="sidebar-settings"><${NotificationsSwitch} /></div>
    <div class="sidebar-foot">
      <button ref=${workspaceButtonRef} aria-expanded=${workspaceOpen} onClick=${onWorkspace}>Workspace</button>
      <button aria-current=${securityOpen ? "page" : undefined} onClick=${onSecurity}>Security</button>
      <button onClick=${() => client.signOut()}>Sign out</button>
    </div>
  </nav>`;
}
