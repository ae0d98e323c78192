/** HTTP helpers for the admin API tests: calls that record every answer, and a Prometheus text parser. */

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: unknown;
}

/** Calls `baseUrl + path` and records the whole answer (headers and body) in `transcript`. */
export function httpClient(baseUrl: () => string, transcript: string[]) {
  return async (
    method: string,
    path: string,
    options: { token?: string; body?: string; contentType?: string } = {},
  ): Promise<Answer> => {
    const headers: Record<string, string> = {};
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    if (options.contentType) headers["content-type"] = options.contentType;
    const response = await fetch(`${baseUrl()}${path}`, { method, headers, body: options.body });
    const text = await response.text();
    transcript.push(
      `${method} ${path} -> ${response.status} ${JSON.stringify([...response.headers])} ${text}`,
    );
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: response.status, headers: response.headers, text, json };
  };
}

/** `name{a="x",b="y"} 12` lines -> a map from `name{a="x",b="y"}` (labels as written) to the value. */
export function parsePrometheus(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?) (\S+)$/.exec(line);
    if (!match?.[1] || match[2] === undefined) throw new Error(`not a Prometheus sample line: ${line}`);
    samples.set(match[1], Number(match[2]));
  }
  return samples;
}

/** The value of `name` with exactly these labels (in any order), if present. */
export function sample(
  samples: Map<string, number>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const wanted = Object.entries(labels)
    .map(([key, value]) => `${key}="${value}"`)
    .sort();
  for (const [key, value] of samples) {
    const match = /^([^{]+)(?:\{(.*)\})?$/.exec(key);
    if (match?.[1] !== name) continue;
    const have = (match[2] ? (match[2].match(/[a-zA-Z_]+="(?:[^"\\]|\\.)*"/g) ?? []) : []).sort();
    if (have.length === wanted.length && have.every((label, index) => label === wanted[index])) return value;
  }
  return undefined;
}
