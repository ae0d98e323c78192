/**
 * cronwarden's public API: what a user needs to build, run and watch a scheduler, write tasks and
 * config sources, and serve the admin API, metrics and alerts. Every name here is described, by
 * group, in docs/api.md (test/unit/publicApi.test.ts checks both ways); everything else in src/
 * is internal, and tests, bench and chaos import it by its file path. Nothing here exposes Agenda.
 */

export { type AdminServer, type AdminServerOptions, createAdminServer } from "./admin/index.js";
export {
  type Alert,
  type AlertChannel,
  Alerter,
  type AlerterOptions,
  WebhookAlertChannel,
  type WebhookChannelOptions,
} from "./alerts/index.js";
export type { DesiredState } from "./config/desiredState.js";
export type { Clock, ClockTimer } from "./core/clock.js";
export { CronwardenError, type CronwardenErrorCode } from "./core/errors.js";
export { createLogger, type Logger, type LoggerOptions } from "./core/logger.js";
export type { ChainSlot, DependencyDecisionEvent, RunRecord, TaskJob } from "./engine/engineApi.js";
export { createMetrics, type Metrics, type MetricsOptions } from "./metrics/index.js";
export type { ReconcileResult } from "./reconcile/configReconciler.js";
export type {
  ConfigErrorEvent,
  ConfigRejectedEvent,
  MissedSlotEvent,
  RunFinishedEvent,
  RunRetryEvent,
  RunStartedEvent,
  RunTroubleEvent,
  SchedulerEvents,
  ShardedSlotFinishedEvent,
  ShardFinishedEvent,
  SlotsSkippedEvent,
  TaskPausedEvent,
} from "./scheduler/events.js";
export {
  createScheduler,
  type RunNowOptions,
  Scheduler,
  type SchedulerOptions,
  type StopResult,
} from "./scheduler/scheduler.js";
export { handleShutdownSignals, type ShutdownOptions } from "./scheduler/shutdown.js";
export type {
  TaskContext,
  TaskHandler,
  TaskRegistrar,
  TaskRegistration,
} from "./scheduler/taskDefinition.js";
export type { RegisteredTask } from "./scheduler/taskRegistry.js";
export { runService, type ServiceOptions } from "./serve/runService.js";
export type { ShardResult } from "./sharding/slotCoordinator.js";
export type { ConfigDocument, ConfigListener, ConfigSource } from "./sources/configSource.js";
export { EtcdConfigSource, type EtcdSourceOptions } from "./sources/etcdSource.js";
export { FileConfigSource, type FileSourceOptions } from "./sources/fileSource.js";
export { HttpConfigSource, type HttpSourceOptions } from "./sources/httpSource.js";
export type { HistoryPage, RunDetail } from "./status/runHistory.js";
export type { Readiness, ResumeResult, RunNowResult, TaskStatus } from "./status/statusModel.js";
export type { TimelinePage, TimelineQuery } from "./status/timeline.js";
export type { HistoryQuery } from "./status/timelineSql.js";
export type { AuditRecord } from "./store/auditLog.js";
