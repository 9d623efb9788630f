// HTTP over the session cookie (HttpOnly: this page never holds a secret or a token): the Hope REST
// API under /api, and the Pheby attachment endpoints (uploads with progress, downloads as blob: URLs).

export class HttpError extends Error {
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

async function errorFrom(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status says enough
  }
  const detail = body && body.error ? body.error : {};
  return new HttpError(response.status, detail.code || `http_${response.status}`, detail.message || response.statusText, body);
}

// A JSON call to the REST API; resolves with the parsed body, rejects with an HttpError.
export async function api(method, path, body) {
  const headers = {};
  const init = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await errorFrom(response);
  return response.status === 204 ? null : response.json();
}

// POST /api/auth/login: the password starts a session; the answer's cookie is what this page keeps.
export function login(username, password) {
  return api("POST", "/api/auth/login", { username, password });
}

// POST /api/auth/session: the owner secret (or an API token) starts a session, as above.
export async function startSession(secret) {
  await api("POST", "/api/auth/session", { secret });
}

// The bytes behind an authenticated URL, as a Blob.
export async function fetchBlob(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (!response.ok) throw await errorFrom(response);
  return response.blob();
}

// POST /attachments with the raw bytes; XHR rather than fetch because it reports upload progress.
// A same-origin XHR carries the session cookie, and the browser adds the Origin the server checks.
export function uploadAttachment(conversationId, file, onProgress) {
  return new Promise((resolve, reject) => {
    const query = new URLSearchParams({ conversation_id: conversationId, filename: file.name || "pasted-file" });
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `/attachments?${query}`);
    xhr.setRequestHeader("Content-Type", file.type || "application/octet-stream");
    xhr.upload.onprogress = (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    };
    xhr.onload = () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        // leave body null
      }
      if (xhr.status === 201 && body) resolve(body.attachment);
      else {
        const detail = body && body.error ? body.error : {};
        reject(new HttpError(xhr.status, detail.code || `http_${xhr.status}`, detail.message || "Upload failed", body));
      }
    };
    xhr.onerror = () => reject(new HttpError(0, "network", "The upload could not reach the server"));
    xhr.send(file);
  });
}

// Save a Blob under a name (the download chip).
export function saveBlob(blob, filename) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
