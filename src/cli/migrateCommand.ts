import { CronwardenError } from "../core/errors.js";
import { inspectSchema, MIGRATE_COMMAND, migrateSchema, SCHEMA_VERSION } from "../engine/schema.js";
import { requireSessionPooling } from "../engine/sessionPooling.js";
import { CliError, type CliIo, databasePool } from "./common.js";

/**
 * `cronwarden migrate [--check] [--database-url URL]`: creates or upgrades the schema (Agenda's
 * tables and cronwarden's own) and exits 0. With --check it changes nothing: exit 0 when the
 * schema is current, 1 when `cronwarden migrate` is needed. 2: no database, or not allowed.
 */
export async function migrateCommand(
  options: { check?: boolean | undefined; "database-url"?: string | undefined; json?: boolean | undefined },
  io: CliIo,
): Promise<number> {
  const pool = await databasePool(options, io);
  try {
    if (options.check) {
      const state = await inspectSchema(pool);
      if (options.json) {
        io.out(
          JSON.stringify(
            {
              current: state.current,
              version: state.version ?? null,
              needed: SCHEMA_VERSION,
              missingTables: state.missingTables,
              ...(state.current ? {} : { fix: MIGRATE_COMMAND }),
            },
            null,
            2,
          ),
        );
        return state.current ? 0 : 1;
      }
      if (state.current) {
        io.out(`schema is current (version ${state.version})`);
        return 0;
      }
      io.out(
        `schema is not current: ${
          state.missingTables.length > 0
            ? `missing ${state.missingTables.join(", ")}`
            : `version ${state.version ?? "(none)"}, needed ${SCHEMA_VERSION}`
        }; run \`${MIGRATE_COMMAND}\``,
      );
      return 1;
    }
    // the schema lock is a session lock: a transaction-mode pooler would not keep it
    await requireSessionPooling(pool);
    const result = await migrateSchema(pool);
    if (options.json) {
      io.out(
        JSON.stringify(
          { from: result.from ?? null, to: result.to, changed: result.from !== result.to },
          null,
          2,
        ),
      );
      return 0;
    }
    io.out(
      result.from === result.to
        ? `schema already current (version ${result.to}); nothing changed`
        : `schema migrated from version ${result.from ?? "(none)"} to ${result.to}`,
    );
    return 0;
  } catch (error) {
    if (error instanceof CronwardenError) throw new CliError(error.message);
    throw new CliError(`${MIGRATE_COMMAND} failed: ${(error as Error).message}`);
  } finally {
    await pool.end();
  }
}
