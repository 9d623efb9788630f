// The conversation's header controls: model and reasoning pickers (global or this conversation)
// and the YOLO switch; and this browser's notifications switch. A refusal from the server is
// shown as it was given.
import { html, useEffect, useState } from "../lib/html.js";
import { BLOCKED, notificationsAreOn, turnOffNotifications, turnOnNotifications, unsupportedReason } from "../lib/push.js";

export function ChatSettings({ client, state, conversationId, chat }) {
  const [scope, setScope] = useState("conversation");
  const [message, setMessage] = useState("");
  const models = state.models;
  const current = chat.model || state.globalModel;
  const reasoning = chat.reasoning || state.globalReasoning;
  const target = scope === "conversation" ? conversationId : null;

  const pickModel = async (event) => {
    const [provider, model] = event.target.value.split("\u0000");
    setMessage((await client.setModel(model, provider, target)) || `Model set${scope === "global" ? " for every conversation" : " for this conversation"}.`);
  };
  const pickEffort = async (event) => {
    setMessage((await client.setReasoning(event.target.value, target)) || "Reasoning effort set.");
  };
  const efforts = (reasoning && reasoning.supported_efforts) || (models && models.supported_reasoning_efforts) || [];
  const currentValue = current && current.model ? `${current.provider || ""}\u0000${current.model}` : "";

  return html`<div class="settings-panel" role="group" aria-label="Conversation settings">
    <fieldset class="scope"><legend>Change for</legend>
      <label><input type="radio" name="scope" checked=${scope === "conversation"} onChange=${() => setScope("conversation")} /> this conversation</label>
      <label><input type="radio" name="scope" checked=${scope === "global"} onChange=${() => setScope("global")} /> every conversation</label>
    </fieldset>
    <label>Model
      <select aria-label="Model" value=${currentValue} onChange=${pickModel} disabled=${!models}>
        ${!currentValue && html`<option value="">—</option>`}
        ${models && models.providers.map((p) => html`<optgroup label=${p.name}>
          ${p.models.map((m) => html`<option value=${`${p.slug}\u0000${m}`}>${m}</option>`)}</optgroup>`)}
      </select>
    </label>
    <label>Reasoning
      <select aria-label="Reasoning effort" value=${(reasoning && reasoning.effort) || ""} onChange=${pickEffort} disabled=${!efforts.length}>
        <option value="" disabled>provider default</option>
        ${efforts.map((e) => html`<option value=${e}>${e}</option>`)}
      </select>
    </label>
    <p class="muted small">${current ? `Now: ${current.model || "default"} (${current.scope === "conversation" ? "this conversation" : "default"})` : ""}</p>
    ${message && html`<p class="small settings-message" role="status">${message}</p>`}
  </div>`;
}

export function YoloSwitch({ client, conversationId, chat }) {
  return html`<label class=${`yolo${chat.yolo ? " on" : ""}`} title="Auto-approve dangerous commands in this conversation">
    <input type="checkbox" role="switch" checked=${chat.yolo} onChange=${(e) => client.setYolo(conversationId, e.target.checked)} />
    <span>YOLO</span>
  </label>`;
}

export function YoloWarning({ chat }) {
  if (!chat.yolo) return null;
  return html`<p class="yolo-warning" role="alert">YOLO is on: the agent runs dangerous commands in this conversation without asking. Hermes's hard safety rules still apply.</p>`;
}

// Web Push for this browser: on asks for the permission and subscribes, off unsubscribes. Where the
// browser can't, or the person has blocked notifications, the switch is off and says why.
export function NotificationsSwitch() {
  const unsupported = unsupportedReason();
  const [on, setOn] = useState(false);
  const [wanted, setWanted] = useState(null); // what the person asked for, while it is being done
  const [problem, setProblem] = useState("");
  const [permission, setPermission] = useState(unsupported ? "unsupported" : Notification.permission);
  useEffect(() => {
    if (!unsupported) notificationsAreOn().then(setOn);
  }, []);

  const change = async (event) => {
    const turnOn = event.target.checked;
    setWanted(turnOn);
    setProblem("");
    try {
      if (turnOn) await turnOnNotifications();
      else await turnOffNotifications();
      setOn(turnOn);
    } catch (error) {
      setOn(false);
      setProblem(error.message || "Notifications could not be turned on.");
    }
    setPermission(Notification.permission);
    setWanted(null);
  };

  const busy = wanted !== null;
  const blocked = permission === "denied";
  const note = unsupported || (blocked ? BLOCKED : problem) || (busy ? (wanted ? "Turning on…" : "Turning off…") : "");
  return html`<div class="notifications">
    <label class="switch" title="Notifications from Pheby on this device">
      <input type="checkbox" role="switch" checked=${busy ? wanted : on} disabled=${busy || Boolean(unsupported) || blocked}
        aria-describedby=${note ? "notifications-note" : undefined} onChange=${change} />
      <span>Notifications</span>
    </label>
    ${note && html`<p id="notifications-note" class="small muted" role="status">${note}</p>`}
  </div>`;
}
