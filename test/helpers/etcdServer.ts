/**
 * A throwaway etcd server for tests: Debian's `etcd-server` package (`/usr/bin/etcd`, or
 * `ETCD_BINARY`), one member on free 127.0.0.1 ports, data in a temp dir. It can be stopped and
 * started again on the same data dir, on the same client port or on another one (so a test can
 * change etcd while a client that only knows the first port is cut off).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { pollUntil } from "./poll.js";

export const ETCD_BINARY = process.env.ETCD_BINARY ?? "/usr/bin/etcd";
export const ETCD_INSTALL_HINT =
  "install it with `apt-get update && apt-get install -y etcd-server` (Debian/Ubuntu) or set ETCD_BINARY";

/** Killed if the test process exits without stopping them. */
const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export function etcdAvailable(): boolean {
  try {
    accessSync(ETCD_BINARY, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The lowest port freePort picks. */
const LOWEST_PORT = 10_000;

/**
 * A port nothing listens on, below the kernel's ephemeral range (`ip_local_port_range`, where the
 * source ports of outgoing connections come from, and `listen(0)`'s ports too). A port from that
 * range, free when chosen, can be taken by some connection's source port before the server binds
 * it, or while a server is stopped to be started again on it: an etcd restarted on its peer port in
 * a CI run failed with "bind: address already in use" 20 ms after the old process had exited.
 */
export async function freePort(): Promise<number> {
  const ephemeral = lowestEphemeralPort();
  for (let tries = 0; tries < 100; tries++) {
    const port = LOWEST_PORT + Math.floor(Math.random() * (ephemeral - LOWEST_PORT));
    if (await canListen(port)) return port;
  }
  throw new Error(`no free port found between ${LOWEST_PORT} and ${ephemeral - 1} on 127.0.0.1`);
}

function lowestEphemeralPort(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > LOWEST_PORT + 1_000) return low;
  } catch {
    // not Linux: the IANA range's start, the usual one elsewhere
  }
  return 49_152;
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });
}

export class EtcdServer {
  readonly dataDir: string;
  readonly clientPort: number;
  readonly peerPort: number;
  #child: ChildProcess | undefined;
  #exited: Promise<void> = Promise.resolve();
  readonly #log: string[] = [];

  private constructor(dataDir: string, clientPort: number, peerPort: number) {
    this.dataDir = dataDir;
    this.clientPort = clientPort;
    this.peerPort = peerPort;
  }

  static async start(): Promise<EtcdServer> {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "cronwarden-etcd-"));
    const server = new EtcdServer(dataDir, await freePort(), await freePort());
    await server.start();
    return server;
  }

  /** The client URL on the usual port. */
  get endpoint(): string {
    return `http://127.0.0.1:${this.clientPort}`;
  }

  /** Starts the process on the same data dir and peer port; `clientPort` defaults to the usual one. */
  async start(clientPort = this.clientPort): Promise<string> {
    if (this.#child) throw new Error("etcd is already running");
    const client = `http://127.0.0.1:${clientPort}`;
    const peer = `http://127.0.0.1:${this.peerPort}`;
    const child = spawn(
      ETCD_BINARY,
      [
        "--name=default",
        `--data-dir=${path.join(this.dataDir, "data")}`,
        `--listen-client-urls=${client}`,
        `--advertise-client-urls=${client}`,
        `--listen-peer-urls=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
        `--initial-cluster=default=${peer}`,
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    this.#child = child;
    running.add(child);
    const keep = (chunk: Buffer) => {
      this.#log.push(...chunk.toString("utf8").split("\n").filter(Boolean));
      this.#log.splice(0, Math.max(0, this.#log.length - 200));
    };
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);
    this.#exited = new Promise((resolve) =>
      child.once("exit", () => {
        running.delete(child);
        if (this.#child === child) this.#child = undefined;
        resolve();
      }),
    );
    await pollUntil(
      `etcd to answer on ${client}`,
      async () => {
        if (child.exitCode !== null || child.signalCode !== null) {
          throw new Error(`etcd exited (${child.exitCode ?? child.signalCode}):\n${this.logTail()}`);
        }
        const response = await fetch(`${client}/health`, { signal: AbortSignal.timeout(1_000) });
        return response.ok && ((await response.json()) as { health?: string }).health === "true";
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    ).catch(async (error: Error) => {
      await this.stop();
      throw new Error(`${error.message}\n${this.logTail()}`, { cause: error });
    });
    return client;
  }

  /** SIGTERM, then SIGKILL after 10 s; resolves once the process is gone. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (!child) return;
    child.kill("SIGTERM");
    const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await this.#exited;
    clearTimeout(killer);
  }

  async destroy(): Promise<void> {
    await this.stop();
    await rm(this.dataDir, { recursive: true, force: true });
  }

  logTail(lines = 30): string {
    return this.#log.slice(-lines).join("\n");
  }
}
