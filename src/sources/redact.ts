/** Header and query-parameter names whose values are secrets. */
export const SENSITIVE_NAME = /auth|token|secret|password|passw|key|cookie|session|signature|credential/i;

/**
 * Masks each secret, and any 8 characters in a row of it: parser messages quote fragments of the
 * body (V8's JSON errors show a few characters around the fault), which may echo a header.
 */
export function maskSecrets(text: string, secrets: string[]): string {
  const window = 8;
  let masked = text;
  for (const secret of secrets) {
    if (secret.length < window) {
      if (secret) masked = masked.replaceAll(secret, "***");
      continue;
    }
    masked = masked.replaceAll(secret, "***");
    for (let start = 0; start + window <= secret.length; start += 1) {
      masked = masked.replaceAll(secret.slice(start, start + window), "***");
    }
  }
  return masked;
}

/** The URL with values of query parameters named like secrets masked, for logs and errors. */
export function redactUrl(url: string): string {
  return url.replace(/([?&][^=&#]*=)([^&#]*)/g, (match, name: string) =>
    SENSITIVE_NAME.test(name) ? `${name}***` : match,
  );
}
