import { registerTasks } from "../tasks/index.js";
import { runService } from "./runService.js";

await runService({ registerTasks });
