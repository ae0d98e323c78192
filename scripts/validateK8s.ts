// Validates Kubernetes manifests against the Kubernetes API schema, offline:
//   node --import tsx scripts/validateK8s.ts deploy/k8s
// Run by .ci/run and test/integration/deployment.test.ts. kubeconform and kubeval are neither in
// Debian nor on npm; kubernetes-models (a devDependency) ships the OpenAPI schema of Kubernetes
// 1.27 compiled into ajv validators, one per kind: types, required fields, enums and formats.
// Those validators accept fields the schema does not know (as kubeconform does without -strict),
// so this script adds the strict check: every field of the manifest must be one the validator
// read. Exit 0 when every document is valid, 1 when one is not, 2 when a file cannot be read.
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import YAML from "yaml";

/** The Kubernetes version of kubernetes-models 4.5.1's schema. */
export const SCHEMA_VERSION = "1.27";

interface Validatable {
  prototype: { validate(this: unknown): void };
}

export interface ManifestReport {
  /** "Kind name" of each valid document. */
  valid: string[];
  /** One line per problem: "Kind name: /json/pointer: message". */
  problems: string[];
}

/** Checks every document of one YAML text (a file's content); `file` names it in the problems. */
export async function validateManifests(text: string, file: string): Promise<ManifestReport> {
  const report: ManifestReport = { valid: [], problems: [] };
  const documents = YAML.parseAllDocuments(text, { uniqueKeys: true });
  for (const [index, document] of documents.entries()) {
    const where = `${file} (document ${index + 1})`;
    if (document.errors.length > 0) {
      report.problems.push(
        `${where}: not valid YAML: ${document.errors.map((error) => error.message).join("; ")}`,
      );
      continue;
    }
    const manifest: unknown = document.toJS();
    if (manifest === null || manifest === undefined) continue; // an empty document (a trailing ---)
    if (typeof manifest !== "object" || Array.isArray(manifest)) {
      report.problems.push(`${where}: not a Kubernetes object`);
      continue;
    }
    const { apiVersion, kind, metadata } = manifest as {
      apiVersion?: unknown;
      kind?: unknown;
      metadata?: { name?: unknown };
    };
    const name = `${String(kind)} ${String(metadata?.name ?? "(no name)")}`;
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      report.problems.push(`${where}: ${name}: apiVersion and kind are required`);
      continue;
    }
    const model = await modelOf(apiVersion, kind);
    if (!model) {
      report.problems.push(
        `${where}: ${name}: no Kubernetes ${SCHEMA_VERSION} schema for ${apiVersion} ${kind}`,
      );
      continue;
    }
    const present = new Set<string>();
    const read = new Set<string>();
    const before = report.problems.length;
    try {
      model.prototype.validate.call(tracked(manifest, "", present, read));
    } catch (error) {
      for (const line of String((error as Error).message).split("\n"))
        report.problems.push(`${where}: ${name}: ${line.replace(/^data/, "")}`);
    }
    for (const field of present) {
      if (!read.has(field)) report.problems.push(`${where}: ${name}: ${field}: unknown field`);
    }
    if (report.problems.length === before) report.valid.push(`${file}: ${name}`);
  }
  return report;
}

/** The model class of kubernetes-models for `apiVersion` and `kind`, or undefined. */
async function modelOf(apiVersion: string, kind: string): Promise<Validatable | undefined> {
  if (!/^[A-Za-z0-9.]+(\/[A-Za-z0-9]+)?$/.test(apiVersion) || !/^[A-Za-z0-9]+$/.test(kind)) return undefined;
  try {
    const module = (await import(`kubernetes-models/${apiVersion}/${kind}`)) as Record<string, unknown>;
    const model = module[kind] as Validatable | undefined;
    return typeof model?.prototype?.validate === "function" ? model : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The manifest behind a proxy that records the path of every field it has (`present`) and of
 * every field the validator reads (`read`): the compiled validator reads each property its schema
 * defines, and every key of a map (labels, data), so a field it never reads is unknown.
 */
function tracked(value: unknown, at: string, present: Set<string>, read: Set<string>): unknown {
  if (value === null || typeof value !== "object") return value;
  if (!Array.isArray(value)) for (const key of Object.keys(value)) present.add(`${at}/${key}`);
  return new Proxy(value, {
    get(target, key, receiver) {
      const child = Reflect.get(target, key, receiver);
      if (typeof key !== "string" || !Object.hasOwn(target, key)) return child;
      read.add(`${at}/${key}`);
      return tracked(child, `${at}/${key}`, present, read);
    },
  });
}

/** The .yaml and .yml files of the arguments (files, or directories, not recursive). */
function manifestFiles(args: string[]): string[] {
  return args.flatMap((arg) =>
    statSync(arg).isDirectory()
      ? readdirSync(arg)
          .filter((entry) => /\.ya?ml$/.test(entry))
          .sort()
          .map((entry) => path.join(arg, entry))
      : [arg],
  );
}

async function main(args: string[]): Promise<number> {
  let files: string[];
  try {
    files = manifestFiles(args.length > 0 ? args : ["deploy/k8s"]);
  } catch (error) {
    console.error(`cannot read the manifests: ${(error as Error).message}`);
    return 2;
  }
  let valid = 0;
  let problems = 0;
  for (const file of files) {
    const report = await validateManifests(readFileSync(file, "utf8"), file);
    for (const line of report.valid) console.log(`valid   ${line}`);
    for (const line of report.problems) console.error(`INVALID ${line}`);
    valid += report.valid.length;
    problems += report.problems.length;
  }
  const summary = `${valid} manifests valid against the Kubernetes ${SCHEMA_VERSION} schema (kubernetes-models, strict: no unknown fields), ${problems} problems`;
  if (problems > 0 || valid === 0) {
    console.error(valid === 0 && problems === 0 ? "no manifests found" : summary);
    return 1;
  }
  console.log(summary);
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  process.exitCode = await main(process.argv.slice(2));
}
