import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { validateManifests } from "../../scripts/validateK8s.js";
import { PROBE_PATHS } from "../../src/admin/probeRoutes.js";
import { parseDesiredState } from "../../src/config/desiredState.js";
import { METRICS_PATH } from "../../src/metrics/index.js";
import { SERVICE_VARIABLES } from "../../src/serve/settings.js";
import { adminUrl, createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil } from "../helpers/poll.js";
import { descendantsOf, isAlive, ServiceProcess } from "../helpers/processes.js";

/**
 * What can be checked of the deployment material without a container daemon or a cluster: the
 * Dockerfile's CMD is run as a process in the image's layout and drains on SIGTERM; the compose
 * file and the Kubernetes manifests parse and name only documented variables and real probe paths;
 * the manifests pass the Kubernetes schema (scripts/validateK8s.ts); the migrate Job's command and
 * the Deployment's container run, in the image's layout, with the manifests' variables and the
 * least-privilege roles of docs/operations.md. Building the image, `docker compose up` and
 * `kubectl apply` are not run here.
 */

const root = process.cwd();
type Env = { name: string; value?: string; valueFrom?: unknown };

// biome-ignore lint/suspicious/noExplicitAny: parsed YAML, walked by the assertions below
type Manifest = Record<string, any>;

const MANIFEST_FILES = ["deploy/k8s/cronwarden.yaml", "deploy/k8s/migrate.yaml"];

async function manifests(): Promise<Manifest[]> {
  const documents: Manifest[] = [];
  for (const file of MANIFEST_FILES) {
    for (const document of YAML.parseAllDocuments(await readFile(file, "utf8")))
      documents.push(document.toJS() as Manifest);
  }
  return documents;
}

/** The documents of one kind; `only` asserts there is exactly one and returns it. */
function kinds(documents: Manifest[]) {
  const byKind = (kind: string) => documents.filter((document) => document.kind === kind);
  const only = (kind: string): Manifest => {
    const found = byKind(kind);
    expect(found, kind).toHaveLength(1);
    return found[0] as Manifest;
  };
  return { byKind, only };
}

