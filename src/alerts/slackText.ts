import type { Alert } from "./alert.js";

/**
 * An alert as the `text` of a Slack-style incoming webhook (Slack, Mattermost, Rocket.Chat and
 * Teams accept `{ "text": "..." }`): a bold first line, the summary, then the details.
 */
export function slackText(alert: Alert): string {
  const title = `*[${alert.severity.toUpperCase()}] cronwarden ${alert.event}*${alert.task ? ` task \`${escapeText(alert.task)}\`` : ""}`;
  const details = Object.entries(alert.details)
    .filter(([, value]) => value !== null)
    .map(([key, value]) => `• ${key}: ${escapeText(String(value))}`);
  return [
    title,
    escapeText(alert.summary),
    ...details,
    `_${escapeText(alert.instanceId)} at ${alert.at.toISOString()}_`,
  ].join("\n");
}

/** Slack's three control characters in message text. */
function escapeText(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}
