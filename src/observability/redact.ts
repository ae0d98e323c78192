/**
 * Removes credentials from text that leaves the process (HTTP responses, alerts): passwords in
 * URLs (`postgres://user:secret@host`), `password=...` pairs (libpq keyword strings), and any
 * known secret (the admin token) verbatim.
 */
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:/?#@]*:)[^\s/?#@]+@/gi;
const PASSWORD_PAIR = /\b(password"?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;&"'}]+)/gi;

export const REDACTED = "***";

export function redactSecrets(text: string, secrets: readonly string[] = []): string {
  let result = text
    .replace(URL_PASSWORD, `$1${REDACTED}@`)
    .replace(PASSWORD_PAIR, (_match, key: string, value: string) => {
      const quote = value.startsWith('"') || value.startsWith("'") ? value.charAt(0) : "";
      return `${key}${quote}${REDACTED}${quote}`;
    });
  for (const secret of secrets) {
    if (secret.length > 0) result = result.split(secret).join(REDACTED);
  }
  return result;
}
