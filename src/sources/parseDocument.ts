import YAML from "yaml";
import { toError } from "../core/logger.js";
import { checkDocumentStructure, DEFAULT_DOCUMENT_LIMITS, type DocumentLimits } from "./documentLimits.js";

export type DocumentFormat = "json" | "yaml";

/** JSON first (its errors are the clearer ones for JSON text), then YAML. */
export const ANY_FORMAT: readonly DocumentFormat[] = ["json", "yaml"];

const PARSERS: Record<DocumentFormat, [string, (text: string) => unknown]> = {
  json: ["JSON", (text) => JSON.parse(text)],
  // maxAliasCount bounds alias expansion ("billion laughs"); the depth and size are bounded before
  yaml: [
    "YAML",
    (text) =>
      YAML.parse(text, { prettyErrors: true, uniqueKeys: true, maxAliasCount: 100, logLevel: "error" }),
  ],
};

/**
 * Parses a config document's text with the first of `formats` that accepts it. The text's
 * structure is checked first (src/sources/documentLimits.ts): no document, however hostile, reaches
 * a parser nested deep enough to overflow its stack. Throws an Error naming the last format tried
 * and the parser's message, with line and column for both YAML and JSON.
 */
export function parseDocument(
  text: string,
  formats: readonly DocumentFormat[],
  limits: DocumentLimits = DEFAULT_DOCUMENT_LIMITS,
): unknown {
  try {
    checkDocumentStructure(text, limits);
  } catch (thrown) {
    throw new Error(`document refused before parsing: it ${toError(thrown).message}`);
  }
  let lastError: Error | undefined;
  for (const format of formats) {
    const [label, parse] = PARSERS[format];
    try {
      return parse(text);
    } catch (thrown) {
      const message = toError(thrown).message;
      lastError = new Error(
        `not valid ${label}: ${format === "json" ? withLineAndColumn(message, text) : message}`,
      );
    }
  }
  throw lastError ?? new Error("no format to parse with");
}

/**
 * V8's JSON errors give a character offset ("at position 812"), or none at all ("Unexpected token
 * '}', ... is not valid JSON"); people read lines and columns. Without an offset, it is found as
 * the longest prefix that is still valid JSON so far (a parse that fails only for running out of
 * text): about 20 parses of a 1 MiB document.
 */
function withLineAndColumn(message: string, text: string): string {
  const position = /\bposition (\d+)/.exec(message);
  const offset = position?.[1]
    ? Number(position[1])
    : /Unexpected end of JSON input/.test(message)
      ? text.length
      : validPrefixLength(text);
  const before = text.slice(0, offset);
  const line = before.split("\n").length;
  const column = offset - before.lastIndexOf("\n");
  const shown = message
    .replace(/\s*\(line \d+ column \d+\)/, "")
    .replace(/, (?:\.\.\.)?".*"(?:\.\.\.)? is not valid JSON$/s, "");
  return `${shown} (line ${line}, column ${column})`;
}

function validPrefixLength(text: string): number {
  let valid = 0;
  let invalid = text.length;
  while (invalid - valid > 1) {
    const middle = Math.floor((valid + invalid) / 2);
    if (validSoFar(text.slice(0, middle))) valid = middle;
    else invalid = middle;
  }
  return valid;
}

function validSoFar(prefix: string): boolean {
  try {
    JSON.parse(prefix);
    return true;
  } catch (thrown) {
    const message = toError(thrown).message;
    const position = /\bposition (\d+)/.exec(message);
    return /Unexpected end of JSON input/.test(message) || Number(position?.[1]) === prefix.length;
  }
}

/** The format a Content-Type names (`application/json`, `+json`, `application/yaml`, `text/yaml`...), if any. */
export function formatOfContentType(contentType: string | null): DocumentFormat | undefined {
  const mediaType = contentType?.split(";")[0]?.trim().toLowerCase() ?? "";
  if (mediaType === "application/json" || mediaType.endsWith("+json")) return "json";
  if (/^(application|text)\/(x-)?yaml$/.test(mediaType) || mediaType.endsWith("+yaml")) return "yaml";
  return undefined;
}
