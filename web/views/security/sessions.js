// The Security page's sessions section.
export function SessionsSection() {
  return null;
}
