// WebAuthn in JSON: the server's options come with binary fields as base64url strings, and the
// credential the browser makes goes back the same way (the forms py_webauthn reads).

export function passkeysSupported() {
  return typeof window.PublicKeyCredential === "function" && Boolean(navigator.credentials);
}

export function fromBase64url(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const binary = atob(base64 + "===".slice((base64.length + 3) % 4));
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes.buffer;
}

export function toBase64url(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

const descriptors = (list) => (list || []).map((d) => ({ ...d, id: fromBase64url(d.id) }));

// PublicKeyCredentialCreationOptionsJSON → what navigator.credentials.create() takes.
export function creationOptions(json) {
  return {
    ...json,
    challenge: fromBase64url(json.challenge),
    user: { ...json.user, id: fromBase64url(json.user.id) },
    excludeCredentials: descriptors(json.excludeCredentials),
  };
}

// PublicKeyCredentialRequestOptionsJSON → what navigator.credentials.get() takes.
export function requestOptions(json) {
  return { ...json, challenge: fromBase64url(json.challenge), allowCredentials: descriptors(json.allowCredentials) };
}

export function registrationJSON(credential) {
  const response = credential.response;
  return {
    id: credential.id,
    rawId: toBase64url(credential.rawId),
    type: credential.type,
    authenticatorAttachment: credential.authenticatorAttachment || null,
    response: {
      clientDataJSON: toBase64url(response.clientDataJSON),
      attestationObject: toBase64url(response.attestationObject),
      transports: typeof response.getTransports === "function" ? response.getTransports() : [],
    },
  };
}

export function assertionJSON(credential) {
  const response = credential.response;
  return {
    id: credential.id,
    rawId: toBase64url(credential.rawId),
    type: credential.type,
    authenticatorAttachment: credential.authenticatorAttachment || null,
    response: {
      clientDataJSON: toBase64url(response.clientDataJSON),
      authenticatorData: toBase64url(response.authenticatorData),
      signature: toBase64url(response.signature),
      userHandle: response.userHandle ? toBase64url(response.userHandle) : null,
    },
  };
}

// A new passkey made from the server's registration options, as JSON for POST /api/auth/passkeys.
export async function createPasskey(optionsJSON) {
  return registrationJSON(await navigator.credentials.create({ publicKey: creationOptions(optionsJSON) }));
}

// An assertion by one of the passkeys the browser holds for this site, as JSON for POST /api/auth/passkey.
export async function getPasskey(optionsJSON) {
  return assertionJSON(await navigator.credentials.get({ publicKey: requestOptions(optionsJSON) }));
}

// What a person is told when the browser's own prompt ends without a passkey.
export function passkeyPromptMessage(error) {
  if (error && error.name === "NotAllowedError") return "No passkey was used (the prompt was closed or timed out).";
  if (error && error.name === "InvalidStateError") return "This device already has a passkey for this account.";
  return (error && error.message) || "The passkey did not work.";
}
