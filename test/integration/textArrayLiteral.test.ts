import { afterAll, beforeAll, expect, it } from "vitest";
import { textArrayLiteral } from "../../src/engine/sql.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";

/** The missed-slot check passes its task names as one array literal made once (src/engine/missedSlotDetector.ts). */

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

it("an array literal of names reads back in PostgreSQL as the same names, whatever characters they hold", async () => {
  const names = ["plain", "a.b_c-d:e", 'quote"d', "back\\slash", "comma,brace{}", "sp ace", "NULL", ""];
  const result = await db.pool.query<{ names: string[] }>("SELECT $1::text[] AS names", [
    textArrayLiteral(names),
  ]);
  expect(result.rows[0]?.names).toEqual(names);
  const empty = await db.pool.query<{ names: string[] }>("SELECT $1::text[] AS names", [
    textArrayLiteral([]),
  ]);
  expect(empty.rows[0]?.names).toEqual([]);
});
