import { mkdir, mkdtemp, rename, rm, symlink, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ConfigDocument } from "../../src/index.js";
import { FileConfigSource } from "../../src/index.js";
import { pollUntil } from "../helpers/poll.js";

let dir: string;
let unsubscribe: (() => Promise<void>) | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-file-source-"));
});

afterEach(async () => {
  await unsubscribe?.();
  unsubscribe = undefined;
  await rm(dir, { recursive: true, force: true });
});

function listen(source: FileConfigSource) {
  const documents: ConfigDocument[] = [];
  const errors: Error[] = [];
  unsubscribe = source.subscribe({
    next: (document) => documents.push(document),
    error: (error) => errors.push(error),
  });
  return { documents, errors };
}

const doc = (cron: string) => JSON.stringify({ tasks: [{ name: "a", enabled: true, cron }] });

describe("FileConfigSource", () => {
  it("parses YAML and JSON, with a revision per content", async () => {
    await writeFile(
      path.join(dir, "t.yaml"),
      "tasks:\n  - name: a\n    enabled: true\n    cron: '* * * * *'\n",
    );
    await writeFile(path.join(dir, "t.json"), doc("* * * * *"));
    const yaml = await new FileConfigSource({ path: path.join(dir, "t.yaml") }).load();
    const json = await new FileConfigSource({ path: path.join(dir, "t.json") }).load();
    expect(yaml.content).toEqual(json.content);
    expect(yaml.revision).toMatch(/^[0-9a-f]{16}$/);
    expect(yaml.revision).not.toBe(json.revision);
  });

  it("names the file and the parser's position when the content is malformed", async () => {
    const file = path.join(dir, "bad.yaml");
    await writeFile(file, "tasks:\n  - name: a\n    cron: [unclosed\n");
    await expect(new FileConfigSource({ path: file }).load()).rejects.toThrow(
      new RegExp(`config file ${file} cannot be parsed \\(not valid YAML: .*line \\d+`, "s"),
    );
    await expect(new FileConfigSource({ path: path.join(dir, "missing.json") }).load()).rejects.toThrow(
      /cannot be read \(ENOENT.*create it or point CRONWARDEN_CONFIG_FILE at the right path/,
    );
  });

  it("refuses a file over maxBytes, naming its size and the limit", async () => {
    const file = path.join(dir, "big.json");
    await writeFile(file, doc("* * * * *").padEnd(2048, " "));
    await expect(new FileConfigSource({ path: file, maxBytes: 1024 }).load()).rejects.toThrow(
      `config file ${file} is 2048 bytes, over the limit of 1024 bytes`,
    );
  });

  it("sees a file replaced by rename, and debounces a burst of writes into one reload", async () => {
    const file = path.join(dir, "tasks.json");
    await writeFile(file, doc("1 * * * *"));
    const { documents } = listen(new FileConfigSource({ path: file, debounceMs: 100, pollIntervalMs: 0 }));
    for (const minute of [2, 3, 4, 5]) await writeFile(file, doc(`${minute} * * * *`));
    await pollUntil("one reload", () => documents.length === 1);
    expect(documents[0]?.content).toEqual(JSON.parse(doc("5 * * * *")));
    await writeFile(`${file}.new`, doc("9 * * * *"));
    await rename(`${file}.new`, file);
    await pollUntil("the renamed file", () => documents.length === 2);
    expect(documents[1]?.content).toEqual(JSON.parse(doc("9 * * * *")));
  });

  it("follows a Kubernetes config-map mount: the ..data symlink swapped to a new directory", async () => {
    const mount = path.join(dir, "mount");
    await mkdir(path.join(mount, "..2026_v1"), { recursive: true });
    await writeFile(path.join(mount, "..2026_v1", "tasks.json"), doc("1 * * * *"));
    await symlink("..2026_v1", path.join(mount, "..data"));
    await symlink("..data/tasks.json", path.join(mount, "tasks.json"));
    const source = new FileConfigSource({
      path: path.join(mount, "tasks.json"),
      debounceMs: 50,
      pollIntervalMs: 0,
    });
    expect((await source.load()).content).toEqual(JSON.parse(doc("1 * * * *")));
    const { documents } = listen(source);
    // what the kubelet does: write a new timestamped dir, then atomically swap ..data
    await mkdir(path.join(mount, "..2026_v2"));
    await writeFile(path.join(mount, "..2026_v2", "tasks.json"), doc("2 * * * *"));
    await symlink("..2026_v2", path.join(mount, "..data_tmp"));
    await rename(path.join(mount, "..data_tmp"), path.join(mount, "..data"));
    await pollUntil(
      "the swapped config",
      () => documents.at(-1)?.content !== undefined && documents.length > 0,
    );
    expect(documents.at(-1)?.content).toEqual(JSON.parse(doc("2 * * * *")));
  });

  it("reports a deleted file as an error and picks it up again when it comes back (polling)", async () => {
    const file = path.join(dir, "tasks.json");
    await writeFile(file, doc("1 * * * *"));
    const { documents, errors } = listen(
      new FileConfigSource({ path: file, debounceMs: 20, pollIntervalMs: 100 }),
    );
    await unlink(file);
    await pollUntil("the read error", () => errors.length > 0);
    expect(errors[0]?.message).toMatch(/cannot be read/);
    await writeFile(file, doc("3 * * * *"));
    await pollUntil("the restored file", () =>
      documents.some((d) => JSON.stringify(d.content).includes("3 * * * *")),
    );
  });
});

describe("FileConfigSource and other files in its folder", () => {
  it("a file written beside the config (the service's own log) never triggers a reload", async () => {
    const file = path.join(dir, "tasks.json");
    await writeFile(file, doc("* * * * *"));
    const source = new FileConfigSource({ path: file, debounceMs: 20, pollIntervalMs: 0 });
    const { documents, errors } = listen(source);
    // a watcher of our own on the folder: once it has seen the log writes, the source's has too
    const { watch } = await import("node:fs");
    let logEvents = 0;
    const observer = watch(dir, (_event, name) => {
      if (name === "service.log") logEvents++;
    });
    try {
      for (let line = 0; line < 20; line++)
        await writeFile(path.join(dir, "service.log"), `line ${line}\n`, { flag: "a" });
      await pollUntil("the log writes to be seen", () => logEvents >= 20);
      // the absence of a reload needs a window: 5 debounce periods
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(documents).toHaveLength(0);
      await writeFile(file, doc("*/2 * * * *"));
      await pollUntil("the config change", () => documents.length >= 1);
      expect(errors).toEqual([]);
    } finally {
      observer.close();
    }
  });

  it("refuses a document over maxNodes before parsing it, and takes it with maxNodes raised", async () => {
    const file = path.join(dir, "big.json");
    const tasks = Array.from({ length: 40_000 }, (_, index) => ({
      name: `t${index}`,
      enabled: true,
      cron: "0 9 * * *",
    }));
    await writeFile(file, JSON.stringify({ tasks }));
    const big = { path: file, maxBytes: 16 * 1_048_576 };
    await expect(new FileConfigSource(big).load()).rejects.toThrow(/refused before parsing: it .*120000/);
    const loaded = await new FileConfigSource({ ...big, maxNodes: 500_000 }).load();
    expect((loaded.content as { tasks: unknown[] }).tasks).toHaveLength(40_000);
  });
});
