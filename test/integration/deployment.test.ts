import { spawnSync } from "node:child_process";
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { PROBE_PATHS } from "../../src/admin/probeRoutes.js";
import { parseDesiredState, SERVICE_VARIABLES } from "../../src/index.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { descendantsOf, isAlive, ServiceProcess } from "../helpers/processes.js";

/**
 * What can be checked of the deployment material without a container daemon or a cluster: the
 * Dockerfile's CMD is run as a process in the image's layout and drains on SIGTERM; the compose
 * file and the Kubernetes manifests parse and name only documented variables and real probe paths.
 * Building the image, `docker compose up` and `kubectl apply` are not run here.
 */

const root = process.cwd();
type Env = { name: string; value?: string; valueFrom?: unknown };

// biome-ignore lint/suspicious/noExplicitAny: parsed YAML, walked by the assertions below
type Manifest = Record<string, any>;

async function manifests(): Promise<Manifest[]> {
  return YAML.parseAllDocuments(await readFile("deploy/k8s/cronwarden.yaml", "utf8")).map(
    (document) => document.toJS() as Manifest,
  );
}

function dockerfile(text: string) {
  const instructions = text
    .replace(/\\\n/g, " ")
    .split("\n")
    .filter((line) => line.trim() && !line.trim().startsWith("#"));
  const of = (keyword: string) =>
    instructions
      .filter((line) => line.startsWith(`${keyword} `))
      .map((line) => line.slice(keyword.length + 1).trim());
  return { of };
}

describe("Kubernetes manifests", () => {
  it("a Deployment of 2 replicas with probes on real paths, a grace period above the drain timeout, config from a ConfigMap, secrets from a Secret, and a Service", async () => {
    const documents = await manifests();
    const byKind = (kind: string) => documents.filter((document) => document.kind === kind);
    const [deployment] = byKind("Deployment");
    expect(deployment?.spec.replicas).toBe(2);
    const pod = deployment?.spec.template.spec;
    const [container] = pod.containers;
    const env = container.env as Env[];
    for (const variable of env) expect(SERVICE_VARIABLES, variable.name).toContain(variable.name);
    const value = (name: string) => env.find((variable) => variable.name === name)?.value;

    expect(container.livenessProbe.httpGet.path).toBe("/healthz");
    expect(container.readinessProbe.httpGet.path).toBe("/readyz");
    for (const probe of [container.livenessProbe, container.readinessProbe, container.startupProbe]) {
      expect(PROBE_PATHS).toContain(probe.httpGet.path);
      expect(container.ports.map((port: { name: string }) => port.name)).toContain(probe.httpGet.port);
    }
    expect(Number(container.ports[0].containerPort)).toBe(Number(value("CRONWARDEN_ADMIN_PORT")));
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(
      Number(value("CRONWARDEN_DRAIN_TIMEOUT_MS")),
    );

    // the database URL and the admin token come from the Secret, which holds placeholders only
    const [secret] = byKind("Secret");
    for (const name of ["DATABASE_URL", "CRONWARDEN_ADMIN_TOKEN"]) {
      const variable = env.find((entry) => entry.name === name);
      expect(variable?.valueFrom, name).toEqual({ secretKeyRef: { name: secret?.metadata.name, key: name } });
      expect(secret?.stringData[name], name).toMatch(/REPLACE_ME/);
    }

    // the config file is the ConfigMap's tasks.yaml, mounted where CRONWARDEN_CONFIG_FILE points, and valid
    const [configMap] = byKind("ConfigMap");
    const volume = pod.volumes.find((entry: { configMap?: { name: string } }) => entry.configMap);
    expect(volume.configMap.name).toBe(configMap?.metadata.name);
    const mount = container.volumeMounts.find((entry: { name: string }) => entry.name === volume.name);
    expect(path.posix.join(mount.mountPath, "tasks.yaml")).toBe(value("CRONWARDEN_CONFIG_FILE"));
    const desired = parseDesiredState(YAML.parse(configMap?.data["tasks.yaml"]), {
      defaultTimezone: "UTC",
      rules: { minIntervalMs: 60_000 },
      now: new Date(),
      source: "ConfigMap",
      revision: "test",
    });
    expect(desired.rejected).toEqual([]);
    expect(desired.tasks.map((task) => task.name)).toEqual(["heartbeat", "reportRollup"]);

    const [service] = byKind("Service");
    expect(service?.spec.selector).toEqual(deployment?.spec.selector.matchLabels);
    expect(service?.spec.ports[0].targetPort).toBe("admin");
  });
});

