import type { DependencyCondition } from "./spec.js";

/**
 * Where an upstream stands for one slot: its final outcome, `pending` (not settled yet: not
 * started, running, or between retries), or `disabled` (its job is disabled: it will not run it).
 */
export type UpstreamStanding = "succeeded" | "failed" | "skipped" | "pending" | "disabled";

export interface UpstreamState {
  name: string;
  standing: UpstreamStanding;
}

/** Why a downstream does not run for a slot; `kind` is the metrics label. */
export type SkipKind =
  | "upstream_failed"
  | "upstream_skipped"
  | "upstream_disabled"
  | "no_upstream_failed"
  | "upstream_not_done"
  | "dependency_removed";

export type DependencyDecision =
  | { kind: "wait"; pending: string[] }
  | { kind: "run" }
  | { kind: "skip"; skip: SkipKind; reason: string };

/**
 * The pure decision for one downstream and one slot (docs/dependencies.md): wait while an upstream
 * is pending; a disabled upstream ends the wait at once; otherwise `when` decides.
 */
export function decideDependency(
  when: DependencyCondition,
  upstreams: readonly UpstreamState[],
): DependencyDecision {
  const disabled = upstreams.find((upstream) => upstream.standing === "disabled");
  if (disabled)
    return { kind: "skip", skip: "upstream_disabled", reason: `upstream ${disabled.name} disabled` };
  const pending = upstreams.filter((upstream) => upstream.standing === "pending").map((u) => u.name);
  if (pending.length > 0) return { kind: "wait", pending };
  switch (when) {
    case "allDone":
      return { kind: "run" };
    case "anyFailed":
      return upstreams.some((upstream) => upstream.standing === "failed")
        ? { kind: "run" }
        : { kind: "skip", skip: "no_upstream_failed", reason: "no upstream failed (when: anyFailed)" };
    case "allSucceeded": {
      const failed = upstreams.find((upstream) => upstream.standing === "failed");
      if (failed) return { kind: "skip", skip: "upstream_failed", reason: `upstream ${failed.name} failed` };
      const skipped = upstreams.find((upstream) => upstream.standing === "skipped");
      if (skipped)
        return { kind: "skip", skip: "upstream_skipped", reason: `upstream ${skipped.name} skipped` };
      return { kind: "run" };
    }
  }
}

/** The reason of a wait that outlived `waitAtMost` (the wording: `upstream not done within 3h`). */
export function notDoneReason(waitAtMost: string): string {
  return `upstream not done within ${waitAtMost}`;
}
