/**
 * cronwarden's public API. Task modules import from here only; nothing here exposes Agenda.
 */

export {
  type CronRules,
  checkSchedule,
  DEFAULT_MIN_INTERVAL_MS,
  nextRunTimes,
  type ScheduleCheck,
} from "./config/cronValidator.js";
export type { DesiredState, DesiredTask, RejectedEntry } from "./config/desiredState.js";
export { describeRejection, parseDesiredState } from "./config/desiredState.js";
export type { Clock } from "./core/clock.js";
export { CronwardenError, type CronwardenErrorCode } from "./core/errors.js";
export { createLogger, type Logger, type LoggerOptions } from "./core/logger.js";
export type { PreviousRun, RetryPolicy, RunOutcome } from "./core/runTypes.js";
export type { RunRecord, RunTrigger, TaskJob } from "./engine/engineApi.js";
export type { RunLogLine } from "./engine/runJournal.js";
export type { ReconcileResult } from "./reconcile/configReconciler.js";
export type { FieldChange, LiveJob, ReconcileAction, ReconcilePlan } from "./reconcile/reconcilePlan.js";
export { planReconcile } from "./reconcile/reconcilePlan.js";
export {
  type ConfigErrorEvent,
  type ConfigRejectedEvent,
  createScheduler,
  type MissedSlotEvent,
  type RunFinishedEvent,
  type RunNowOptions,
  type RunRetryEvent,
  type RunStartedEvent,
  type RunTroubleEvent,
  Scheduler,
  type SchedulerEvents,
  type SchedulerOptions,
  type SlotsSkippedEvent,
  type StopResult,
  type TaskPausedEvent,
} from "./scheduler/scheduler.js";
export type { SchedulerSettings, SchedulerSettingsInput } from "./scheduler/settings.js";
export { handleShutdownSignals, type ShutdownOptions } from "./scheduler/shutdown.js";
export type { TaskContext, TaskHandler, TaskRegistration } from "./scheduler/taskDefinition.js";
export type { RegisteredTask } from "./scheduler/taskRegistry.js";
export type { ConfigDocument, ConfigListener, ConfigSource } from "./sources/configSource.js";
export { EtcdConfigSource, type EtcdSourceOptions } from "./sources/etcdSource.js";
export { FileConfigSource, type FileSourceOptions } from "./sources/fileSource.js";
export { HttpConfigSource, type HttpSourceOptions } from "./sources/httpSource.js";
export type { DocumentFormat } from "./sources/parseDocument.js";
export type { HistoryPage, HistoryRun, RunDetail } from "./status/runHistory.js";
export type { PauseView, Readiness, ResumeResult, RunNowResult, TaskStatus } from "./status/statusModel.js";
export type {
  BucketMark,
  MarkOutcome,
  RunMark,
  TimelineCursor,
  TimelineMark,
  TimelinePage,
  TimelineQuery,
} from "./status/timeline.js";
export type { HistoryCursor, HistoryQuery } from "./status/timelineSql.js";
export type { AuditRecord } from "./store/auditLog.js";

/** What task modules need of the scheduler: a place to register. */
export interface TaskRegistrar {
  register(task: import("./scheduler/taskDefinition.js").TaskRegistration): void;
}
export {
  ADMIN_ROLES,
  type AdminRole,
  type AdminScheduler,
  type AdminServer,
  type AdminServerOptions,
  type AdminToken,
  createAdminServer,
  DEFAULT_ADMIN_PORT,
  loadTokenFile,
  type MetricsSource,
  parseTokenList,
} from "./admin/index.js";
export {
  type Alert,
  type AlertChannel,
  type AlertDeliveryObserver,
  type AlertEvent,
  Alerter,
  type AlerterOptions,
  type AlertingScheduler,
  type AlertSeverity,
  DEFAULT_SILENCE_MS,
  slackText,
  WebhookAlertChannel,
  type WebhookChannelOptions,
  type WebhookFormat,
} from "./alerts/index.js";
export {
  type EmbeddedPostgres,
  type EmbeddedPostgresOptions,
  startEmbeddedPostgres,
} from "./infra/embeddedPostgres/index.js";
export { createMetrics, type Metrics, type MetricsOptions, type MetricsScheduler } from "./metrics/index.js";
export { runService, type ServiceOptions, waitForDatabase } from "./serve/runService.js";
export {
  LOG_LEVELS,
  loadServiceSettings,
  SERVICE_VARIABLES,
  type ServiceSettings,
  unknownVariables,
} from "./serve/settings.js";
