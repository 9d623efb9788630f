// Small inline SVG icons (system fonts don't all have the symbols).
import { html } from "../lib/html.js";

const icon = (path) => html`<svg class="svg-icon" viewBox="0 0 24 24" width="18" height="18" aria-hidden="true" focusable="false"
  fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round">${path}</svg>`;

export const TrashIcon = () => icon(html`<path d="M4 7h16M10 11v6M14 11v6M6 7l1 13h10l1-13M9 7V4h6v3" />`);
export const PencilIcon = () => icon(html`<path d="M4 20h4L19 9l-4-4L4 16v4zM13.5 6.5l4 4" />`);
export const PaperclipIcon = () => icon(html`<path d="M21 11.5l-8.5 8.5a5 5 0 0 1-7-7L14 4.5a3.5 3.5 0 0 1 5 5L10.5 18a2 2 0 0 1-3-3L15 7.5" />`);
export const SlidersIcon = () => icon(html`<path d="M4 21v-7M4 10V3M12 21v-9M12 8V3M20 21v-5M20 12V3M1 14h6M9 8h6M17 16h6" />`);
export const MenuIcon = () => icon(html`<path d="M4 6h16M4 12h16M4 18h16" />`);
export const SendIcon = () => icon(html`<path d="M12 19V5M5 12l7-7 7 7" />`);
export const StopIcon = () => html`<svg class="svg-icon" viewBox="0 0 24 24" width="14" height="14" aria-hidden="true"><rect x="5" y="5" width="14" height="14" rx="2" fill="currentColor" /></svg>`;
