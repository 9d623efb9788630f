// The structured parts of an assistant turn: tool calls, approval requests, clarifications.
import { html, useState } from "../lib/html.js";

export function ToolCard({ tool }) {
  const [showArgs, setShowArgs] = useState(false);
  const running = tool.status === "running";
  const label = { running: "running", completed: "done", failed: "failed", cancelled: "cancelled" }[tool.status] || tool.status;
  const duration = typeof tool.duration_ms === "number" ? `${(tool.duration_ms / 1000).toFixed(1)} s` : "";
  const args = tool.args_redacted && Object.keys(tool.args_redacted).length ? tool.args_redacted : null;
  return html`<div class=${`card tool ${tool.status}`} data-tool-call-id=${tool.tool_call_id} data-status=${tool.status}>
    <div class="card-head">
      ${running ? html`<span class="spinner" aria-hidden="true"></span>` : html`<span class="dot" aria-hidden="true"></span>`}
      <span class="tool-name">${tool.tool_name}</span>
      <span class="tool-status" role="status">${label}</span>
      ${duration && html`<span class="muted small">${duration}</span>`}
      ${(args || tool.preview) && html`<button class="link" aria-expanded=${showArgs} onClick=${() => setShowArgs(!showArgs)}>
        ${showArgs ? "Hide details" : "Details"}</button>`}
    </div>
    ${showArgs && args && html`<pre class="args">${JSON.stringify(args, null, 2)}</pre>`}
    ${showArgs && tool.preview && html`<pre class="args">${tool.preview}</pre>`}
    ${tool.error && html`<p class="error small">${tool.error}</p>`}
  </div>`;
}

const CHOICE_LABELS = { once: "Approve once", session: "For this conversation", always: "Always", deny: "Deny" };

export function ApprovalCard({ client, approval }) {
  const [denying, setDenying] = useState(false);
  const [reason, setReason] = useState("");
  const resolved = approval.resolved;
  if (resolved) {
    const text = resolved.choice === "deny" ? "Denied" : `Approved (${CHOICE_LABELS[resolved.choice] || resolved.choice})`;
    return html`<div class="card approval resolved" data-approval-id=${approval.approval_id}>
      <div class="card-head"><span class="muted">${text}:</span> <code>${approval.command}</code></div></div>`;
  }
  return html`<div class="card approval" role="group" aria-label="Approval needed" data-approval-id=${approval.approval_id}>
    <div class="card-head"><strong>Approval needed</strong> <span class="muted">${approval.description}</span></div>
    <pre class="command">${approval.command}</pre>
    ${denying
      ? html`<form class="row" onSubmit=${(e) => { e.preventDefault(); client.approve(approval.approval_id, "deny", reason.trim()); }}>
          <input aria-label="Reason for denying" placeholder="Why not? (optional)" value=${reason} onInput=${(e) => setReason(e.target.value)} autofocus />
          <button class="danger" type="submit">Deny</button>
          <button type="button" onClick=${() => setDenying(false)}>Back</button>
        </form>`
      : html`<div class="row wrap">
          ${approval.choices.filter((c) => c !== "deny").map((choice) => html`<button class=${choice === "once" ? "primary" : ""}
            onClick=${() => client.approve(approval.approval_id, choice)}>${CHOICE_LABELS[choice] || choice}</button>`)}
          ${approval.choices.includes("deny") && html`<button class="danger" onClick=${() => setDenying(true)}>Deny…</button>`}
        </div>`}
  </div>`;
}

export function ClarifyCard({ client, conversationId, clarify }) {
  const [other, setOther] = useState("");
  if (clarify.resolved) {
    const text = clarify.resolved.expired ? "Expired" : clarify.answer ? `Answered: ${clarify.answer}` : "Answered";
    return html`<div class="card clarify resolved" data-clarify-id=${clarify.clarify_id}>
      <div class="card-head"><span class="muted">${clarify.question}</span> <span>${text}</span></div></div>`;
  }
  const answer = (response) => client.clarify(conversationId, clarify.clarify_id, response);
  return html`<div class="card clarify" role="group" aria-label="Question from the agent" data-clarify-id=${clarify.clarify_id}>
    <div class="card-head"><strong>${clarify.question}</strong></div>
    ${clarify.choices && html`<div class="row wrap">${clarify.choices.map((choice) => html`<button onClick=${() => answer(choice)}>${choice}</button>`)}</div>`}
    <form class="row" onSubmit=${(e) => { e.preventDefault(); if (other.trim()) answer(other.trim()); }}>
      <input aria-label="Other answer" placeholder="Other…" value=${other} onInput=${(e) => setOther(e.target.value)} />
      <button type="submit">Answer</button>
    </form>
  </div>`;
}
