// The conversation's header controls: model and reasoning pickers (global or this conversation)
// and the YOLO switch. A refusal from the server is shown as it was given.
import { html, useState } from "../lib/html.js";

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
