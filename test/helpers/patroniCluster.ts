/**
 * A throwaway Patroni cluster for tests: two PostgreSQL 15 nodes (`PG15_BIN`, default
 * /usr/lib/postgresql/15/bin) run by Debian's `patroni`, with the etcd of ./etcdServer.ts as its DCS
 * and Debian's `haproxy` in front, routing to whichever node answers 200 on Patroni's REST
 * `GET /primary` (the usual production layout). Everything on free 127.0.0.1 ports, data under one
 * temp dir in /tmp. PostgreSQL refuses to run as root: as root, Patroni (and so PostgreSQL) runs as
 * the `postgres` system user, as .ci/run runs PostgreSQL 15.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import {
  accessSync,
  chmodSync,
  chownSync,
  constants,
  mkdirSync,
  openSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { EtcdServer, etcdAvailable, freePort } from "./etcdServer.js";
import { pollUntil } from "./poll.js";

const PATRONI = process.env.PATRONI_BINARY ?? "/usr/bin/patroni";
const PATRONICTL = process.env.PATRONICTL_BINARY ?? "/usr/bin/patronictl";
const HAPROXY = process.env.HAPROXY_BINARY ?? "/usr/sbin/haproxy";
const PG15_BIN = process.env.PG15_BIN ?? "/usr/lib/postgresql/15/bin";

export const PATRONI_INSTALL_HINT =
  "install them with `apt-get update && apt-get install -y --no-install-recommends patroni haproxy etcd-server postgresql-15` (Debian/Ubuntu)";

/** What is missing to run a Patroni cluster here (empty: it can run). */
export function patroniMissing(): string[] {
  const missing: string[] = [];
  for (const file of [PATRONI, PATRONICTL, HAPROXY, path.join(PG15_BIN, "postgres")]) {
    try {
      accessSync(file, constants.X_OK);
    } catch {
      missing.push(file);
    }
  }
  if (!etcdAvailable()) missing.push("etcd");
  if (process.getuid?.() === 0 && postgresUser() === undefined)
    missing.push("a `postgres` user (running as root)");
  return missing;
}

function postgresUser(): { uid: number; gid: number } | undefined {
  try {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
    return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : undefined;
  } catch {
    return undefined;
  }
}

/** Killed if the test process exits without stopping them (a SIGKILLed Patroni leaves its PostgreSQL running). */
const running = new Set<{ child: ChildProcess; dataDir: string }>();
process.on("exit", () => {
  for (const { child, dataDir } of running) {
    child.kill("SIGKILL");
    const pid = postmasterPidOf(dataDir);
    if (pid !== undefined) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone already
      }
    }
  }
});

