export {
  type AdminServer,
  type AdminServerOptions,
  createAdminServer,
  DEFAULT_ADMIN_PORT,
} from "./adminServer.js";
export { isLoopback } from "./auth.js";
export type { MetricsSource } from "./probeRoutes.js";
export type { AdminScheduler } from "./schedulerApi.js";
