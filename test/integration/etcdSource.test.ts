import { randomUUID } from "node:crypto";
import { Etcd3 } from "etcd3";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigDocument } from "../../src/sources/configSource.js";
import { EtcdConfigSource, type EtcdSourceOptions } from "../../src/sources/etcdSource.js";
import {
  ETCD_BINARY,
  ETCD_INSTALL_HINT,
  EtcdServer,
  etcdAvailable,
  freePort,
} from "../helpers/etcdServer.js";
import { pollUntil } from "../helpers/poll.js";

const available = etcdAvailable();
const required = process.env.CRONWARDEN_REQUIRE_ETCD === "1";
if (!available && !required) {
  console.warn(`etcd source tests skipped: ${ETCD_BINARY} is missing; ${ETCD_INSTALL_HINT}`);
}

it.runIf(!available && required)("has an etcd server to test against (CRONWARDEN_REQUIRE_ETCD=1)", () => {
  expect.fail(`${ETCD_BINARY} is missing and CRONWARDEN_REQUIRE_ETCD=1; ${ETCD_INSTALL_HINT}`);
});

const entry = (cron: string) => ({ enabled: true, cron });
const whole = (cron: string) => ({ tasks: [{ name: "a", ...entry(cron) }] });
const yaml = (cron: string) => `tasks:\n  - name: a\n    enabled: true\n    cron: "${cron}"\n`;

