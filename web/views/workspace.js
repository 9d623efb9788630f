// The workspace panel over the Hope REST API: artifacts, scheduled tasks, memory and the honest
// connector/research statuses, each shown only where /api/capabilities says it is available.
import { html, useEffect, useRef, useState } from "../lib/html.js";
import { api, fetchBlob, saveBlob } from "../lib/api.js";

const problem = (error) => (error && error.message) || "Something went wrong.";

function Artifacts() {
  const [list, setList] = useState(null);
  const [open, setOpen] = useState(null); // the artifact being edited
  const [draft, setDraft] = useState("");
  const [conflict, setConflict] = useState(null); // the newer version the server has
  const [versions, setVersions] = useState(null);
  const [error, setError] = useState("");
  const [title, setTitle] = useState("");

  const reload = () => api("GET", "/api/artifacts").then((b) => setList(b.artifacts)).catch((e) => setError(problem(e)));
  useEffect(() => { reload(); }, []);

  const show = async (id) => {
    setError("");
    setConflict(null);
    setVersions(null);
    try {
      const { artifact } = await api("GET", `/api/artifacts/${id}`);
      setOpen(artifact);
      setDraft(artifact.content);
    } catch (e) {
      setError(problem(e));
    }
  };
  const create = async (event) => {
    event.preventDefault();
    if (!title.trim()) return;
    try {
      const { artifact } = await api("POST", "/api/artifacts", { title: title.trim(), kind: "markdown", content: "" });
      setTitle("");
      await reload();
      show(artifact.id);
    } catch (e) {
      setError(problem(e));
    }
  };
  const save = async (revision = open.revision) => {
    try {
      const { artifact } = await api("PATCH", `/api/artifacts/${open.id}`, { revision, content: draft });
      setOpen(artifact);
      setConflict(null);
      reload();
    } catch (e) {
      if (e.status === 409) {
        // Someone saved first: show their version and let the person choose.
        const { artifact } = await api("GET", `/api/artifacts/${open.id}`);
        setConflict(artifact);
      } else setError(problem(e));
    }
  };
  const remove = async () => {
    if (!confirm(`Delete “${open.title}”?`)) return;
    await api("DELETE", `/api/artifacts/${open.id}`).catch((e) => setError(problem(e)));
    setOpen(null);
    reload();
  };
  const exportIt = async () => {
    try {
      saveBlob(await fetchBlob(`/api/artifacts/${open.id}/export`), `${open.title}${open.kind === "markdown" ? ".md" : ".txt"}`);
    } catch (e) {
      setError(problem(e));
    }
  };
  const showVersions = async () => {
    const body = await api("GET", `/api/artifacts/${open.id}/versions`).catch((e) => setError(problem(e)));
    if (body) setVersions(body.versions);
  };
  const loadVersion = async (revision) => {
    const { artifact } = await api("GET", `/api/artifacts/${open.id}?revision=${revision}`);
    setDraft(artifact.content);
  };

  if (open) {
    return html`<div class="artifact-editor">
      <div class="row"><button class="link" onClick=${() => { setOpen(null); reload(); }}>← Artifacts</button>
        <strong>${open.title}</strong><span class="muted small">revision ${open.revision}</span></div>
      <textarea aria-label="Artifact content" class="artifact-content" value=${draft} onInput=${(e) => setDraft(e.target.value)}></textarea>
      ${conflict && html`<div class="conflict" role="alert">
        <p><strong>Someone saved a newer version (revision ${conflict.revision}).</strong> Choose which to keep.</p>
        <pre class="theirs">${conflict.content}</pre>
        <div class="row wrap">
          <button onClick=${() => { setOpen(conflict); setDraft(conflict.content); setConflict(null); }}>Use their version</button>
          <button class="primary" onClick=${() => save(conflict.revision)}>Keep mine (overwrite)</button>
        </div></div>`}
      <div class="row wrap">
        <button class="primary" onClick=${() => save()}>Save</button>
        <button onClick=${showVersions}>Versions</button>
        <button onClick=${exportIt}>Export</button>
        <button class="danger" onClick=${remove}>Delete</button>
      </div>
      ${versions && html`<ul class="versions">${versions.map((v) => html`<li><button class="link" onClick=${() => loadVersion(v.revision)}>
        Revision ${v.revision}</button> <span class="muted small">${new Date(v.created_at * 1000).toLocaleString()}</span></li>`)}</ul>`}
      ${error && html`<p class="error">${error}</p>`}
    </div>`;
  }
  return html`<div>
    <form class="row" onSubmit=${create}>
      <input aria-label="New artifact title" placeholder="New artifact title" value=${title} onInput=${(e) => setTitle(e.target.value)} maxlength="160" />
      <button type="submit">Create</button>
    </form>
    ${list === null ? html`<p class="muted">Loading…</p>` : list.length === 0 ? html`<p class="muted">No artifacts yet.</p>` : html`<ul class="item-list">
      ${list.map((a) => html`<li><button class="link" onClick=${() => show(a.id)}>${a.title}</button> <span class="muted small">rev ${a.revision}</span></li>`)}</ul>`}
    ${error && html`<p class="error">${error}</p>`}
  </div>`;
}

