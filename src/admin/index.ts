export {
  type AdminServer,
  type AdminServerOptions,
  createAdminServer,
  DEFAULT_ADMIN_PORT,
} from "./adminServer.js";
export { isLoopback, LOOPBACK_CALLER } from "./auth.js";
export type { MetricsSource } from "./probeRoutes.js";
export type { AdminScheduler } from "./schedulerApi.js";
export {
  ADMIN_ROLES,
  type AdminRole,
  type AdminToken,
  LEGACY_TOKEN_NAME,
  loadTokenFile,
  parseTokenList,
} from "./tokens.js";
