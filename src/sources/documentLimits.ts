/**
 * A cheap structural pre-scan of a config document's text, run before any parser sees it.
 *
 * The `yaml` parser composes nodes recursively: a document nested a thousand levels deep (a few
 * kilobytes) overflows the stack, and inside a busy process the overflow can land in V8's regexp
 * compiler, where it is fatal rather than a catchable RangeError. Parsing time also grows fast with
 * the node count (300,000 flow items: 6 s of blocked event loop). A config document is a flat list
 * of tasks, so both are refused here, in one linear pass that uses no recursion, before parsing.
 *
 * The scan over-approximates: block nesting from indentation (each compact "- " marker is a level of
 * its own), flow nesting from brackets outside quoted scalars, nodes from item and key markers.
 * Block scalar bodies (`|`, `>`) and comments are skipped.
 */

export interface DocumentLimits {
  /** Deepest nesting of collections (block and flow together). */
  maxDepth: number;
  /** Most collection items and mapping keys. */
  maxNodes: number;
}

/** 10,000 tasks of four fields are about 50,000 nodes and 3 levels. */
export const DEFAULT_DOCUMENT_LIMITS: DocumentLimits = { maxDepth: 64, maxNodes: 120_000 };

export class DocumentTooComplexError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DocumentTooComplexError";
  }
}

const MARKER = /^[-?:](?=\s|$)/;
const BLOCK_SCALAR_HEADER = /[|>][-+0-9]*\s*$/;
/** Where a quoted scalar may begin: after these (or at the start of the line). */
const QUOTE_MAY_OPEN = new Set([":", "-", "[", "{", ",", "?", ""]);

/** Throws a DocumentTooComplexError naming the line and the limit when `text` exceeds `limits`. */
export function checkDocumentStructure(text: string, limits: DocumentLimits = DEFAULT_DOCUMENT_LIMITS): void {
  const indents: number[] = [];
  let flowDepth = 0;
  let nodes = 0;
  let quote: '"' | "'" | null = null;
  let blockScalarParent: number | null = null;
  const lines = text.split("\n");

  const tooDeep = (lineNumber: number, depth: number) =>
    new DocumentTooComplexError(
      `is nested more than ${limits.maxDepth} levels deep (level ${depth} at line ${lineNumber}); a config document is a list of task entries, a few levels deep`,
    );

  for (let index = 0; index < lines.length; index++) {
    const line = (lines[index] ?? "").replace(/\r$/, "");
    const lineNumber = index + 1;
    const indent = line.length - line.trimStart().length;
    const rest = line.slice(indent);

    if (blockScalarParent !== null) {
      if (rest === "" || indent > blockScalarParent) continue;
      blockScalarParent = null;
    }
    if (quote === null && flowDepth === 0) {
      if (rest === "" || rest.startsWith("#") || rest === "---" || rest === "...") continue;
      nodes += pushBlockIndents(indents, indent, rest);
      if (indents.length > limits.maxDepth) throw tooDeep(lineNumber, indents.length);
    }

    let previous = "";
    let lineEnd = line.length;
    for (let i = quote === null && flowDepth === 0 ? indent : 0; i < line.length; i++) {
      const char = line.charAt(i);
      if (quote === '"') {
        if (char === "\\") i += 1;
        else if (char === '"') quote = null;
        continue;
      }
      if (quote === "'") {
        if (char === "'") quote = null; // '' (an escaped quote) closes and reopens
        continue;
      }
      if ((char === '"' || char === "'") && QUOTE_MAY_OPEN.has(previous)) {
        quote = char;
        continue;
      }
      if (char === "#" && (i === 0 || /\s/.test(line.charAt(i - 1)))) {
        lineEnd = i;
        break;
      }
      if (char === "[" || char === "{") {
        flowDepth += 1;
        nodes += 1;
        const depth = indents.length + flowDepth;
        if (depth > limits.maxDepth) throw tooDeep(lineNumber, depth);
      } else if (char === "]" || char === "}") {
        flowDepth = Math.max(0, flowDepth - 1);
      } else if (char === ",") {
        nodes += 1;
      } else if (char === ":" && (i + 1 >= line.length || /\s/.test(line.charAt(i + 1)))) {
        nodes += 1;
      }
      if (!/\s/.test(char)) previous = char;
    }
    if (nodes > limits.maxNodes) {
      throw new DocumentTooComplexError(
        `has more than ${limits.maxNodes} items and keys (passed at line ${lineNumber}); a config document holds one entry per task`,
      );
    }
    if (quote === null && flowDepth === 0 && BLOCK_SCALAR_HEADER.test(line.slice(0, lineEnd))) {
      blockScalarParent = indent;
    }
  }
}

/**
 * A block line's levels: the indents deeper than this line's are closed, this line's is pushed,
 * and one more per marker (`-`, `?`, `:`) it starts with (`- - a` is two levels). Returns the
 * markers, each a node.
 */
function pushBlockIndents(indents: number[], indent: number, rest: string): number {
  while (indents.length > 0 && (indents.at(-1) ?? 0) >= indent) indents.pop();
  indents.push(indent);
  let markers = 0;
  let column = indent;
  let content = rest;
  for (let marker = MARKER.exec(content); marker; marker = MARKER.exec(content)) {
    markers += 1;
    const after = content.slice(1);
    const skipped = after.length - after.trimStart().length;
    column += 1 + skipped;
    content = after.trimStart();
    indents.push(column);
  }
  return markers;
}
