export { createMetrics, type Metrics, type MetricsOptions, type MetricsScheduler } from "./createMetrics.js";
export {
  createMetricsServer,
  METRICS_PATH,
  type MetricsServer,
  type MetricsServerOptions,
  type MetricsText,
} from "./metricsServer.js";
