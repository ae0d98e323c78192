import type { FastifyReply, FastifyRequest } from "fastify";
import type { Logger } from "../core/logger.js";

/** An error answered as `{ error: message }` with its status; nothing else is added. */
export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "HttpError";
  }
}

/**
 * Every error as JSON `{ error }`: ours with their status; fastify's own 4xx (malformed JSON,
 * unsupported media type, body too large) with their message; anything else as a 500 that says
 * nothing about the internals (the log has it).
 */
export function errorHandler(logger: Logger) {
  return (error: unknown, request: FastifyRequest, reply: FastifyReply) => {
    if (error instanceof HttpError) {
      return reply.code(error.statusCode).headers(error.headers).send({ error: error.message });
    }
    const statusCode = statusOf(error);
    if (statusCode !== undefined && statusCode >= 400 && statusCode < 500 && error instanceof Error) {
      return reply.code(statusCode).send({ error: error.message });
    }
    logger.error({ err: error, method: request.method, url: request.url }, "admin API: request failed");
    return reply.code(500).send({ error: "internal error; the service log has the details" });
  };
}

export function notFoundHandler(request: FastifyRequest, reply: FastifyReply) {
  return reply.code(404).send({ error: `no such endpoint: ${request.method} ${request.url.split("?")[0]}` });
}

function statusOf(error: unknown): number | undefined {
  if (typeof error !== "object" || error === null || !("statusCode" in error)) return undefined;
  return typeof error.statusCode === "number" ? error.statusCode : undefined;
}
