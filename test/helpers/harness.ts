import { mkdtempSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Pool } from "pg";
import { afterAll, beforeAll } from "vitest";
import YAML from "yaml";
import {
  createScheduler,
  FileConfigSource,
  type ReconcileResult,
  type Scheduler,
  type TaskRegistration,
} from "../../src/index.js";
import type { SchedulerSettingsInput } from "../../src/scheduler/settings.js";
import { createTestDatabase, type TestDatabase } from "./database.js";
import { LogCapture } from "./logs.js";
import { pollUntil } from "./poll.js";

export interface ConfigEntry {
  name: string;
  enabled?: boolean;
  cron?: string;
  timezone?: string;
  catchUp?: { window?: string; runs?: string };
  every?: string;
  jitter?: string;
  overlap?: string;
  at?: string;
  pauseOnFailure?: number;
  /** A static sharded task (docs/sharding.md). */
  shards?: number;
  shardParameters?: unknown[] | Record<string, unknown>;
  /** A downstream (docs/dependencies.md): no default cron is added to it. */
  after?: string[];
  /** Calendar names (docs/calendars.md); the document's `calendars:` is the caller's. */
  exclude?: string[];
  when?: string;
  waitAtMost?: string;
  /** Lowers the registration's timeoutMs / memoryLimitMb (docs/isolation.md). */
  timeout?: string;
  memoryLimit?: string;
}

/** One in-process scheduler on a watched temp config file, with its logs captured. */
export class SchedulerHarness {
  readonly logs = new LogCapture();
  readonly configPath: string;
  readonly scheduler: Scheduler;
  readonly #dir: string;

  private constructor(dir: string, pool: Pool, tasks: TaskRegistration[], settings: SchedulerSettingsInput) {
    this.#dir = dir;
    this.configPath = path.join(dir, "tasks.yaml");
    this.scheduler = createScheduler({
      pool,
      config: new FileConfigSource({ path: this.configPath, debounceMs: 50, pollIntervalMs: 500 }),
      logger: this.logs.logger,
      minIntervalMs: 1000,
      processEveryMs: 500,
      drainTimeoutMs: 10_000,
      ...settings,
    });
    for (const task of tasks) this.scheduler.register(task);
  }

  /** A scheduler on a config path that does not exist yet, not started. */
  static create(
    pool: Pool,
    tasks: TaskRegistration[],
    settings: SchedulerSettingsInput = {},
  ): SchedulerHarness {
    return new SchedulerHarness(
      mkdtempSync(path.join(tmpdir(), "cronwarden-config-")),
      pool,
      tasks,
      settings,
    );
  }

  static async start(
    pool: Pool,
    tasks: TaskRegistration[],
    config: ConfigEntry[],
    settings: SchedulerSettingsInput = {},
  ): Promise<SchedulerHarness> {
    const dir = await mkdtemp(path.join(tmpdir(), "cronwarden-config-"));
    const harness = new SchedulerHarness(dir, pool, tasks, settings);
    await harness.writeRaw(yamlOf(config));
    await harness.scheduler.start();
    return harness;
  }

  /** Writes the config file by rename (as editors do) and resolves when a reconcile of it finished. */
  async writeConfig(config: ConfigEntry[], timeoutMs = 60_000): Promise<ReconcileResult> {
    // the config's own reconcile: an anti-entropy pass in between is not it, and a failed one
    // ends the wait with its error instead of leaving the test to its timeout
    const reconciled = new Promise<ReconcileResult>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.scheduler.off("reconciled", onReconciled);
        this.scheduler.off("reconcile:failed", onFailed);
      };
      const onReconciled = (result: ReconcileResult) => {
        if (result.trigger !== "config") return;
        done();
        resolve(result);
      };
      const onFailed = (event: { error: Error; trigger: string }) => {
        if (event.trigger !== "config") return;
        done();
        reject(new Error(`the reconcile of the written config failed: ${event.error.message}`));
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`no reconcile of the written config within ${timeoutMs} ms`));
      }, timeoutMs);
      this.scheduler.on("reconciled", onReconciled);
      this.scheduler.on("reconcile:failed", onFailed);
    });
    await this.writeRaw(yamlOf(config));
    return reconciled;
  }

  nextReconcile(): Promise<ReconcileResult> {
    return new Promise((resolve) => this.scheduler.once("reconciled", resolve));
  }

  async writeRaw(text: string): Promise<void> {
    const temporary = `${this.configPath}.tmp-${process.hrtime.bigint()}`;
    await writeFile(temporary, text);
    const { rename } = await import("node:fs/promises");
    await rename(temporary, this.configPath);
  }

  /** Resolves after `count` more runs of `taskName` have finished. */
  runsOf(taskName: string, count: number, timeoutMs = 20_000): Promise<void> {
    let seen = 0;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.scheduler.off("run:finished", listener);
        reject(new Error(`timed out waiting for ${count} run(s) of ${taskName} (saw ${seen})`));
      }, timeoutMs);
      const listener = (event: { taskName: string }) => {
        if (event.taskName !== taskName) return;
        seen += 1;
        if (seen >= count) {
          clearTimeout(timer);
          this.scheduler.off("run:finished", listener);
          resolve();
        }
      };
      this.scheduler.on("run:finished", listener);
    });
  }

  async stop(): Promise<void> {
    await this.scheduler.stop();
    await rm(this.#dir, { recursive: true, force: true });
  }
}

export function yamlOf(config: ConfigEntry[]): string {
  return YAML.stringify({
    tasks: config.map((entry) => ({
      enabled: true,
      ...(entry.every || entry.at || entry.after ? {} : { cron: "* * * * * *" }),
      ...entry,
    })),
  });
}

export { pollUntil };

/**
 * One database for a test file and the schedulers started on it, stopped and dropped after the
 * file. Call at the top level of the file.
 */
export function harnessSuite() {
  let database: TestDatabase | undefined;
  const started: SchedulerHarness[] = [];
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    for (const harness of started) await harness.stop().catch(() => {});
    await database?.drop();
  });
  const db = (): TestDatabase => {
    if (!database) throw new Error("harnessSuite: the database exists only inside tests");
    return database;
  };
  return {
    db,
    /** Starts a scheduler on the file's database; it is stopped after the file. */
    async start(
      ...args: Parameters<typeof SchedulerHarness.start> extends [unknown, ...infer Rest] ? Rest : never
    ) {
      const harness = await SchedulerHarness.start(db().pool, ...args);
      started.push(harness);
      return harness;
    },
    /** Stops this harness after the file too (for harnesses made with create()). */
    track(harness: SchedulerHarness): SchedulerHarness {
      started.push(harness);
      return harness;
    },
  };
}
