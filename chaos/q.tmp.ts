import pg from "pg";
import { startEmbeddedPostgres } from "../src/infra/embeddedPostgres/index.js";
import { createLogger } from "../src/scheduler/logger.js";

const server = await startEmbeddedPostgres({
  dataDir: process.argv[2] as string,
  logger: createLogger({ level: "warn" }),
});
const c = new pg.Client(server.connectionString);
await c.connect();
for (const q of process.argv.slice(3)) {
  const r = await c.query(q);
  console.table(r.rows);
}
await c.end();
await server.stop();
