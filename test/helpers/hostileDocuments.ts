/**
 * A seeded generator of hostile config documents, for the fuzz test: random bytes, deep nesting
 * (block and flow, YAML and JSON), huge numbers, wrong types, __proto__ and constructor keys,
 * duplicate names, very long strings, NUL bytes, alias bombs and near-valid documents. The same
 * seed gives the same documents, so a failure can be replayed (CRONWARDEN_FUZZ_SEED).
 */

/** mulberry32: a small, well-known seeded PRNG. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface HostileDocument {
  kind: string;
  text: string;
}

export function hostileDocuments(
  seed: number,
  count: number,
  taskNames: readonly string[],
): HostileDocument[] {
  const random = seededRandom(seed);
  const int = (max: number) => Math.floor(random() * max);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)] as T;
  const name = () => pick(taskNames);
  const entry = (extra = "") =>
    `  - name: ${name()}\n    enabled: ${random() < 0.8}\n    cron: "*/${2 + int(5)} * * * * *"\n${extra}`;
  const generators: Array<[string, () => string]> = [
    [
      "random bytes",
      () => Buffer.from(Array.from({ length: 1 + int(4000) }, () => int(256))).toString("latin1"),
    ],
    [
      "deep block nesting",
      () => {
        const levels = 50 + int(3000);
        return `tasks:\n${Array.from({ length: levels }, (_, i) => `${" ".repeat(i + 2)}- `).join("\n")}x\n`;
      },
    ],
    ["deep compact nesting", () => `tasks:\n  ${"- ".repeat(60 + int(2000))}x\n`],
    [
      "deep flow nesting",
      () => {
        const levels = 60 + int(21_000);
        return `${pick(["", "tasks: "])}${"[".repeat(levels)}${"]".repeat(levels)}`;
      },
    ],
    [
      "deep JSON objects",
      () => {
        const levels = 60 + int(5000);
        return `{"tasks": ${'{"a":'.repeat(levels)}1${"}".repeat(levels)}}`;
      },
    ],
    [
      "huge numbers",
      () =>
        `tasks:\n  - name: ${name()}\n    enabled: ${"9".repeat(1 + int(5000))}\n    cron: ${"1e".repeat(1)}${int(100000)}\n`,
    ],
    [
      "wrong types",
      () =>
        pick([
          "tasks: 42",
          "tasks: {a: 1}",
          '"just a string"',
          "[1, 2, 3]",
          "tasks:\n  - 17\n  - null\n  - [a, b]",
          `tasks:\n  - name: ${name()}\n    enabled: "yes"\n    cron: 5\n`,
          "null",
          "~",
          "true",
          "",
        ]),
    ],
    [
      "prototype keys",
      () =>
        pick([
          `tasks:\n  - name: ${name()}\n    enabled: true\n    cron: "* * * * * *"\n    __proto__: {polluted: true}\n`,
          `{"tasks": [{"name": "${name()}", "enabled": true, "cron": "* * * * * *", "constructor": {"prototype": {"x": 1}}}], "__proto__": {"tasks": []}}`,
          `__proto__:\n  confirmDisableAll: true\ntasks: []\n`,
          `tasks:\n  - __proto__: {name: ${name()}, enabled: true, cron: "* * * * * *"}\n`,
        ]),
    ],
    [
      "duplicate names",
      () => `tasks:\n${entry()}${entry()}${entry()}`.replaceAll(/name: \w+/g, `name: ${name()}`),
    ],
    [
      "duplicate keys",
      () => `tasks:\n  - name: ${name()}\n    name: other\n    enabled: true\n    cron: "* * * * * *"\n`,
    ],
    [
      "very long strings",
      () =>
        `tasks:\n  - name: ${"n".repeat(1000 + int(200_000))}\n    enabled: true\n    cron: "${"*".repeat(int(50_000))}"\n`,
    ],
    [
      "NUL bytes",
      () => `tasks:\n  - name: ${name()}\u0000\n    enabled: true\u0000\n    cron: "* * * * * *\u0000"\n`,
    ],
    [
      "alias bomb",
      () => {
        let text = "a: &a [x, x, x, x, x, x, x, x, x]\n";
        for (let level = 1; level < 10; level++)
          text += `${String.fromCharCode(97 + level)}: &${String.fromCharCode(97 + level)} [${Array(9)
            .fill(`*${String.fromCharCode(96 + level)}`)
            .join(", ")}]\n`;
        return `${text}tasks: []\n`;
      },
    ],
    ["many items", () => `tasks: [${Array.from({ length: 130_000 }, () => "1").join(",")}]`],
    [
      "bad cron and timezone",
      () =>
        `tasks:\n  - name: ${name()}\n    enabled: true\n    cron: "${pick(["61 * * * *", "* * *", "@reboot", "*/0 * * * *", "L W #"])}"\n    timezone: ${pick(["Mars/Base", "UTC+25", "../../etc/passwd", '""'])}\n`,
    ],
    [
      "typo fleet",
      () => `tasks:\n  - name: ${name().toUpperCase()}\n    enabled: true\n    cron: "* * * * * *"\n`,
    ],
    [
      "unterminated",
      () => pick(['{"tasks": [', "tasks:\n  - name: 'x\n", "tasks: [a, b", "{{{{", "tasks:\n\t- tab"]),
    ],
    [
      "mutated valid",
      () => {
        const valid = `tasks:\n${taskNames.map((task) => `  - name: ${task}\n    enabled: true\n    cron: "*/5 * * * * *"\n`).join("")}`;
        const chars = [...valid];
        for (let i = 0; i < 1 + int(10); i++)
          chars[int(chars.length)] = pick([
            ":",
            "-",
            " ",
            "\n",
            "[",
            "{",
            "'",
            '"',
            "&",
            "*",
            "!",
            "|",
            ">",
            "#",
          ]);
        return chars.join("");
      },
    ],
  ];
  return Array.from({ length: count }, () => {
    const [kind, generate] = pick(generators);
    return { kind, text: generate() };
  });
}