describe.skipIf(!available)(
  `EtcdConfigSource${available ? "" : ` (skipped: ${ETCD_BINARY} is missing)`}`,
  () => {
    let server: EtcdServer;
    let admin: Etcd3;
    let stops: Array<() => Promise<void>> = [];

    beforeAll(async () => {
      server = await EtcdServer.start();
      admin = new Etcd3({ hosts: server.endpoint });
    });
    afterAll(async () => {
      admin?.close();
      await server?.destroy();
    });
    afterEach(async () => {
      await Promise.all(stops.map((stop) => stop()));
      stops = [];
    });

    /** A key or prefix of its own for each test. */
    const scope = () => `/cronwarden-test/${randomUUID()}/`;
    const source = (options: Partial<EtcdSourceOptions>) =>
      new EtcdConfigSource({ endpoints: [server.endpoint], ...options } as EtcdSourceOptions);
    const put = async (key: string, value: unknown) =>
      BigInt(
        (
          await admin
            .put(key)
            .value(typeof value === "string" ? value : JSON.stringify(value))
            .exec()
        ).header.revision,
      );

    function listen(etcd: EtcdConfigSource) {
      const documents: ConfigDocument[] = [];
      const errors: Error[] = [];
      const stop = etcd.subscribe({
        next: (document) => documents.push(document),
        error: (error) => errors.push(error),
      });
      stops.push(stop);
      return { documents, errors, stop };
    }

    it("reads one key holding the whole document, as JSON or as YAML; the revision is its mod revision", async () => {
      const key = `${scope()}tasks`;
      const revision = await put(key, whole("1 * * * *"));
      const etcd = source({ key });
      expect(etcd.description).toBe(`etcd ${server.endpoint} key ${key}`);
      expect(await etcd.load()).toEqual({ content: whole("1 * * * *"), revision: revision.toString() });
      await put(`${scope()}unrelated`, "x");
      expect((await etcd.load()).revision).toBe(revision.toString());

      await put(key, yaml("2 * * * *"));
      expect((await etcd.load()).content).toEqual(whole("2 * * * *"));

      await put(key, "tasks: [unclosed\n");
      await expect(etcd.load()).rejects.toThrow(
        new RegExp(
          `^config etcd ${server.endpoint} key ${key}: value of key ${key} cannot be parsed \\(not valid YAML: .*line \\d+`,
          "s",
        ),
      );
      await put(key, "  \n");
      await expect(etcd.load()).rejects.toThrow(`key ${key} is empty; expected JSON or YAML`);
      await expect(source({ key: `${key}-missing` }).load()).rejects.toThrow(
        `config etcd ${server.endpoint} key ${key}-missing: key ${key}-missing does not exist (at revision `,
      );
    });

    it("assembles one key per task under a prefix, in key order, and follows puts and deletes", async () => {
      const prefix = scope();
      await put(`${prefix}b`, "enabled: false\ncron: '2 * * * *'\n");
      await put(`${prefix}a`, { name: "a", ...entry("1 * * * *") });
      const etcd = source({ prefix });
      const loaded = await etcd.load();
      expect(loaded.content).toEqual({
        tasks: [
          { name: "a", ...entry("1 * * * *") },
          { name: "b", enabled: false, cron: "2 * * * *" },
        ],
      });

      const { documents, errors } = listen(etcd);
      const added = await put(`${prefix}c`, entry("3 * * * *"));
      await pollUntil("the added task", () => documents.length === 1);
      expect(documents[0]).toEqual({
        content: {
          tasks: [
            { name: "a", ...entry("1 * * * *") },
            { name: "b", enabled: false, cron: "2 * * * *" },
            { name: "c", ...entry("3 * * * *") },
          ],
        },
        revision: added.toString(),
      });
      const deleted = BigInt((await admin.delete().key(`${prefix}a`).exec()).header.revision);
      await pollUntil("the deletion", () => documents.length === 2);
      expect(documents[1]?.content).toEqual({
        tasks: [
          { name: "b", enabled: false, cron: "2 * * * *" },
          { name: "c", ...entry("3 * * * *") },
        ],
      });
      expect(documents[1]?.revision).toBe(deleted.toString());

      await put(`${prefix}d`, { name: "other", ...entry("4 * * * *") });
      await pollUntil("the refused name", () => errors.length === 1);
      expect(errors[0]?.message).toBe(
        `config etcd ${server.endpoint} prefix ${prefix}: value of key ${prefix}d names task "other" but the key names "d"; drop name or make them agree`,
      );
      await put(`${prefix}d`, "[1, 2]");
      await pollUntil("the refused list", () => errors.length === 2);
      expect(errors[1]?.message).toContain(`value of key ${prefix}d is not a mapping`);
      await put(`${prefix}d`, entry("4 * * * *"));
      await pollUntil("the repaired key", () => documents.length === 3);
      expect((documents[2]?.content as { tasks: unknown[] } | undefined)?.tasks).toHaveLength(3);

      await admin.delete().prefix(prefix).exec();
      await pollUntil("the refused empty prefix", () => errors.length === 3);
      expect(errors[2]?.message).toContain(`no keys under prefix ${prefix}`);
      await expect(etcd.load()).rejects.toThrow(`no keys under prefix ${prefix} (at revision `);
    });

    it("delivers a change to the watched key, only changes after load(), and stops on unsubscribe", async () => {
      const key = `${scope()}tasks`;
      await put(key, whole("1 * * * *"));
      const etcd = source({ key });
      await etcd.load();
      const { documents, errors, stop } = listen(etcd);
      const changed = await put(key, whole("2 * * * *"));
      await pollUntil("the change", () => documents.length === 1);
      expect(documents).toEqual([{ content: whole("2 * * * *"), revision: changed.toString() }]);

      // a subscription without a load() first delivers the current document
      const fresh = listen(source({ key }));
      await pollUntil("the current document", () => fresh.documents.length === 1);
      expect(fresh.documents[0]?.content).toEqual(whole("2 * * * *"));

      await stop();
      await stop();
      await put(key, whole("3 * * * *"));
      await pollUntil("the other subscription to see it", () => fresh.documents.length === 2);
      expect(documents).toHaveLength(1);
      expect(errors).toEqual([]);
      expect(fresh.errors).toEqual([]);
    });

    it("refuses values over maxBytes, at load and while watching", async () => {
      const key = `${scope()}tasks`;
      await put(key, { ...whole("1 * * * *"), padding: "x".repeat(300) });
      const etcd = source({ key, maxBytes: 200 });
      await expect(etcd.load()).rejects.toThrow(
        new RegExp(
          `^config etcd \\S+ key ${key}: value of key ${key} is \\d+ bytes, over the limit of 200 \\(maxBytes\\)$`,
        ),
      );
      await expect(etcd.load()).rejects.toMatchObject({ code: "CONFIG_UNREADABLE" });
      const { documents, errors } = listen(etcd);
      await put(key, { ...whole("1 * * * *"), padding: "y".repeat(300) });
      await pollUntil("the oversized value reported", () => errors.length === 1);
      expect(errors[0]?.message).toMatch(
        /value of key \S+ is \d+ bytes, over the limit of 200 \(maxBytes\)$/,
      );
      await put(key, whole("2 * * * *"));
      await pollUntil("the value that fits", () => documents.length === 1);
      expect(documents[0]?.content).toEqual(whole("2 * * * *"));
    });

    it("fills {namespace} in the key or prefix", async () => {
      const base = scope();
      await put(`${base}staging/tasks`, whole("5 * * * *"));
      const etcd = source({ key: `${base}{namespace}/tasks`, namespace: "staging" });
      expect(etcd.description).toBe(`etcd ${server.endpoint} key ${base}staging/tasks`);
      expect((await etcd.load()).content).toEqual(whole("5 * * * *"));
      expect(source({ prefix: `${base}{namespace}/tasks/`, namespace: "prod" }).description).toBe(
        `etcd ${server.endpoint} prefix ${base}prod/tasks/`,
      );
      expect(() => source({ prefix: `${base}{namespace}/` })).toThrow(
        "prefix contains {namespace} but no namespace",
      );
      expect(() => source({ key: "k", prefix: "p" })).toThrow("exactly one of key and prefix");
      expect(() => source({})).toThrow("exactly one of key and prefix");
      expect(() => new EtcdConfigSource({ endpoints: ["127.0.0.1:2379"], key: "k" })).toThrow(
        "must look like http://host:2379",
      );
    });

    it("names the endpoints and the key when etcd cannot be reached", async () => {
      const port = await freePort();
      const etcd = new EtcdConfigSource({ endpoints: [`http://127.0.0.1:${port}`], key: "/cw/tasks" });
      const started = performance.now();
      const error = (await etcd.load().catch((thrown: Error) => thrown)) as Error;
      expect(performance.now() - started).toBeLessThan(10_000);
      expect(error).toMatchObject({ code: "CONFIG_UNREADABLE" });
      expect(error.message).toMatch(
        new RegExp(
          `^config etcd http://127.0.0.1:${port} key /cw/tasks: cannot be read \\(.*ECONNREFUSED.*\\); check that etcd is running and reachable at http://127.0.0.1:${port}$`,
        ),
      );
    });

    it("resumes the watch after etcd restarts: changes made while cut off are replayed, later ones delivered", async () => {
      const key = `${scope()}tasks`;
      await put(key, whole("1 * * * *"));
      const etcd = source({ key });
      await etcd.load();
      const { documents, errors } = listen(etcd);
      await put(key, whole("2 * * * *"));
      await pollUntil("the first change", () => documents.length === 1);

      await server.stop();
      await pollUntil("the lost connection reported", () => errors.length >= 1);
      expect(errors[0]?.message).toMatch(
        new RegExp(
          `^config etcd ${server.endpoint} key ${key}: watch lost its connection \\(.*\\); resuming from revision \\d+ in `,
        ),
      );
      // etcd comes back where this source cannot see it, takes a change, and goes away again
      const aside = await server.start(await freePort());
      const asideClient = new Etcd3({ hosts: aside });
      const whileCutOff = BigInt(
        (
          await asideClient
            .put(key)
            .value(JSON.stringify(whole("3 * * * *")))
            .exec()
        ).header.revision,
      );
      asideClient.close();
      await server.stop();

      await server.start();
      await pollUntil("the change made while cut off", () => documents.length === 2, { timeoutMs: 30_000 });
      expect(documents[1]).toEqual({ content: whole("3 * * * *"), revision: whileCutOff.toString() });
      const after = await put(key, whole("4 * * * *"));
      await pollUntil("the change after the restart", () => documents.length === 3);
      expect(documents[2]).toEqual({ content: whole("4 * * * *"), revision: after.toString() });
      // resumed, not reloaded: every report is a lost connection
      for (const error of errors) expect(error.message).toContain(": watch lost its connection (");
    });

    it("reloads the full state when the revision to resume from was compacted, and watches on", async () => {
      const prefix = scope();
      await put(`${prefix}a`, entry("1 * * * *"));
      const etcd = source({ prefix });
      await etcd.load();
      const { documents, errors } = listen(etcd);
      await put(`${prefix}b`, entry("2 * * * *"));
      await pollUntil("the first change", () => documents.length === 1);

      await server.stop();
      await pollUntil("the lost connection reported", () => errors.length >= 1);
      const aside = await server.start(await freePort());
      const asideClient = new Etcd3({ hosts: aside });
      await asideClient.delete().key(`${prefix}a`).exec();
      const last = await asideClient
        .put(`${prefix}c`)
        .value(JSON.stringify(entry("3 * * * *")))
        .exec();
      await asideClient.kv.compact({ revision: last.header.revision, physical: true });
      asideClient.close();
      await server.stop();
      await server.start();

      await pollUntil("the reloaded state", () => documents.length === 2, { timeoutMs: 30_000 });
      expect(documents[1]?.content).toEqual({
        tasks: [
          { name: "b", ...entry("2 * * * *") },
          { name: "c", ...entry("3 * * * *") },
        ],
      });
      const compaction = errors.find((error) => error.message.includes("compacted"));
      expect(compaction?.message).toMatch(
        new RegExp(
          `^config etcd ${server.endpoint} prefix ${prefix}: etcd compacted its history past revision \\d+, where the watch was to resume; changes in between are lost, so the full state is read again now$`,
        ),
      );
      await put(`${prefix}d`, entry("4 * * * *"));
      await pollUntil("a change after the reload", () => documents.length === 3);
      expect((documents[2]?.content as { tasks: unknown[] } | undefined)?.tasks).toHaveLength(3);
    });
  },
);
