import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { type Logger, toError } from "../core/logger.js";
import { redactSecrets } from "../observability/redact.js";

/** What the metrics listener serves: `createMetrics()`'s result fits. */
export interface MetricsText {
  readonly contentType: string;
  render(): Promise<string>;
}

export interface MetricsServerOptions {
  metrics: MetricsText;
  /** Default 127.0.0.1; a pod needs 0.0.0.0 so that Prometheus reaches it. */
  host?: string;
  /** 0 picks a free port (see listen()'s url). */
  port: number;
  logger: Logger;
}

export interface MetricsServer {
  listen(): Promise<{ url: string }>;
  close(): Promise<void>;
}

/** The one path the listener answers. */
export const METRICS_PATH = "/metrics";

/**
 * A read-only metrics listener on its own port (CRONWARDEN_METRICS_PORT): `GET /metrics` and
 * nothing else, without a token, so that Prometheus scrapes it without being handed an admin
 * token. It shares no route, hook or token with the admin API: it cannot run, pause or read
 * anything /metrics does not show (task names, counts, timings, versions). Every other path is
 * 404, every other method 405; the Authorization header is never read. Its text passes through
 * the same secret redaction as every response of the admin API.
 */
export function createMetricsServer(options: MetricsServerOptions): MetricsServer {
  const host = options.host ?? "127.0.0.1";
  const logger = options.logger.child({ component: "metrics-listener" });
  let server: Server | undefined;

  const answer = (response: ServerResponse, status: number, body: string, headers = {}) => {
    response.writeHead(status, {
      "content-type": "text/plain; charset=utf-8",
      "cache-control": "no-store",
      ...headers,
    });
    response.end(body);
  };

  const handle = async (request: IncomingMessage, response: ServerResponse) => {
    const pathname = (request.url ?? "/").split("?")[0];
    if (pathname !== METRICS_PATH)
      return answer(response, 404, `not found: this listener serves ${METRICS_PATH} only\n`);
    if (request.method !== "GET" && request.method !== "HEAD")
      return answer(response, 405, `${request.method} is not allowed: ${METRICS_PATH} is read-only\n`, {
        allow: "GET, HEAD",
      });
    let text: string;
    try {
      text = redactSecrets(await options.metrics.render());
    } catch (error) {
      logger.error({ err: error }, `metrics could not be rendered: ${toError(error).message}`);
      return answer(response, 500, "metrics could not be rendered\n");
    }
    response.writeHead(200, {
      "content-type": options.metrics.contentType,
      "cache-control": "no-store",
      "content-length": Buffer.byteLength(text),
    });
    response.end(request.method === "HEAD" ? undefined : text);
  };

  return {
    async listen() {
      if (!server) {
        server = createServer((request, response) => {
          // a request body is never read: the request ends when the answer is sent
          void handle(request, response).catch((error: unknown) => {
            logger.error({ err: error }, "metrics listener failed to answer");
            if (!response.headersSent) answer(response, 500, "internal error\n");
            else response.destroy();
          });
        });
        // a slow or stuck client cannot hold a socket for long (Prometheus answers in milliseconds)
        server.headersTimeout = 10_000;
        server.requestTimeout = 30_000;
        server.keepAliveTimeout = 65_000;
      }
      const listening = server;
      await new Promise<void>((resolve, reject) => {
        const onError = (error: Error) => reject(error);
        listening.once("error", onError);
        listening.listen({ host, port: options.port }, () => {
          listening.off("error", onError);
          resolve();
        });
      });
      const address = listening.address() as AddressInfo;
      const url = `${urlOf(address)}${METRICS_PATH}`;
      logger.info({ url }, `metrics listening on ${url} (read-only, no token)`);
      return { url };
    },
    async close() {
      const closing = server;
      server = undefined;
      if (!closing?.listening) return;
      await new Promise<void>((resolve) => {
        closing.close(() => resolve());
        // Prometheus keeps its connection open between scrapes: end idle ones now
        closing.closeIdleConnections();
      });
    },
  };
}

function urlOf(address: AddressInfo): string {
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}