// Hermes answers a schedule as an object ({kind, display, …}); people read and type its display form.
const scheduleText = (schedule) => (!schedule ? "" : typeof schedule === "string" ? schedule : schedule.display || schedule.expr || "");
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");

function TaskForm({ task, onDone }) {
  const [name, setName] = useState((task && task.name) || "");
  const [schedule, setSchedule] = useState(task ? scheduleText(task.schedule) : "");
  const [prompt, setPrompt] = useState((task && task.prompt) || "");
  const [error, setError] = useState("");
  const submit = async (event) => {
    event.preventDefault();
    try {
      if (task) {
        // Only what changed: the gateway keeps the rest as it is.
        const change = {};
        if (name !== task.name) change.name = name;
        if (schedule !== scheduleText(task.schedule)) change.schedule = schedule;
        if (prompt !== task.prompt) change.prompt = prompt;
        if (Object.keys(change).length) await api("PATCH", `/api/tasks/${task.id}`, change);
      } else await api("POST", "/api/tasks", { name, schedule, prompt });
      onDone();
    } catch (e) {
      setError(problem(e));
    }
  };
  return html`<form class="stack" onSubmit=${submit}>
    <label>Name <input required maxlength="200" value=${name} onInput=${(e) => setName(e.target.value)} /></label>
    <label>Schedule (Hermes schedule string, e.g. <code>every 1h</code> or <code>0 9 * * *</code>)
      <input required maxlength="200" value=${schedule} onInput=${(e) => setSchedule(e.target.value)} /></label>
    <label>Prompt <textarea required maxlength="5000" value=${prompt} onInput=${(e) => setPrompt(e.target.value)}></textarea></label>
    <div class="row"><button class="primary" type="submit">${task ? "Save" : "Create task"}</button><button type="button" onClick=${onDone}>Cancel</button></div>
    ${error && html`<p class="error">${error}</p>`}
  </form>`;
}

function Tasks() {
  const [tasks, setTasks] = useState(null);
  const [editing, setEditing] = useState(undefined); // undefined: none; null: a new task
  const [error, setError] = useState("");
  const reload = () => api("GET", "/api/tasks").then((b) => setTasks(b.tasks)).catch((e) => setError(problem(e)));
  useEffect(() => { reload(); }, []);
  const act = async (task, verb) => {
    setError("");
    try {
      if (verb === "delete") {
        if (!confirm(`Delete the task “${task.name || task.id}”?`)) return;
        await api("DELETE", `/api/tasks/${task.id}`);
      } else await api("POST", `/api/tasks/${task.id}/${verb}`);
      reload();
    } catch (e) {
      setError(problem(e));
    }
  };
  if (editing !== undefined) return html`<${TaskForm} task=${editing} onDone=${() => { setEditing(undefined); reload(); }} />`;
  return html`<div>
    <button onClick=${() => setEditing(null)}>New task</button>
    ${tasks === null ? html`<p class="muted">Loading…</p>` : tasks.length === 0 ? html`<p class="muted">No scheduled tasks.</p>` : html`<ul class="item-list">
      ${tasks.map((t) => html`<li class="task">
        <div><strong>${t.name || t.id}</strong> <span class="muted small">${scheduleText(t.schedule)}${t.enabled === false ? " · paused" : ""}</span></div>
        ${t.next_run_at && t.enabled !== false && html`<div class="muted small">Next run ${when(t.next_run_at)}</div>`}
        ${t.last_run_at && html`<div class="muted small">Last run ${when(t.last_run_at)}</div>`}
        <div class="row wrap small">
          <button onClick=${() => setEditing(t)}>Edit</button>
          ${t.enabled === false ? html`<button onClick=${() => act(t, "resume")}>Resume</button>` : html`<button onClick=${() => act(t, "pause")}>Pause</button>`}
          <button onClick=${() => act(t, "run")}>Run now</button>
          <button class="danger" onClick=${() => act(t, "delete")}>Delete</button>
        </div></li>`)}</ul>`}
    ${error && html`<p class="error">${error}</p>`}
  </div>`;
}

