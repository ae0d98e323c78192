// The reference service: the package's service (`cronwarden serve`) with this repository's tasks and config.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { runService } from "../src/index.js";
import { registerTasks } from "../tasks/index.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

await runService({ registerTasks, defaultConfigFile: path.join(root, "config", "tasks.yaml") });
