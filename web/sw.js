// Pheby Web's service worker, served at /sw.js so that its scope is the whole app. It caches
// nothing (the page is no use without the server): it shows the server's Web Push notifications,
// answers their buttons without opening a page, and opens the conversation a notification is about.
//
// A push carries JSON: {type, tag, conversation_id, title, body, url, approval_id?,
// actions?: [{action, title, token}]}. The tokens stay in the notification's data: each is the
// credential for one answer, so answering needs no sign-in here.

// The versioned prefix of the app's files, filled in by the server (pheby/web_client.py).
const ICON = "%ASSET_BASE%/icons/icon-192.png";
// These wait for the person's answer: they stay on screen until acted on.
const WAITING_TYPES = new Set(["approval", "clarify"]);

// A new version takes over at once: it holds no state that an old page could depend on.
self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => event.waitUntil(handlePush(readPush(event))));
self.addEventListener("notificationclick", (event) => event.waitUntil(handleClick(event.notification, event.action)));

function readPush(event) {
  try {
    return event.data ? event.data.json() : null;
  } catch {
    return null;
  }
}

// Shows what a push is about, or, for a "dismiss", closes the notifications it is no longer about
// (the question was answered elsewhere).
async function handlePush(payload) {
  if (!payload || typeof payload !== "object") {
    // Subscribed with userVisibleOnly: every push must show something.
    return self.registration.showNotification("Pheby", { body: "Something new in Pheby.", icon: ICON, data: { url: "/" } });
  }
  if (payload.type === "dismiss") return closeTagged(payload.tag);
  const actions = Array.isArray(payload.actions) ? payload.actions : [];
  return self.registration.showNotification(payload.title || "Pheby", {
    body: payload.body || "",
    tag: payload.tag || undefined,
    icon: ICON,
    data: payload,
    actions: actions.map(({ action, title }) => ({ action, title })),
    requireInteraction: WAITING_TYPES.has(payload.type),
  });
}

async function closeTagged(tag) {
  if (!tag) return; // no tag would match every notification
  for (const notification of await self.registration.getNotifications({ tag })) notification.close();
}

// A button answers here and now; a click anywhere else opens the conversation.
async function handleClick(notification, action) {
  const payload = notification.data || {};
  if (!action) {
    notification.close();
    return openConversation(payload.url);
  }
  const answered = await answerAction(payload, action);
  notification.close();
  if (!answered) {
    // The person thinks they answered: say that it did not happen, and where to look.
    await self.registration.showNotification("Not answered", {
      body: "That request is no longer waiting, or the server could not be reached. Open Pheby to see it.",
      tag: notification.tag || undefined,
      icon: ICON,
      data: { type: "not_answered", url: payload.url, conversation_id: payload.conversation_id },
    });
  }
}

// POST /api/push/actions with the button's token; true when the server took the answer.
async function answerAction(payload, action) {
  const button = (Array.isArray(payload.actions) ? payload.actions : []).find((a) => a.action === action);
  if (!button) return false;
  try {
    const response = await fetch("/api/push/actions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: button.token, action }),
      credentials: "omit",
    });
    return response.ok;
  } catch {
    return false; // offline
  }
}

// Takes a window of the app to `url` (a conversation) and focuses it, or opens a new one there.
async function openConversation(url) {
  const target = new URL(url || "/", self.location.origin);
  const href = target.origin === self.location.origin ? target.href : new URL("/", self.location.origin).href;
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const chosen = windows.find((c) => c.focused) || windows.find((c) => c.visibilityState === "visible") || windows[0];
  // navigate() refuses a window this worker does not control (one opened before it was installed).
  const navigated = chosen ? await chosen.navigate(href).catch(() => null) : null;
  if (navigated) return navigated.focus().catch(() => navigated);
  return self.clients.openWindow(href);
}