function postmasterPidOf(dataDir: string): number | undefined {
  try {
    const pid = Number.parseInt(
      readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0] ?? "",
      10,
    );
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

export interface PatroniNode {
  name: string;
  pgPort: number;
  restPort: number;
  dataDir: string;
  configFile: string;
  logFile: string;
  child: ChildProcess;
}

export interface PatroniClusterOptions {
  /** Patroni's `synchronous_mode`: a commit waits for the replica while one is streaming. */
  synchronousMode?: boolean;
}

/** Patroni's timings, lowered from its defaults (ttl 30 s, loop_wait 10 s) so a failover takes seconds in a test. */
const DCS = { ttl: 10, loop_wait: 1, retry_timeout: 4 };

export class PatroniCluster {
  readonly dir: string;
  readonly etcd: EtcdServer;
  readonly nodes: PatroniNode[];
  readonly haproxyPort: number;
  readonly #password: string;
  readonly #owner: { uid: number; gid: number } | undefined;
  readonly #synchronous: boolean;
  #haproxy: ChildProcess | undefined;

  private constructor(
    dir: string,
    etcd: EtcdServer,
    nodes: PatroniNode[],
    haproxyPort: number,
    password: string,
    owner: { uid: number; gid: number } | undefined,
    synchronous: boolean,
  ) {
    this.#synchronous = synchronous;
    this.dir = dir;
    this.etcd = etcd;
    this.nodes = nodes;
    this.haproxyPort = haproxyPort;
    this.#password = password;
    this.#owner = owner;
  }

  /** Starts etcd, two nodes (the first bootstraps, the second clones it), and HAProxy; resolves once a replica streams. */
  static async start(options: PatroniClusterOptions = {}): Promise<PatroniCluster> {
    const owner = process.getuid?.() === 0 ? postgresUser() : undefined;
    // under /tmp, not $TMPDIR: the postgres user must be able to traverse to it
    const dir = await mkdtemp("/tmp/cronwarden-patroni-");
    chmodSync(dir, 0o700);
    if (owner) chownSync(dir, owner.uid, owner.gid);
    const etcd = await EtcdServer.start();
    const password = `pw${Math.random().toString(36).slice(2)}`;
    const scope = `cw${Math.random().toString(36).slice(2, 10)}`;
    const nodes: PatroniNode[] = [];
    const cluster = new PatroniCluster(
      dir,
      etcd,
      nodes,
      await freePort(),
      password,
      owner,
      options.synchronousMode === true,
    );
    try {
      for (const name of ["node1", "node2"]) {
        const node = await cluster.#writeNode(name, scope, options);
        nodes.push(node);
        // the second node clones the first once it leads: start it then, not in a race for the bootstrap
        if (name === "node1") await cluster.waitForLeader("node1", 90_000);
      }
      await cluster.waitForReplica("node2", 90_000);
      await cluster.#startHaproxy();
      return cluster;
    } catch (error) {
      const logs = cluster.logTail();
      await cluster.stop();
      throw new Error(`the Patroni cluster did not come up: ${(error as Error).message}\n${logs}`, {
        cause: error,
      });
    }
  }

  /** The connection string through HAProxy: always the current primary. */
  get url(): string {
    return `postgresql://postgres:${this.#password}@127.0.0.1:${this.haproxyPort}/postgres`;
  }

  /** A direct connection string to one node (bypassing HAProxy). */
  nodeUrl(name: string): string {
    return `postgresql://postgres:${this.#password}@127.0.0.1:${this.node(name).pgPort}/postgres`;
  }

  node(name: string): PatroniNode {
    const node = this.nodes.find((candidate) => candidate.name === name);
    if (!node) throw new Error(`no Patroni node ${name}`);
    return node;
  }

  async #writeNode(name: string, scope: string, options: PatroniClusterOptions): Promise<PatroniNode> {
    const pgPort = await freePort();
    const restPort = await freePort();
    const dataDir = path.join(this.dir, name, "data");
    const configFile = path.join(this.dir, `${name}.yml`);
    const logFile = path.join(this.dir, `${name}.log`);
    const config = {
      scope,
      namespace: "/cronwarden-test/",
      name,
      log: { level: "INFO" },
      restapi: { listen: `127.0.0.1:${restPort}`, connect_address: `127.0.0.1:${restPort}` },
      etcd3: { hosts: [`127.0.0.1:${this.etcd.clientPort}`] },
      bootstrap: {
        dcs: {
          ...DCS,
          // a primary whose postmaster died is failed over at once, not restarted in place for 300 s
          primary_start_timeout: 0,
          maximum_lag_on_failover: 16 * 1024 * 1024,
          synchronous_mode: options.synchronousMode === true,
          postgresql: {
            use_pg_rewind: true,
            parameters: {
              wal_log_hints: "on",
              max_wal_senders: 5,
              max_replication_slots: 5,
              hot_standby: "on",
            },
          },
        },
        initdb: [{ encoding: "UTF8" }, { locale: "C" }],
      },
      postgresql: {
        listen: `127.0.0.1:${pgPort}`,
        connect_address: `127.0.0.1:${pgPort}`,
        data_dir: dataDir,
        bin_dir: PG15_BIN,
        pgpass: path.join(this.dir, `${name}.pgpass`),
        authentication: {
          superuser: { username: "postgres", password: this.#password },
          replication: { username: "replicator", password: this.#password },
          rewind: { username: "postgres", password: this.#password },
        },
        parameters: { unix_socket_directories: path.join(this.dir, name), fsync: "off" },
        pg_hba: [
          "local all all trust",
          "host replication replicator 127.0.0.1/32 scram-sha-256",
          "host all all 127.0.0.1/32 scram-sha-256",
        ],
      },
      tags: { nofailover: false, noloadbalance: false, clonefrom: false, nosync: false },
    };
    // JSON is YAML
    writeFileSync(configFile, JSON.stringify(config, null, 2), { mode: 0o600 });
    mkdirSync(path.join(this.dir, name), { recursive: true });
    chmodSync(path.join(this.dir, name), 0o700);
    if (this.#owner) {
      chownSync(configFile, this.#owner.uid, this.#owner.gid);
      chownSync(path.join(this.dir, name), this.#owner.uid, this.#owner.gid);
    }
    const fd = openSync(logFile, "a");
    const child = spawn(PATRONI, [configFile], {
      cwd: this.dir,
      stdio: ["ignore", fd, fd],
      ...(this.#owner ? { uid: this.#owner.uid, gid: this.#owner.gid } : {}),
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: this.dir, LANG: "C.UTF-8" },
    });
    const entry = { child, dataDir };
    running.add(entry);
    child.once("exit", () => running.delete(entry));
    return { name, pgPort, restPort, dataDir, configFile, logFile, child };
  }

  async #startHaproxy(): Promise<void> {
    const configFile = path.join(this.dir, "haproxy.cfg");
    const servers = this.nodes
      .map(
        (node) =>
          `  server ${node.name} 127.0.0.1:${node.pgPort} check port ${node.restPort} inter 250ms fall 2 rise 1 on-marked-down shutdown-sessions`,
      )
      .join("\n");
    // Patroni's REST API answers 200 on /primary only on the node that holds the leader lock
    writeFileSync(
      configFile,
      `global
  maxconn 200
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 1s
listen postgres
  bind 127.0.0.1:${this.haproxyPort}
  option httpchk GET /primary
  http-check expect status 200
${servers}
`,
    );
    const fd = openSync(path.join(this.dir, "haproxy.log"), "a");
    this.#haproxy = spawn(HAPROXY, ["-db", "-f", configFile], { stdio: ["ignore", fd, fd] });
    const entry = { child: this.#haproxy, dataDir: this.dir };
    running.add(entry);
    this.#haproxy.once("exit", () => running.delete(entry));
    await pollUntil("HAProxy to route to the primary", () => this.#writable(this.url), {
      timeoutMs: 30_000,
      intervalMs: 100,
    });
  }

  /** The node names by Patroni role, from the REST API of any node that answers. */
  async roles(): Promise<{ leader?: string; replicas: string[] }> {
    for (const node of this.nodes) {
      try {
        const response = await fetch(`http://127.0.0.1:${node.restPort}/cluster`, {
          signal: AbortSignal.timeout(1_000),
        });
        const body = (await response.json()) as {
          members: Array<{ name: string; role: string; state: string }>;
        };
        return {
          leader: body.members.find((member) => member.role === "leader" && member.state === "running")?.name,
          replicas: body.members
            .filter((member) => member.role !== "leader" && ["running", "streaming"].includes(member.state))
            .map((member) => member.name),
        };
      } catch {
        // that node is down: ask the other
      }
    }
    return { replicas: [] };
  }

  async waitForLeader(name: string, timeoutMs = 60_000): Promise<void> {
    await pollUntil(`${name} to lead the Patroni cluster`, () => this.#restOk(name, "/primary"), {
      timeoutMs,
      intervalMs: 200,
    });
  }

  /**
   * Waits until `name` is a replica streaming from the leader, and in synchronous mode its
   * synchronous standby: only that one may be promoted (by a failover or a switchover).
   */
  async waitForReplica(name: string, timeoutMs = 60_000): Promise<void> {
    await pollUntil(
      `${name} to stream as a${this.#synchronous ? " synchronous" : ""} replica`,
      async () => {
        if (!(await this.#restOk(name, "/replica"))) return false;
        const response = await fetch(`http://127.0.0.1:${this.node(name).restPort}/cluster`, {
          signal: AbortSignal.timeout(1_000),
        });
        const body = (await response.json()) as {
          members: Array<{ name: string; role: string; state: string }>;
        };
        const member = body.members.find((candidate) => candidate.name === name);
        if (!member || !["running", "streaming"].includes(member.state)) return false;
        return this.#synchronous ? member.role === "sync_standby" : member.role === "replica";
      },
      { timeoutMs, intervalMs: 200 },
    );
  }

  async #restOk(name: string, route: string): Promise<boolean> {
    try {
      const response = await fetch(`http://127.0.0.1:${this.node(name).restPort}${route}`, {
        signal: AbortSignal.timeout(1_000),
      });
      await response.arrayBuffer();
      return response.ok;
    } catch {
      return false;
    }
  }

  /** Whether a write commits on the server behind `url` now. */
  async #writable(url: string): Promise<boolean> {
    const client = new pg.Client({
      connectionString: url,
      connectionTimeoutMillis: 1_000,
      statement_timeout: 1_000,
    });
    client.on("error", () => {});
    try {
      await client.connect();
      await client.query("CREATE TABLE IF NOT EXISTS ha_write_probe (at timestamptz NOT NULL)");
      await client.query("INSERT INTO ha_write_probe VALUES (now())");
      return true;
    } catch {
      return false;
    } finally {
      await client.end().catch(() => {});
    }
  }

  /** Polls node `name` directly until a write commits there; resolves with that moment (epoch ms). */
  async waitWritable(name: string, timeoutMs = 60_000): Promise<number> {
    await pollUntil(`${name} to accept writes`, () => this.#writable(this.nodeUrl(name)), {
      timeoutMs,
      intervalMs: 50,
    });
    return Date.now();
  }

  /** SIGKILLs node `name`'s postmaster (its Patroni stays up); resolves with the moment (epoch ms). */
  killPostmaster(name: string): number {
    const pid = postmasterPidOf(this.node(name).dataDir);
    if (pid === undefined) throw new Error(`${name} has no postmaster.pid`);
    process.kill(pid, "SIGKILL");
    return Date.now();
  }

  /** A planned switchover with patronictl; resolves with the moment the command returned (epoch ms). */
  async switchover(from: string, to: string): Promise<number> {
    await promisify(execFile)(
      PATRONICTL,
      ["-c", this.node(from).configFile, "switchover", "--leader", from, "--candidate", to, "--force"],
      { timeout: 60_000, ...(this.#owner ? { uid: this.#owner.uid, gid: this.#owner.gid } : {}) },
    );
    return Date.now();
  }

  logTail(lines = 25): string {
    const tail = (file: string) => {
      try {
        return readFileSync(file, "utf8").split("\n").slice(-lines).join("\n");
      } catch {
        return "(no log)";
      }
    };
    return this.nodes.map((node) => `--- ${node.name} (${node.logFile}):\n${tail(node.logFile)}`).join("\n");
  }

  /** Stops HAProxy and both nodes (Patroni stops its PostgreSQL on SIGTERM), then etcd; removes the data. */
  async stop(): Promise<void> {
    this.#haproxy?.kill("SIGTERM");
    await Promise.all(
      this.nodes.map(async (node) => {
        if (node.child.exitCode !== null || node.child.signalCode !== null) return;
        const exited = new Promise((resolve) => node.child.once("exit", resolve));
        node.child.kill("SIGTERM");
        const killer = setTimeout(() => node.child.kill("SIGKILL"), 20_000);
        await exited;
        clearTimeout(killer);
      }),
    );
    for (const node of this.nodes) {
      const pid = postmasterPidOf(node.dataDir);
      if (pid !== undefined) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone already
        }
      }
    }
    await this.etcd.destroy();
    await rm(this.dir, { recursive: true, force: true });
  }
}