describe("entry points", () => {
  it("no deploy file starts a process through npx or npm exec (npm's shell stops a SIGTERM: docs/operations.md, Signals)", async () => {
    const commands: string[] = [];
    const file = dockerfile(await readFile("Dockerfile", "utf8"));
    commands.push(...file.of("CMD"), ...file.of("ENTRYPOINT"));
    const compose = YAML.parse(await readFile("deploy/compose/compose.yaml", "utf8"), { merge: true }) as {
      services: Record<string, { command?: unknown; entrypoint?: unknown }>;
    };
    for (const service of Object.values(compose.services))
      commands.push(JSON.stringify(service.command ?? ""), JSON.stringify(service.entrypoint ?? ""));
    const containersOf = (spec: Manifest | undefined): Manifest[] => [
      ...(spec?.containers ?? []),
      ...(spec?.initContainers ?? []),
    ];
    for (const document of await manifests()) {
      const pod = document.spec?.template?.spec ?? document.spec?.jobTemplate?.spec?.template?.spec;
      for (const container of containersOf(pod))
        commands.push(JSON.stringify([container.command ?? [], container.args ?? []]));
    }
    expect(commands.length).toBeGreaterThan(0);
    for (const command of commands) expect(command).not.toMatch(/\bnpx\b|\bnpm"?,?\s*"?exec\b|\bnpm exec\b/);
    expect(JSON.parse(file.of("CMD")[0] ?? "[]").slice(0, 3)).toEqual([
      "node",
      "bin/cronwarden.mjs",
      "serve",
    ]);
  });
});

describe("compose file", () => {
  it("PostgreSQL and 2 instances on it, with documented variables, placeholders and the config file", async () => {
    const compose = YAML.parse(await readFile("deploy/compose/compose.yaml", "utf8"), { merge: true }) as {
      services: Record<string, { environment?: Record<string, string>; volumes?: string[]; init?: boolean }>;
    };
    const instances = Object.entries(compose.services).filter(([name]) => name.startsWith("cronwarden"));
    expect(instances).toHaveLength(2);
    expect(compose.services.postgres).toBeDefined();
    for (const [name, service] of instances) {
      expect(service.init, name).toBe(true);
      for (const variable of Object.keys(service.environment ?? {}))
        expect(SERVICE_VARIABLES, name).toContain(variable);
      expect(service.environment?.DATABASE_URL).toMatch(/change-me-placeholder@postgres:5432/);
      expect(service.volumes).toContain("./tasks.yaml:/etc/cronwarden/tasks.yaml:ro");
    }
  });
});

