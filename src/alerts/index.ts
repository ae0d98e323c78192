export type { Alert, AlertChannel, AlertDeliveryObserver, AlertEvent, AlertSeverity } from "./alert.js";
export { Alerter, type AlerterOptions, type AlertingScheduler, DEFAULT_SILENCE_MS } from "./alerter.js";
export { slackText } from "./slackText.js";
export { WebhookAlertChannel, type WebhookChannelOptions, type WebhookFormat } from "./webhookChannel.js";