function MemorySection({ section, onSaved }) {
  const [content, setContent] = useState(section.content);
  const [revision, setRevision] = useState(section.revision);
  const [state, setState] = useState(""); // "", saved, conflict, or an error sentence
  const save = async () => {
    try {
      const body = await api("PUT", `/api/memory/${section.section}`, { content, revision });
      setRevision(body.revision);
      setState("saved");
    } catch (e) {
      setState(e.status === 409 ? "conflict" : problem(e));
    }
  };
  const title = section.section === "memory" ? "Agent memory (MEMORY.md)" : "About you (USER.md)";
  return html`<div class="memory-section">
    <label>${title}<textarea value=${content} onInput=${(e) => { setContent(e.target.value); setState(""); }}></textarea></label>
    <div class="row"><button class="primary" onClick=${save}>Save</button>
      ${state === "saved" && html`<span class="muted small" role="status">Saved.</span>`}
      ${state === "conflict" && html`<span class="error small" role="alert">Changed elsewhere since you opened it. <button class="link" onClick=${onSaved}>Reload</button></span>`}
      ${state && state !== "saved" && state !== "conflict" && html`<span class="error small">${state}</span>`}</div>
    <p class="muted small">Running Hermes sessions may keep the old memory until their next run.</p>
  </div>`;
}

function Memory() {
  const [sections, setSections] = useState(null);
  const [error, setError] = useState("");
  const [generation, setGeneration] = useState(0);
  const reload = () => api("GET", "/api/memory").then((b) => { setSections(b.sections); setGeneration((g) => g + 1); }).catch((e) => setError(problem(e)));
  useEffect(() => { reload(); }, []);
  if (error) return html`<p class="error">${error}</p>`;
  if (!sections) return html`<p class="muted">Loading…</p>`;
  return html`<div>${sections.map((s) => html`<${MemorySection} key=${`${s.section}-${generation}`} section=${s} onSaved=${reload} />`)}</div>`;
}

function Statuses() {
  const [connectors, setConnectors] = useState(null);
  const [research, setResearch] = useState(null);
  useEffect(() => {
    api("GET", "/api/connectors").then(setConnectors).catch(() => setConnectors({ available: false, reason: "Unavailable." }));
    api("GET", "/api/research").then(setResearch).catch(() => setResearch({ available: false, reason: "Unavailable." }));
  }, []);
  const line = (label, body) => html`<li><strong>${label}:</strong> ${body === null ? "…" : body.available ? "available" : `not available — ${body.reason || ""}`}</li>`;
  return html`<ul class="item-list">${line("Connectors", connectors)}${line("Research mode", research)}</ul>`;
}

export function Workspace({ state, onClose }) {
  const caps = state.capabilities || {};
  const sections = [
    caps.artifacts && ["artifacts", "Artifacts", Artifacts],
    caps.tasks && ["tasks", "Scheduled tasks", Tasks],
    caps.memory && ["memory", "Memory", Memory],
    ["statuses", "Connectors & research", Statuses],
  ].filter(Boolean);
  const [tab, setTab] = useState(sections[0][0]);
  const heading = useRef(null);
  // Opened from the sidebar: the keyboard's place moves here (the app puts it back on close).
  useEffect(() => {
    heading.current.focus();
  }, []);
  const Active = (sections.find((s) => s[0] === tab) || sections[0])[2];
  return html`<aside class="workspace" aria-labelledby="workspace-title">
    <div class="workspace-head"><h2 id="workspace-title" tabindex="-1" ref=${heading}>Workspace</h2>
      <button class="icon" aria-label="Close workspace" onClick=${onClose}>×</button></div>
    <div class="tabs" role="tablist">${sections.map(([key, label]) => html`<button role="tab" aria-selected=${tab === key} onClick=${() => setTab(key)}>${label}</button>`)}</div>
    <div class="workspace-body"><${Active} /></div>
  </aside>`;
}
