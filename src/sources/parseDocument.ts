import YAML from "yaml";
import { toError } from "../scheduler/logger.js";

export type DocumentFormat = "json" | "yaml";

/** JSON first (its errors are the clearer ones for JSON text), then YAML. */
export const ANY_FORMAT: readonly DocumentFormat[] = ["json", "yaml"];

const PARSERS: Record<DocumentFormat, [string, (text: string) => unknown]> = {
  json: ["JSON", (text) => JSON.parse(text)],
  yaml: ["YAML", (text) => YAML.parse(text, { prettyErrors: true, uniqueKeys: true })],
};

/**
 * Parses a config document's text with the first of `formats` that accepts it. Throws an Error
 * naming the last format tried and the parser's message (with line and column for YAML).
 */
export function parseDocument(text: string, formats: readonly DocumentFormat[]): unknown {
  let lastError: Error | undefined;
  for (const format of formats) {
    const [label, parse] = PARSERS[format];
    try {
      return parse(text);
    } catch (thrown) {
      lastError = new Error(`not valid ${label}: ${toError(thrown).message}`);
    }
  }
  throw lastError ?? new Error("no format to parse with");
}

/** The format a Content-Type names (`application/json`, `+json`, `application/yaml`, `text/yaml`...), if any. */
export function formatOfContentType(contentType: string | null): DocumentFormat | undefined {
  const mediaType = contentType?.split(";")[0]?.trim().toLowerCase() ?? "";
  if (mediaType === "application/json" || mediaType.endsWith("+json")) return "json";
  if (/^(application|text)\/(x-)?yaml$/.test(mediaType) || mediaType.endsWith("+yaml")) return "yaml";
  return undefined;
}
