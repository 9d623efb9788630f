// Where the signed-in credential is kept: sessionStorage (this tab, until it closes) unless the
// person asked to be kept signed in, then localStorage.
const KEY = "pheby.session";

export function saveCredential(session, keep) {
  clearCredential();
  (keep ? localStorage : sessionStorage).setItem(KEY, JSON.stringify(session));
}

export function loadCredential() {
  for (const [storage, keep] of [[sessionStorage, false], [localStorage, true]]) {
    const raw = storage.getItem(KEY);
    if (raw) {
      try {
        return { session: JSON.parse(raw), keep };
      } catch {
        storage.removeItem(KEY);
      }
    }
  }
  return null;
}

export function clearCredential() {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
}
