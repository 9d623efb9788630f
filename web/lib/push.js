// Web Push in this browser: the service worker (/sw.js, which shows the notifications), the
// browser's push subscription, and the server's record of it (REST under /api/push). The record's
// id is kept in localStorage: notifications belong to this browser until they are turned off, or
// until sign-out, which turns them off.
import { api } from "./api.js";

const KEY = "pheby.push-subscription";
const WORKER = "/sw.js";

export const BLOCKED =
  "Notifications are blocked for this site in the browser's settings. Allow them there (the site's settings, beside the address), then turn this on.";

// Why this browser can't have Pheby's notifications, in plain words; "" when it can.
export function unsupportedReason() {
  if (!window.isSecureContext) return "Notifications need a secure connection: open Pheby over https.";
  if ("serviceWorker" in navigator && "PushManager" in window && "Notification" in window) return "";
  // Safari on iPhone and iPad (the only browser with navigator.standalone) offers Web Push only to home-screen apps.
  if ("standalone" in navigator && !navigator.standalone) {
    return "On iPhone and iPad, notifications work once Pheby is on the Home Screen: tap Share, then “Add to Home Screen”, and open Pheby from there.";
  }
  return "This browser can't show notifications from web apps.";
}

// Registered at start-up as well as when notifications are turned on, so that the page is
// installable and a worker is in place before it is needed. Resolves null where it can't be.
export function registerServiceWorker() {
  if (!("serviceWorker" in navigator)) return Promise.resolve(null);
  return navigator.serviceWorker.register(WORKER, { scope: "/" }).catch(() => null);
}

async function currentSubscription() {
  const registration = await navigator.serviceWorker.getRegistration("/");
  return registration ? registration.pushManager.getSubscription() : null;
}

// Whether notifications are on here: the server's record is remembered, and the browser still has
// both the permission and the subscription (either can be taken away in its settings).
export async function notificationsAreOn() {
  if (unsupportedReason() || Notification.permission !== "granted" || !localStorage.getItem(KEY)) return false;
  return Boolean(await currentSubscription().catch(() => null));
}

// Asks for the permission (call it straight from the person's click), subscribes this browser with
// the server's VAPID key and records the subscription on the server. Rejects with a sentence.
export async function turnOnNotifications() {
  const permission = await Notification.requestPermission();
  if (permission === "denied") throw new Error(BLOCKED);
  if (permission !== "granted") throw new Error("Notifications were not allowed. Turn this on again to be asked again.");
  await registerServiceWorker();
  const registration = await navigator.serviceWorker.ready; // subscribing needs an active worker
  const config = await api("GET", "/api/push/config").catch((error) => {
    throw new Error(error.status === 404 ? "This server does not send notifications." : `The server's push settings could not be read: ${error.message}`);
  });
  // Never reuse a subscription: one left from an earlier sign-in may be recorded for another account.
  const old = await registration.pushManager.getSubscription();
  if (old) await old.unsubscribe();
  const subscription = await registration.pushManager
    .subscribe({ userVisibleOnly: true, applicationServerKey: base64UrlBytes(config.vapid_public_key) })
    .catch((error) => {
      throw new Error(`The browser's push service refused to subscribe (${error.message}).`);
    });
  const { endpoint, keys } = subscription.toJSON();
  try {
    const body = await api("POST", "/api/push/subscriptions", { endpoint, keys: { p256dh: keys.p256dh, auth: keys.auth } });
    localStorage.setItem(KEY, body.subscription.id);
    return body.subscription;
  } catch (error) {
    await subscription.unsubscribe().catch(() => {});
    throw new Error(`The server refused this browser's subscription: ${error.message}`);
  }
}

// Removes the server's record (while the session still works) and the browser's subscription. Never
// rejects: a record the server could not be told about dies at the push service with the subscription.
export async function turnOffNotifications() {
  const id = localStorage.getItem(KEY);
  localStorage.removeItem(KEY);
  if (id) await api("DELETE", `/api/push/subscriptions/${encodeURIComponent(id)}`).catch(() => {});
  if (unsupportedReason()) return;
  const subscription = await currentSubscription().catch(() => null);
  if (subscription) await subscription.unsubscribe().catch(() => {});
}

function base64UrlBytes(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(text.length / 4) * 4, "=");
  return Uint8Array.from(atob(base64), (char) => char.charCodeAt(0));
}
