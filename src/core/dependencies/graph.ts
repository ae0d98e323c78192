/**
 * The dependency graph's validation (docs/dependencies.md, "Validation"), pure and iterative (a
 * chain thousands of tasks long must not overflow the stack). Each problem rejects one task; the
 * tasks that wait on a rejected one are rejected in turn, naming it; the rest stand.
 */

export interface GraphNode {
  name: string;
  /** Upstream names; undefined for a task with a cron of its own. */
  after?: readonly string[] | undefined;
  /** A task with a cron of its own: its schedule. */
  cron?: string | undefined;
  timezone?: string | undefined;
}

/** The slots a downstream runs for: its upstreams' shared schedule, inherited along the chain. */
export interface SlotSchedule {
  cron: string;
  timezone: string;
}

export interface GraphCheck {
  /** Rejected tasks with their reason. */
  problems: Map<string, string>;
  /** Every accepted task's slot schedule (its own, or inherited). */
  schedules: Map<string, SlotSchedule>;
  /** Accepted downstreams by upstream name (fan-out), in config order. */
  downstreams: Map<string, string[]>;
}

export interface GraphOptions {
  /**
   * Why an upstream that is not a node is missing (rejected in the same document, not registered);
   * default: not in the config.
   */
  describeMissing?: (name: string) => string | undefined;
}

export function checkDependencyGraph(nodes: readonly GraphNode[], options: GraphOptions = {}): GraphCheck {
  const byName = new Map<string, GraphNode>();
  for (const node of nodes) byName.set(node.name, node);
  const problems = new Map<string, string>();
  const schedules = new Map<string, SlotSchedule>();

  // what Kahn's order never reaches is on or behind a cycle
  const order = topologicalOrder(byName);
  const ordered = new Set(order);
  const unordered = [...byName.keys()].filter((name) => !ordered.has(name));
  for (const start of unordered) {
    if (problems.has(start)) continue;
    // every unordered node has an unordered upstream: walking them must come back to a node seen
    const path: string[] = [];
    const seenAt = new Map<string, number>();
    let current: string | undefined = start;
    while (current !== undefined && !seenAt.has(current) && !problems.has(current)) {
      seenAt.set(current, path.length);
      path.push(current);
      const node = byName.get(current);
      current = (node?.after ?? []).find((up) => byName.has(up) && !ordered.has(up));
    }
    if (current === undefined || problems.has(current)) continue;
    const cycle = path.slice(seenAt.get(current));
    for (const [index, name] of cycle.entries()) {
      const chain = [...cycle.slice(index), ...cycle.slice(0, index), name];
      problems.set(
        name,
        `cycle ${chain.join(" -> ")}: a task cannot wait for itself; remove one of these "after" links`,
      );
    }
  }
  // what stands behind a cycle, in an order where upstreams come first
  const behindCycles = unordered.filter((name) => !problems.has(name));
  for (let changed = true; changed; ) {
    changed = false;
    for (const name of behindCycles) {
      if (problems.has(name)) continue;
      const rejected = (byName.get(name)?.after ?? []).find((up) => problems.has(up));
      if (rejected) {
        problems.set(name, rejectedUpstream(name, rejected));
        changed = true;
      }
    }
  }

  for (const name of order) {
    const node = byName.get(name) as GraphNode;
    if (node.after === undefined) {
      if (node.cron !== undefined) schedules.set(name, { cron: node.cron, timezone: node.timezone ?? "UTC" });
      continue;
    }
    const problem = checkDownstream(node, byName, problems, schedules, options);
    if (typeof problem === "string") problems.set(name, problem);
    else schedules.set(name, problem);
  }

  const downstreams = new Map<string, string[]>();
  for (const node of nodes) {
    if (node.after === undefined || problems.has(node.name) || byName.get(node.name) !== node) continue;
    for (const up of new Set(node.after)) append(downstreams, up, node.name);
  }
  return { problems, schedules, downstreams };
}

/** Kahn's order over the edges between nodes, upstreams first; a node on or behind a cycle is not in it. */
function topologicalOrder(byName: ReadonlyMap<string, GraphNode>): string[] {
  const waitingOn = new Map<string, number>();
  const dependents = new Map<string, string[]>();
  for (const node of byName.values()) {
    const ups = [...new Set(node.after ?? [])].filter((up) => byName.has(up));
    waitingOn.set(node.name, ups.length);
    for (const up of ups) append(dependents, up, node.name);
  }
  const order: string[] = [];
  const ready = [...waitingOn].filter(([, count]) => count === 0).map(([name]) => name);
  while (ready.length > 0) {
    const name = ready.pop() as string;
    order.push(name);
    for (const dependent of dependents.get(name) ?? []) {
      const left = (waitingOn.get(dependent) ?? 0) - 1;
      waitingOn.set(dependent, left);
      if (left === 0) ready.push(dependent);
    }
  }
  return order;
}

function checkDownstream(
  node: GraphNode,
  byName: ReadonlyMap<string, GraphNode>,
  problems: ReadonlyMap<string, string>,
  schedules: ReadonlyMap<string, SlotSchedule>,
  options: GraphOptions,
): string | SlotSchedule {
  const after = node.after ?? [];
  if (after.length === 0)
    return 'is empty: list at least one upstream task, or remove "after" and give the task a cron';
  if (node.cron !== undefined)
    return `is given together with cron "${node.cron}": a downstream runs for its upstreams' slots; remove one of the two`;
  const listed = new Set<string>();
  const duplicate = after.find((up) => {
    if (listed.has(up)) return true;
    listed.add(up);
    return false;
  });
  if (duplicate) return `lists "${duplicate}" twice; list each upstream once`;
  for (const up of after) {
    if (!byName.has(up)) {
      const why = options.describeMissing?.(up) ?? "is not in the config";
      return `upstream "${up}" ${why}: ${node.name} cannot wait for it; fix the name or add the task`;
    }
    if (problems.has(up)) return rejectedUpstream(node.name, up);
  }
  const seen = new Map<string, string[]>();
  for (const up of after) {
    const schedule = schedules.get(up);
    if (!schedule) return `upstream "${up}" has no schedule: ${node.name} cannot tell which slots to run`;
    const key = `"${schedule.cron}" (${schedule.timezone})`;
    append(seen, key, up);
  }
  if (seen.size > 1)
    return `upstreams run on different schedules: ${[...seen]
      .slice(0, 5)
      .map(
        ([key, names]) =>
          `${names.slice(0, 5).join(", ")}${names.length > 5 ? ` and ${names.length - 5} more` : ""} on ${key}`,
      )
      .join(
        "; ",
      )}; a downstream runs for one shared slot, so all its upstreams need the same cron and timezone`;
  return schedules.get(after[0] as string) as SlotSchedule;
}

function rejectedUpstream(name: string, upstream: string): string {
  return `upstream "${upstream}" is rejected (see its entry), so ${upstream} -> ${name} cannot apply`;
}

/** Adds to a map of lists in place (a spread per call would be quadratic on a wide fan-out). */
function append<K>(map: Map<K, string[]>, key: K, value: string): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
