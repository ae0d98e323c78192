// The host of isolated task handlers (docs/isolation.md): runs in a worker thread or a child
// process started by src/isolation/hostWorker.ts, one run at a time, and speaks the protocol of
// src/isolation/protocol.ts. Plain JavaScript: Node loads it without a TypeScript loader, under tsx,
// vitest and from dist/ alike (scripts/build.mjs copies it there).
import { format } from "node:util";
import { parentPort } from "node:worker_threads";

const MAX_RESULT_CHARS = 16 * 1024;
const LEVELS = ["fatal", "error", "warn", "info", "debug", "trace"];

/** The channel to the scheduler: the worker's port, or the child's IPC. */
const channel = parentPort
  ? {
      send: (message) => parentPort.postMessage(message),
      on: (listener) => parentPort.on("message", listener),
    }
  : {
      send: (message) => process.send?.(message),
      on: (listener) => {
        process.on("message", listener);
        // the scheduler went away: nothing will ask this host for anything again
        process.on("disconnect", () => process.exit(0));
      },
    };

/** Loaded handlers by module and export: a warm host imports a module once. */
const handlers = new Map();
/** The run in progress: its id and its abort controller. */
let current;

async function loadHandler(moduleUrl, exportName) {
  const key = `${moduleUrl}#${exportName ?? ""}`;
  let handler = handlers.get(key);
  if (handler) return handler;
  const module = await import(moduleUrl);
  const names = exportName === undefined ? ["default", "handler"] : [exportName];
  const name = names.find((candidate) => typeof module[candidate] === "function");
  if (name === undefined)
    throw new Error(
      `module ${moduleUrl} has no function export ${names.map((each) => `"${each}"`).join(" or ")}; export the handler (export default async function (ctx) { ... }) or set exportName`,
    );
  handler = module[name];
  handlers.set(key, handler);
  return handler;
}

/** Plain JSON fields (errors as their name, message and stack), or undefined when there are none. */
function plainFields(fields) {
  try {
    const json = JSON.stringify(fields, (_key, value) =>
      value instanceof Error ? { type: value.name, message: value.message, stack: value.stack } : value,
    );
    return json === undefined ? undefined : JSON.parse(json);
  } catch {
    return { fields: "[unserialisable fields]" };
  }
}

/** A line in pino's call shapes: (msg, ...args), (obj, msg?, ...args), (error, msg?). */
function lineOf(args, bindings) {
  const [first, ...rest] = args;
  let msg;
  let data = { ...bindings };
  if (typeof first === "string") msg = format(first, ...rest);
  else if (first instanceof Error) {
    const [text, ...more] = rest;
    msg = typeof text === "string" ? format(text, ...more) : first.message;
    data.err = first;
  } else if (typeof first === "object" && first !== null) {
    const [text, ...more] = rest;
    const { msg: ownMsg, ...fields } = first;
    msg = typeof text === "string" ? format(text, ...more) : typeof ownMsg === "string" ? ownMsg : "";
    data = { ...data, ...fields };
  } else msg = first === undefined ? "" : String(first);
  return { msg, data: Object.keys(data).length > 0 ? plainFields(data) : undefined };
}

function send(id, level, args, bindings) {
  const { msg, data } = lineOf(args, bindings);
  channel.send(data === undefined ? { type: "log", id, level, msg } : { type: "log", id, level, msg, data });
}

/** `ctx.logger`: pino's level methods and child(), whose lines go to the run's logger in the scheduler. */
function runLogger(id, bindings = {}) {
  const logger = { child: (more) => runLogger(id, { ...bindings, ...more }), isLevelEnabled: () => true };
  for (const level of LEVELS) logger[level] = (...args) => send(id, level, args, bindings);
  return logger;
}

// console output is the run's log too (redacted by the scheduler); outside a run, the host's
const consoleLevels = {
  log: "info",
  info: "info",
  warn: "warn",
  error: "error",
  debug: "debug",
  trace: "trace",
};
for (const [method, level] of Object.entries(consoleLevels)) {
  console[method] = (...args) =>
    channel.send({ type: "log", id: current?.id ?? null, level, msg: format(...args) });
}

/** The host's whole environment during a run is the run's secrets, nothing else. */
function setEnvironment(secrets) {
  for (const key of Object.keys(process.env)) delete process.env[key];
  Object.assign(process.env, secrets);
}

function wireError(thrown) {
  if (thrown instanceof Error) return { name: thrown.name, message: thrown.message, stack: thrown.stack };
  return {
    name: "Error",
    message: typeof thrown === "string" ? thrown : (JSON.stringify(thrown) ?? String(thrown)),
    stack: undefined,
  };
}

function resultOf(value) {
  if (value === undefined) return undefined;
  const json = JSON.stringify(value);
  if (json === undefined) return undefined;
  if (json.length > MAX_RESULT_CHARS)
    return { notKept: `a return value of ${json.length} characters of JSON (over ${MAX_RESULT_CHARS})` };
  return JSON.parse(json);
}

async function run(message) {
  const controller = new AbortController();
  current = { id: message.id, controller };
  setEnvironment(message.secrets);
  const context = {
    ...message.context,
    signal: controller.signal,
    logger: runLogger(message.id),
    secrets: Object.freeze({ ...message.secrets }),
  };
  try {
    const handler = await loadHandler(message.moduleUrl, message.exportName);
    const value = resultOf(await handler(context));
    channel.send({ type: "done", id: message.id, ok: true, value });
  } catch (thrown) {
    channel.send({ type: "done", id: message.id, ok: false, error: wireError(thrown) });
  } finally {
    setEnvironment({});
    current = undefined;
  }
}

// the scheduler hands this host its first run once it says so (src/isolation/hostPool.ts)
channel.send({ type: "ready" });

channel.on((message) => {
  if (message?.type === "run") void run(message);
  else if (message?.type === "abort" && current?.id === message.id)
    current.controller.abort(new Error(message.reason));
});
