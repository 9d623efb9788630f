// Search above the conversation list: results as the person types (debounced), each a snippet with
// its matches marked from the server's `highlights` ranges (text nodes only, never HTML); a click
// opens the conversation at the message and scrolls to it.
import { html, useEffect, useRef, useState } from "../lib/html.js";
import { sentence } from "../lib/client.js";

const DEBOUNCE_MS = 250;

// The snippet as text pieces, the highlighted ones in <mark>. Ranges count code points, as the
// server does, so the snippet is split into code points first (an emoji is one, not two).
export function Highlighted({ snippet, highlights }) {
  const points = Array.from(snippet);
  const pieces = [];
  let at = 0;
  for (const [start, end] of highlights) {
    if (start > at) pieces.push(points.slice(at, start).join(""));
    pieces.push(html`<mark>${points.slice(start, end).join("")}</mark>`);
    at = end;
  }
  if (at < points.length) pieces.push(points.slice(at).join(""));
  return html`<span class="snippet">${pieces}</span>`;
}

function where(result) {
  if (result.kind === "name") return "Conversation name";
  if (result.kind === "attachment") return `File ${result.attachment.filename}`;
  return result.role === "user" ? "You" : "Assistant";
}

export function SearchBox({ client, onPick }) {
  const [query, setQuery] = useState("");
  const [found, setFound] = useState(null); // {results, error}
  const latest = useRef(0);

  useEffect(() => {
    const text = query.trim();
    if (!text) {
      setFound(null);
      return undefined;
    }
    const asked = ++latest.current;
    const timer = setTimeout(async () => {
      try {
        const page = await client.request("conversation.search", { query: text, limit: 20 });
        if (asked === latest.current) setFound({ results: page.results, error: null });
      } catch (error) {
        if (asked === latest.current) setFound({ results: [], error: sentence(error) });
      }
    }, DEBOUNCE_MS);
    return () => clearTimeout(timer);
  }, [query]);

  const pick = (result) => {
    client.openAt(result.conversation_id, result.message_id);
    onPick();
  };

  return html`<div class="search" role="search">
    <input type="search" class="search-input" aria-label="Search conversations" placeholder="Search"
      value=${query} maxlength="500" onInput=${(e) => setQuery(e.target.value)}
      onKeyDown=${(e) => e.key === "Escape" && setQuery("")} />
    ${found && html`<div class="search-results" aria-live="polite">
      ${found.error && html`<p class="muted">${found.error}</p>`}
      ${!found.error && found.results.length === 0 && html`<p class="muted">No matches.</p>`}
      ${found.results.length > 0 && html`<ul>
        ${found.results.map((r) => html`<li key=${`${r.conversation_id}/${r.message_id}/${r.kind}`}>
          <button class="search-result" onClick=${() => pick(r)}>
            <span class="search-where"><span class="name">${r.conversation_name}</span> · ${where(r)}</span>
            <${Highlighted} snippet=${r.snippet} highlights=${r.highlights} />
          </button></li>`)}
      </ul>`}
    </div>`}
  </div>`;
}
