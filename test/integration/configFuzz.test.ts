import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { parseDesiredState } from "../../src/config/desiredState.js";
import { checkFleetGuard } from "../../src/config/fleetGuard.js";
import { CronwardenError, FileConfigSource } from "../../src/index.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { hostileDocuments } from "../helpers/hostileDocuments.js";
import { pollUntil } from "../helpers/poll.js";
import { ServiceProcess } from "../helpers/processes.js";

/**
 * Generated hostile config documents (test/helpers/hostileDocuments.ts). The seed is printed;
 * set CRONWARDEN_FUZZ_SEED to replay a run.
 */

const COUNT = 1000;
const seed = Number(process.env.CRONWARDEN_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
let db: TestDatabase;
let dir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-fuzz-"));
});

afterAll(async () => {
  await db?.drop();
  await rm(dir, { recursive: true, force: true });
});

it(`every one of ${COUNT} hostile documents, read by the file source and validated, is an ordinary refusal or a snapshot`, async () => {
  const file = path.join(dir, "one.yaml");
  const source = new FileConfigSource({ path: file });
  const outcomes = new Map<string, number>();
  for (const document of hostileDocuments(seed + 1, COUNT, ["quick", "slow"])) {
    await writeFile(file, document.text);
    let outcome: string;
    try {
      const read = await source.load();
      const state = parseDesiredState(read.content, {
        defaultTimezone: "UTC",
        rules: { minIntervalMs: 1000 },
        now: new Date(),
        source: source.description,
        revision: read.revision,
      });
      const refusal = checkFleetGuard(state, {
        enabledNow: new Set(["quick", "slow"]),
        registered: new Set(["quick", "slow"]),
        maxDisableShare: 0.5,
      });
      outcome = refusal
        ? "refused by the fleet guard"
        : `snapshot with ${state.rejected.length ? "rejected entries" : "valid entries only"}`;
    } catch (error) {
      // only the library's own refusals, never an error of the parser or the runtime
      expect(error, `${document.kind}: ${String(error)}`).toBeInstanceOf(CronwardenError);
      outcome = `refused (${(error as CronwardenError).code})`;
    }
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
  }
  console.log(
    `config fuzz seed ${seed + 1}, in process: ${[...outcomes].map(([outcome, n]) => `${outcome} ${n}`).join(", ")}`,
  );
  expect([...outcomes.values()].reduce((a, b) => a + b, 0)).toBe(COUNT);
}, 120_000);

it(`a running service survives ${COUNT} hostile documents on its watched file and applies the valid one that follows`, async () => {
  console.log(`config fuzz seed ${seed} (replay: CRONWARDEN_FUZZ_SEED=${seed})`);
  const configFile = path.join(dir, "tasks.yaml");
  await writeFile(
    configFile,
    'tasks:\n  - name: quick\n    enabled: true\n    cron: "* * * * * *"\n  - name: slow\n    enabled: false\n    cron: "*/5 * * * * *"\n',
  );
  const service = new ServiceProcess("test/fixtures/instance.ts", {
    DATABASE_URL: db.url,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
    CRONWARDEN_ADMIN_ENABLED: "false",
  });
  try {
    await service.waitFor("the scheduler started", (line) => /^scheduler started/.test(String(line.msg)));
    const documents = hostileDocuments(seed, COUNT, ["quick", "slow"]);
    const kinds = new Map<string, number>();
    const configLines = () => service.lines.filter((line) => line.component === "config").length;
    let waitedFor = 0;
    for (const [index, document] of documents.entries()) {
      kinds.set(document.kind, (kinds.get(document.kind) ?? 0) + 1);
      // a new file renamed over the watched one: each document arrives whole, as a config push does
      const next = path.join(dir, `next-${index}.yaml`);
      const before = configLines();
      await writeFile(next, document.text);
      await rename(next, configFile);
      if (index % 10 === 0) {
        // every tenth document is waited for until the watcher answered it; the others arrive
        // faster than its debounce and are coalesced
        waitedFor += 1;
        await pollUntil("the watcher's answer", () => configLines() > before, { timeoutMs: 2000 }).catch(
          () => {},
        );
      }
      expect(service.child.exitCode, `the service died on document ${index} (${document.kind})`).toBeNull();
    }
    const final =
      'tasks:\n  - name: quick\n    enabled: true\n    cron: "*/2 * * * * *"\n  - name: slow\n    enabled: true\n    cron: "*/3 * * * * *"\n';
    await writeFile(path.join(dir, "final.yaml"), final);
    await rename(path.join(dir, "final.yaml"), configFile);
    await pollUntil(
      "the final document applied",
      async () => {
        const { rows } = await db.pool.query(
          "SELECT name, repeat_interval, disabled FROM agenda_jobs WHERE name IN ('quick', 'slow') ORDER BY name",
        );
        return (
          rows.length === 2 &&
          rows[0].repeat_interval === "*/2 * * * * *" &&
          rows[1].repeat_interval === "*/3 * * * * *" &&
          !rows[0].disabled &&
          !rows[1].disabled
        );
      },
      { timeoutMs: 30_000 },
    );
    expect(service.child.exitCode).toBeNull();
    const accepted = service.lines.filter((line) => /^config loaded/.test(String(line.msg))).length;
    const refused = service.lines.filter(
      (line) => line.component === "config" && /keeping/.test(String(line.msg)),
    ).length;
    console.log(
      `config fuzz seed ${seed}: ${COUNT} documents written (${[...kinds].map(([kind, n]) => `${kind} ${n}`).join(", ")}), ${waitedFor} waited for; the watcher accepted ${accepted} and refused ${refused} (the writes it coalesced were never read)`,
    );
    expect(accepted + refused).toBeGreaterThanOrEqual(waitedFor / 2);
    expect(service.stderr.join("")).not.toMatch(/FATAL|RangeError|Maximum call stack|out of memory/);
  } finally {
    await service.kill();
  }
}, 240_000);
