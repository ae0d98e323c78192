import { CronwardenError } from "../core/errors.js";

/** Where an environment's name goes in a source's URL, key or prefix. */
export const NAMESPACE_PLACEHOLDER = "{namespace}";

const NAMESPACE_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/**
 * Fills every `{namespace}` placeholder of `template` (a URL, an etcd key or prefix) with
 * `namespace` (dev, staging, prod...). A placeholder without a namespace, or a namespace without a
 * placeholder, is a settings mistake: it would silently read another environment's config.
 * `field` names the option in errors; the template itself is not quoted (a URL may hold secrets).
 */
export function applyNamespace(
  template: string,
  namespace: string | undefined,
  field: string,
  encode: (value: string) => string = (value) => value,
): string {
  const hasPlaceholder = template.includes(NAMESPACE_PLACEHOLDER);
  if (namespace === undefined) {
    if (!hasPlaceholder) return template;
    throw new CronwardenError(
      "INVALID_SETTINGS",
      `${field} contains ${NAMESPACE_PLACEHOLDER} but no namespace was given; pass namespace (e.g. "prod")`,
    );
  }
  if (!NAMESPACE_PATTERN.test(namespace)) {
    throw new CronwardenError(
      "INVALID_SETTINGS",
      `namespace ${JSON.stringify(namespace)} is invalid: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit`,
    );
  }
  if (!hasPlaceholder) {
    throw new CronwardenError(
      "INVALID_SETTINGS",
      `namespace ${JSON.stringify(namespace)} was given but ${field} has no ${NAMESPACE_PLACEHOLDER} placeholder; put ${NAMESPACE_PLACEHOLDER} where the environment's name goes`,
    );
  }
  return template.replaceAll(NAMESPACE_PLACEHOLDER, encode(namespace));
}
