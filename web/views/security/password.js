// The Security page's password section.
export function PasswordSection() {
  return null;
}