/** A pod template's one container and its env as a name -> literal value map. */
function containerOf(template: Manifest) {
  const [container] = template.spec.containers;
  const env = (container.env ?? []) as Env[];
  const value = (name: string) => env.find((variable) => variable.name === name)?.value;
  return { container, env, value };
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

/**
 * A fresh database with the roles of docs/operations.md ("Database roles"), created by its SQL as
 * written, the names made unique to this test: the migrator may change the schema, the service
 * role only its rows.
 */
async function leastPrivilegeRoles() {
  const suffix = `${process.pid}_${randomBytes(3).toString("hex")}`;
  const names = { migrator: `cw_k8s_migrator_${suffix}`, service: `cw_k8s_service_${suffix}` };
  const passwords = {
    migrator: `mig-${randomBytes(12).toString("hex")}`,
    service: `svc-${randomBytes(12).toString("hex")}`,
  };
  const database = await createTestDatabase();
  const doc = await readFile("docs/operations.md", "utf8");
  const block = /```sql\n([\s\S]*?)```/.exec(doc.slice(doc.indexOf("## Database roles")))?.[1];
  if (!block) throw new Error("docs/operations.md has no ```sql block under ## Database roles");
  const name = decodeURIComponent(new URL(database.url).pathname.slice(1));
  await database.pool.query(
    block
      .replaceAll("cronwarden_migrator", names.migrator)
      .replaceAll("cronwarden_service", names.service)
      .replaceAll("DATABASE cronwarden ", `DATABASE "${name}" `)
      .replaceAll("'change-me-migrator'", `'${passwords.migrator}'`)
      .replaceAll("'change-me-service'", `'${passwords.service}'`),
  );
  const as = (role: string, password: string) => {
    const url = new URL(database.url);
    url.username = role;
    url.password = password;
    return url.toString();
  };
  return {
    migratorUrl: as(names.migrator, passwords.migrator),
    serviceUrl: as(names.service, passwords.service),
    migratorPassword: passwords.migrator,
    servicePassword: passwords.service,
    async drop() {
      await database.drop();
      const admin = new pg.Client({ connectionString: adminUrl() });
      await admin.connect();
      try {
        for (const role of [names.service, names.migrator]) await admin.query(`DROP ROLE IF EXISTS ${role}`);
      } finally {
        await admin.end();
      }
    },
  };
}

describe("Kubernetes manifests", () => {
  it("a Deployment of 2 replicas with probes on real paths, a grace period above the drain timeout, config from a ConfigMap, secrets from a Secret, and a Service", async () => {
    const documents = await manifests();
    const { byKind, only } = kinds(documents);
    const deployment = only("Deployment");
    expect(deployment.spec.replicas).toBe(2);
    const pod = deployment.spec.template.spec;
    const { container, env, value } = containerOf(deployment.spec.template);
    for (const variable of env) expect(SERVICE_VARIABLES, variable.name).toContain(variable.name);

    expect(container.livenessProbe.httpGet.path).toBe("/healthz");
    expect(container.readinessProbe.httpGet.path).toBe("/readyz");
    for (const probe of [container.livenessProbe, container.readinessProbe, container.startupProbe]) {
      expect(PROBE_PATHS).toContain(probe.httpGet.path);
      expect(probe.httpGet.port).toBe("admin");
    }
    const port = (name: string) =>
      Number(container.ports.find((entry: { name: string }) => entry.name === name)?.containerPort);
    expect(port("admin")).toBe(Number(value("CRONWARDEN_ADMIN_PORT")));
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(
      Number(value("CRONWARDEN_DRAIN_TIMEOUT_MS")),
    );

    // the database URL (the service role's) and the admin token come from the Secret, which holds placeholders only
    const secret = byKind("Secret").find((entry) => entry.metadata.name === "cronwarden");
    for (const name of ["DATABASE_URL", "CRONWARDEN_ADMIN_TOKEN"]) {
      const variable = env.find((entry) => entry.name === name);
      expect(variable?.valueFrom, name).toEqual({ secretKeyRef: { name: secret?.metadata.name, key: name } });
      expect(secret?.stringData[name], name).toMatch(/REPLACE_ME/);
    }

    // the config file is the ConfigMap's tasks.yaml, mounted where CRONWARDEN_CONFIG_FILE points, and valid
    const configMap = only("ConfigMap");
    const volume = pod.volumes.find((entry: { configMap?: { name: string } }) => entry.configMap);
    expect(volume.configMap.name).toBe(configMap.metadata.name);
    const mount = container.volumeMounts.find((entry: { name: string }) => entry.name === volume.name);
    expect(path.posix.join(mount.mountPath, "tasks.yaml")).toBe(value("CRONWARDEN_CONFIG_FILE"));
    const desired = parseDesiredState(YAML.parse(configMap.data["tasks.yaml"]), {
      defaultTimezone: "UTC",
      rules: { minIntervalMs: 60_000 },
      now: new Date(),
      source: "ConfigMap",
      revision: "test",
    });
    expect(desired.rejected).toEqual([]);
    expect(desired.tasks.map((task) => task.name)).toEqual(["heartbeat", "reportRollup"]);

    const service = only("Service");
    expect(service.spec.selector).toEqual(deployment.spec.selector.matchLabels);
    expect(service.spec.ports.map((entry: { targetPort: string }) => entry.targetPort)).toEqual([
      "admin",
      "metrics",
    ]);
  });

  it("Prometheus scrapes the metrics listener through the pods' annotations: its port, its path, beyond loopback, no token", async () => {
    const { only } = kinds(await manifests());
    const template = only("Deployment").spec.template;
    const { container, value } = containerOf(template);
    const annotations = template.metadata.annotations as Record<string, string>;
    const metricsPort = container.ports.find((entry: { name: string }) => entry.name === "metrics");
    expect(annotations["prometheus.io/scrape"]).toBe("true");
    expect(annotations["prometheus.io/path"]).toBe(METRICS_PATH);
    expect(Number(annotations["prometheus.io/port"])).toBe(Number(metricsPort?.containerPort));
    expect(Number(value("CRONWARDEN_METRICS_PORT"))).toBe(Number(metricsPort?.containerPort));
    expect(value("CRONWARDEN_METRICS_HOST")).toBe("0.0.0.0");
    // the admin API is another port: the annotation does not point Prometheus at it
    expect(Number(annotations["prometheus.io/port"])).not.toBe(Number(value("CRONWARDEN_ADMIN_PORT")));
  });

  it("least privilege: a migrate Job with the migrator role, the Deployment as the service role with CRONWARDEN_MIGRATE=false", async () => {
    const documents = await manifests();
    const { byKind, only } = kinds(documents);
    const deployment = only("Deployment");
    const job = only("Job");
    const service = containerOf(deployment.spec.template);
    const migrate = containerOf(job.spec.template);
    const secrets = Object.fromEntries(byKind("Secret").map((secret) => [secret.metadata.name, secret]));

    expect(service.value("CRONWARDEN_MIGRATE")).toBe("false");
    // the roles of docs/operations.md, "Database roles"
    const roleOf = (url: string) => new URL(url).username;
    expect(roleOf(secrets.cronwarden?.stringData.DATABASE_URL)).toBe("cronwarden_service");
    expect(roleOf(secrets["cronwarden-migrator"]?.stringData.DATABASE_URL)).toBe("cronwarden_migrator");
    expect(migrate.env).toEqual([
      {
        name: "DATABASE_URL",
        valueFrom: { secretKeyRef: { name: "cronwarden-migrator", key: "DATABASE_URL" } },
      },
    ]);
    // the service's pods never reference the migrator's Secret
    expect(JSON.stringify(deployment)).not.toContain("cronwarden-migrator");

    // the same image; one Job per release, named after the image's tag
    expect(migrate.container.image).toBe(service.container.image);
    const tag = String(service.container.image).split(":").pop() as string;
    expect(job.metadata.name).toBe(`cronwarden-migrate-${tag.replaceAll(".", "-")}`);
    expect(migrate.container.command).toEqual(["node", "bin/cronwarden.mjs", "migrate"]);
    expect(job.spec.template.spec.restartPolicy).toBe("Never");
    expect(job.spec.ttlSecondsAfterFinished).toBeGreaterThan(0);
    // the Job's pod is neither a Service endpoint nor counted by the PodDisruptionBudget
    const jobLabels = job.spec.template.metadata.labels as Record<string, string>;
    const selects = (selector: Record<string, string>) =>
      Object.entries(selector).every(([key, wanted]) => jobLabels[key] === wanted);
    expect(selects(only("Service").spec.selector)).toBe(false);
    expect(selects(only("PodDisruptionBudget").spec.selector.matchLabels)).toBe(false);
    expect(selects(deployment.spec.selector.matchLabels)).toBe(false);
  });

  it("every pod is hardened: seccomp RuntimeDefault, non-root, no privilege escalation, read-only root, no capabilities, no API token", async () => {
    const { byKind } = kinds(await manifests());
    const templates = [...byKind("Deployment"), ...byKind("Job")].map((owner) => owner.spec.template);
    expect(templates).toHaveLength(2);
    for (const template of templates) {
      const pod = template.spec;
      expect(pod.securityContext).toMatchObject({
        runAsNonRoot: true,
        runAsUser: 1000,
        seccompProfile: { type: "RuntimeDefault" },
      });
      expect(pod.automountServiceAccountToken).toBe(false);
      for (const container of pod.containers) {
        expect(container.securityContext).toEqual({
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ["ALL"] },
        });
        expect(container.resources.limits.memory).toBeDefined();
      }
    }
  });

  it("a PodDisruptionBudget keeps one of the Deployment's pods through voluntary disruptions", async () => {
    const { only } = kinds(await manifests());
    const deployment = only("Deployment");
    const budget = only("PodDisruptionBudget");
    expect(budget.apiVersion).toBe("policy/v1");
    expect(budget.spec.selector.matchLabels).toEqual(deployment.spec.selector.matchLabels);
    expect(budget.spec.minAvailable).toBe(1);
    expect(budget.spec.minAvailable).toBeLessThan(deployment.spec.replicas);
  });

  it("pass the Kubernetes schema, strictly: scripts/validateK8s.ts finds a wrong type, an unknown field and an unknown kind", async () => {
    const run = spawnSync(process.execPath, ["--import", "tsx", "scripts/validateK8s.ts", "deploy/k8s"], {
      cwd: root,
      encoding: "utf8",
    });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    const documents = await manifests();
    for (const document of documents)
      expect(run.stdout).toContain(`: ${document.kind} ${document.metadata.name}\n`);
    expect(run.stdout).toMatch(
      new RegExp(`^${documents.length} manifests valid against the Kubernetes 1\\.\\d+ schema`, "m"),
    );

    const text = await readFile("deploy/k8s/cronwarden.yaml", "utf8");
    const broken = text
      .replace("seccompProfile: { type: RuntimeDefault }", "seccompProfil: { type: RuntimeDefault }")
      .replace("replicas: 2", 'replicas: "2"')
      .replace("kind: PodDisruptionBudget", "kind: PodDisruptionBudgets");
    const report = await validateManifests(broken, "broken.yaml");
    expect(report.problems).toEqual([
      "broken.yaml (document 3): Deployment cronwarden: /spec/replicas must be integer",
      "broken.yaml (document 3): Deployment cronwarden: /spec/template/spec/securityContext/seccompProfil: unknown field",
      "broken.yaml (document 4): PodDisruptionBudgets cronwarden: no Kubernetes 1.27 schema for policy/v1 PodDisruptionBudgets",
    ]);
    expect(report.valid).toHaveLength(3);
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

  it("the migrate Job's command as the migrator role, then the Deployment's container as the service role with the manifests' variables: serves, scrapable without a token, drains", async () => {
    const { byKind, only } = kinds(await manifests());
    const secrets = Object.fromEntries(byKind("Secret").map((secret) => [secret.metadata.name, secret]));
    const deployment = containerOf(only("Deployment").spec.template);
    const job = containerOf(only("Job").spec.template);
    const roles = await leastPrivilegeRoles();
    const configDir = await mkdtemp(path.join(tmpdir(), "cronwarden-configmap-"));
    let service: ServiceProcess | undefined;
    try {
      // the Job: its exact command, in the image's layout, with its one variable from its Secret
      const [command, ...args] = job.container.command as string[];
      expect(command).toBe("node");
      const migrated = spawnSync(process.execPath, args, {
        cwd: image,
        encoding: "utf8",
        env: { ...process.env, DATABASE_URL: roles.migratorUrl },
      });
      expect(migrated.status, migrated.stdout + migrated.stderr).toBe(0);
      expect(migrated.stdout).toMatch(/schema migrated from version \(none\) to \d+/);

      // the Deployment's container: the image's CMD with every variable of the manifest. Where it
      // differs from a pod: free ports (other tests run on this machine) and the ConfigMap's
      // tasks.yaml at a temporary path instead of its mount
      await writeFile(path.join(configDir, "tasks.yaml"), only("ConfigMap").data["tasks.yaml"]);
      const fromSecret: Record<string, string> = {
        DATABASE_URL: roles.serviceUrl,
        CRONWARDEN_ADMIN_TOKEN: secrets.cronwarden?.stringData.CRONWARDEN_ADMIN_TOKEN,
      };
      const environment: Record<string, string> = {};
      for (const variable of deployment.env) {
        if (variable.value !== undefined) environment[variable.name] = variable.value;
        else if (variable.name === "CRONWARDEN_INSTANCE_ID")
          environment[variable.name] = "cronwarden-5d8f7-x2x9q";
        else
          environment[variable.name] =
            fromSecret[variable.name] ?? expect.fail(`no value for ${variable.name}`);
      }
      expect(environment.CRONWARDEN_MIGRATE).toBe("false");
      const token = environment.CRONWARDEN_ADMIN_TOKEN as string;
      Object.assign(environment, {
        CRONWARDEN_ADMIN_PORT: "0",
        CRONWARDEN_METRICS_PORT: "0",
        CRONWARDEN_CONFIG_FILE: path.join(configDir, "tasks.yaml"),
      });
      const file = dockerfile(await readFile("Dockerfile", "utf8"));
      const [, ...cmdArgs] = JSON.parse(file.of("CMD")[0] ?? "[]") as string[];
      service = new ServiceProcess({ command: process.execPath, args: cmdArgs, cwd: image }, environment);
      await service.waitFor(
        "the scheduler to start",
        (line) => /^scheduler started/.test(String(line.msg)),
        60_000,
      );
      const local = (url: string) => url.replace("0.0.0.0", "127.0.0.1");
      const admin = local(
        String(service.find((line) => /^admin API listening on/.test(String(line.msg)))?.url),
      );
      const metricsLine = service.find((line) => /^metrics listening on/.test(String(line.msg)));
      expect(String(metricsLine?.url)).toMatch(/^http:\/\/0\.0\.0\.0:\d+\/metrics$/);
      const metricsUrl = local(String(metricsLine?.url));

      // Prometheus as the annotations configure it: GET the metrics port's path, no credentials
      const scrape = await pollUntil("the metrics listener to report the instance ready", async () => {
        const answer = await fetch(metricsUrl);
        const text = await answer.text();
        return answer.status === 200 && /^cronwarden_ready 1$/m.test(text) ? text : undefined;
      });
      expect(scrape).toMatch(/^cronwarden_task_enabled\{task="heartbeat"\} 1$/m);
      // the admin API keeps its token: /metrics there needs it, and the probes do not
      expect((await fetch(`${admin}/metrics`)).status).toBe(401);
      expect(
        (await fetch(`${admin}/metrics`, { headers: { authorization: `Bearer ${token}` } })).status,
      ).toBe(200);
      expect((await fetch(`${admin}/readyz`)).status).toBe(200);

      service.child.kill("SIGTERM");
      expect(await service.exited).toEqual({ code: 0, signal: null });
      expect(service.messages().some((msg) => /^stopped/.test(msg))).toBe(true);
      const everything =
        JSON.stringify(service.lines) + service.stderr.join("") + migrated.stdout + migrated.stderr;
      for (const secret of [token, roles.servicePassword, roles.migratorPassword])
        expect(everything).not.toContain(secret);
    } finally {
      await service?.kill();
      await roles.drop();
      await rm(configDir, { recursive: true, force: true });
    }
  }, 180_000);
});