describe("Dockerfile", () => {
  let db: TestDatabase;
  let image: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    // the runtime stage's /app: package files, dist/, bin/, build/tasks/ (compiled as the build stage does)
    image = await mkdtemp(path.join(tmpdir(), "cronwarden-image-"));
    await copyFile("package.json", path.join(image, "package.json"));
    for (const entry of ["dist", "bin", "node_modules"])
      await symlink(path.join(root, entry), path.join(image, entry));
    const compile = spawnSync(
      process.execPath,
      [
        path.join(root, "node_modules/typescript/bin/tsc"),
        "-p",
        "tsconfig.tasks.json",
        "--outDir",
        path.join(image, "build"),
      ],
      { cwd: root, encoding: "utf8" },
    );
    expect(compile.status, compile.stdout + compile.stderr).toBe(0);
    await mkdir(path.join(image, "etc"));
    await writeFile(
      path.join(image, "etc", "tasks.yaml"),
      'tasks:\n  - { name: heartbeat, enabled: true, cron: "* * * * * *" }\n  - { name: reportRollup, enabled: false, cron: "*/5 * * * *" }\n',
    );
  }, 120_000);

  afterAll(async () => {
    await db?.drop();
    if (image) await rm(image, { recursive: true, force: true });
  });

  it("is multi-stage on a maintained Node LTS line that engines covers, runs as a non-root user, and its CMD runs node directly", async () => {
    const file = dockerfile(await readFile("Dockerfile", "utf8"));
    const stages = file.of("FROM");
    expect(stages.length).toBeGreaterThanOrEqual(2);
    for (const stage of stages) expect(stage).toMatch(/^node:24-slim\b/);
    // the line's end of life (nodejs.org's release schedule): this fails once the image's line is
    // past it, and the Dockerfile must move on
    const endOfLife: Record<string, string> = { "20": "2026-04-30", "22": "2027-04-30", "24": "2028-04-30" };
    const line = stages[0]?.match(/^node:(\d+)/)?.[1] ?? "";
    expect(endOfLife[line], `node:${line} is not a known LTS line`).toBeDefined();
    expect(Date.parse(endOfLife[line] ?? "")).toBeGreaterThan(Date.now());
    // package.json's engines take the image's Node (>=20.19: any 24.x)
    const { engines } = JSON.parse(await readFile("package.json", "utf8")) as { engines: { node: string } };
    const floor = engines.node.match(/^>=(\d+)\.(\d+)$/);
    expect(floor, `engines.node ${engines.node}: a plain >= range`).not.toBeNull();
    expect(Number(line)).toBeGreaterThan(Number(floor?.[1]));
    expect(file.of("USER")).toEqual(["node"]);
    const [cmd] = file.of("CMD");
    expect(JSON.parse(cmd ?? "null")[0]).toBe("node");
  });

  it("its exact CMD, run as a process in the image's layout, serves and drains on SIGTERM", async () => {
    const file = dockerfile(await readFile("Dockerfile", "utf8"));
    const [command, ...args] = JSON.parse(file.of("CMD")[0] ?? "[]") as string[];
    expect(command).toBe("node");
    const service = new ServiceProcess(
      { command: process.execPath, args, cwd: image },
      {
        DATABASE_URL: db.url,
        CRONWARDEN_CONFIG_FILE: path.join(image, "etc", "tasks.yaml"),
        CRONWARDEN_MIN_INTERVAL_MS: "1000",
        CRONWARDEN_ADMIN_HOST: "0.0.0.0",
        CRONWARDEN_ADMIN_TOKEN: "placeholder-token-for-the-test",
        LOG_LEVEL: "info",
      },
    );
    let descendants: number[] = [];
    try {
      await service.waitFor(
        "the scheduler to start",
        (line) => /^scheduler started/.test(String(line.msg)),
        60_000,
      );
      await service.waitFor(
        "a heartbeat run",
        (line) => line.task === "heartbeat" && /^run succeeded/.test(String(line.msg)),
      );
      const admin = service.find((line) => /^admin API listening on/.test(String(line.msg)));
      const port = new URL(String(admin?.url)).port;
      // the probes answer without the token, as a kubelet calls them
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
      expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
      expect((await fetch(`http://127.0.0.1:${port}/tasks`)).status).toBe(401);
      descendants = descendantsOf(service.child.pid as number);
      service.child.kill("SIGTERM");
      expect(await service.exited).toEqual({ code: 0, signal: null });
      expect(service.messages().some((msg) => /^stopped/.test(msg))).toBe(true);
      expect(descendants.filter(isAlive)).toEqual([]);
      expect(JSON.stringify(service.lines)).not.toContain("placeholder-token-for-the-test");
    } finally {
      await service.kill();
      for (const orphan of descendants.filter(isAlive)) process.kill(orphan, "SIGKILL");
    }
  }, 120_000);
});
