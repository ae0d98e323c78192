/**
 * TCP ports on 127.0.0.1: which one to start on (the requested one, else the one used last time if free, else
 * one the OS picks; never 5432), and the error for a busy one.
 */
import net from "node:net";
import type { CronwardenError } from "../../core/errors.js";
import { toError } from "../../core/logger.js";
import { embeddedPostgresError, failure } from "./errors.js";
import type { ClusterFiles } from "./files.js";

export async function choosePort(
  explicitPort: number | undefined,
  rememberedPort: number | undefined,
  tried: Set<number>,
  files: ClusterFiles,
): Promise<number> {
  if (explicitPort !== undefined) {
    if (!(await isPortFree(explicitPort))) throw portInUse(explicitPort, files);
    return explicitPort;
  }
  if (
    rememberedPort !== undefined &&
    rememberedPort !== 5432 &&
    !tried.has(rememberedPort) &&
    (await isPortFree(rememberedPort))
  ) {
    return rememberedPort;
  }
  for (let i = 0; i < 50; i++) {
    const port = await freePort();
    if (port !== 5432 && !tried.has(port)) return port;
  }
  throw embeddedPostgresError("embedded PostgreSQL: could not find a free TCP port on 127.0.0.1");
}

export function portInUse(port: number, files?: ClusterFiles): CronwardenError {
  return failure(`embedded PostgreSQL cannot start: port ${port} on 127.0.0.1 is already in use.`, {
    ...(files ? { files } : {}),
    hint: `stop what listens on port ${port} (\`ss -ltnp 'sport = :${port}'\`), choose another port, or leave the port unset so a free one is picked.`,
  });
}

export function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once("error", (error) => reject(toError(error, "could not listen on 127.0.0.1:0")));
    server.listen({ port: 0, host: "127.0.0.1", exclusive: true }, () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() =>
        port > 0 ? resolve(port) : reject(new Error("could not read the port chosen by the OS")),
      );
    });
  });
}
