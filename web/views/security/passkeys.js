// The Security page's passkeys section.
export function PasskeysSection() {
  return null;
}
