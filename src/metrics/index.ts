export { createMetrics, type Metrics, type MetricsOptions, type MetricsScheduler } from "./createMetrics.js";
