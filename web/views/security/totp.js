// The Security page's totp section.
export function TotpSection() {
  return null;
}
