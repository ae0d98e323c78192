import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrateSchema } from "../../src/engine/schema.js";
import { DesiredStateStore } from "../../src/store/desiredStateStore.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  await migrateSchema(db.pool);
});

afterAll(async () => {
  await db?.drop();
});

describe("DesiredStateStore", () => {
  it("keeps the last applied document; the same revision of the same source is not written again", async () => {
    const store = new DesiredStateStore(db.pool, "default");
    const document = { tasks: [{ name: "a", enabled: true, cron: "0 9 * * *" }] };
    await store.save({ document, source: "file a.json", revision: "r1", appliedBy: "one" });
    const first = await store.load();
    // another instance applying the same change
    await store.save({ document, source: "file a.json", revision: "r1", appliedBy: "two" });
    expect(await store.load()).toEqual(first);
    expect(first).toMatchObject({ document, revision: "r1", appliedBy: "one" });
    // a new revision, or the same revision from another source, is written
    const edited = { tasks: [{ name: "a", enabled: false, cron: "0 9 * * *" }] };
    await store.save({ document: edited, source: "file a.json", revision: "r2", appliedBy: "two" });
    expect(await store.load()).toMatchObject({ document: edited, revision: "r2", appliedBy: "two" });
    await store.save({ document, source: "etcd /cron", revision: "r2", appliedBy: "three" });
    expect(await store.load()).toMatchObject({ document, source: "etcd /cron", appliedBy: "three" });
  });

  it("keeps the shared converged record beside the snapshot, only once a snapshot is stored", async () => {
    const store = new DesiredStateStore(db.pool, "converged");
    const record = { revision: "r1", key: "3:abc", digest: "3:def" };
    await store.saveConverged(record);
    expect(await store.loadConverged()).toBeUndefined();
    const document = { tasks: [] };
    await store.save({ document, source: "file a.json", revision: "r1", appliedBy: "one" });
    expect(await store.loadConverged()).toBeUndefined();
    await store.saveConverged(record);
    expect(await store.loadConverged()).toEqual(record);
    // the snapshot is untouched, and another namespace has no record
    expect(await store.load()).toMatchObject({ document, revision: "r1", appliedBy: "one" });
    expect(await new DesiredStateStore(db.pool, "default").loadConverged()).toBeUndefined();
  });
});
