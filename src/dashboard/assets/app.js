// cronwarden dashboard: a read-only view of the admin API (plus run-now). No build step, no CDN.
import { drawDeathMarks, loadDeathMarks, opsSection, opsView, refreshBanner } from "./ops.js";
import {
  attachShardProgress,
  bucketShardLine,
  drawShardProgress,
  loadShardProgress,
  shardLine,
  shardSection,
} from "./shards.js";

const REFRESH_MS = 5000;
const TOKEN_KEY = "cronwarden-admin-token";
const view = document.getElementById("view");
const errorBox = document.getElementById("error");
const refreshed = document.getElementById("refreshed");
const tokenInput = document.getElementById("token");
const state = { filter: "", show: "all", sort: "name", descending: false };
let timer;

tokenInput.value = sessionStorage.getItem(TOKEN_KEY) ?? "";
document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, tokenInput.value.trim());
  render();
});

const REQUEST_TIMEOUT_MS = 15_000;

async function api(path, options = {}) {
  return (await apiAnswer(path, options)).body;
}

async function apiAnswer(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = {
    accept: "application/json",
    ...options.headers,
    ...(token ? { authorization: `Bearer ${token}` } : {}),
  };
  // bounded: renders run one at a time, and a request that never answers would hold the next ones
  const response = await fetch(path, {
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    ...options,
    headers,
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(body.error ?? `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return { body, headers: response.headers };
}

// ---------- formatting ----------
const html = (value) =>
  String(value ?? "").replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c],
  );

function cronWords(cron) {
  if (!cron) return "";
  // an `every:` interval, stored as "15 minutes" (docs/behaviour.md)
  if (/^\d+ (second|minute|hour|day)s?$/.test(cron)) return `every ${cron}, from the Unix epoch`;
  try {
    return globalThis.cronstrue.toString(cron, { use24HourTimeFormat: true, verbose: false });
  } catch {
    return "";
  }
}

function relative(iso) {
  if (!iso) return "";
  const seconds = Math.round((Date.parse(iso) - Date.now()) / 1000);
  const abs = Math.abs(seconds);
  const [value, unit] =
    abs < 60
      ? [abs, "s"]
      : abs < 3600
        ? [Math.round(abs / 60), "min"]
        : abs < 86400
          ? [Math.round(abs / 3600), "h"]
          : [Math.round(abs / 86400), "d"];
  return seconds >= 0 ? `in ${value} ${unit}` : `${value} ${unit} ago`;
}

function at(iso, timeZone) {
  if (!iso) return "";
  const format = (zone) =>
    new Intl.DateTimeFormat(undefined, {
      dateStyle: "medium",
      timeStyle: "medium",
      ...(zone ? { timeZone: zone } : {}),
    }).format(new Date(iso));
  const viewer = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const local = format(undefined);
  if (!timeZone || timeZone === viewer) return `${local} <span class="small">(${html(viewer)})</span>`;
  return `${format(timeZone)} <span class="small">(${html(timeZone)})</span><br><span class="small">${local} (you)</span>`;
}

const badge = (text, kind = text) =>
  text
    ? `<span class="badge ${html(kind)}">${GLYPHS[kind] ? `${GLYPHS[kind]} ` : ""}${html(text)}</span>`
    : "";
// every state has a symbol as well as a colour (the timeline draws the same shapes)
const GLYPHS = {
  succeeded: "\u25A0",
  failed: "\u25B2",
  interrupted: "\u25C6",
  "lock-lost": "\u25C6",
  skipped: "\u25CB",
  missed: "\u2715",
  running: "\u25B6",
  upcoming: "\u25CC",
};
const glyph = (outcome) => GLYPHS[outcome] ?? "";
/** What the failure count means: slots (a slot's final attempt), with the attempts beside them. */
const FAILED_SLOTS_HINT =
  "failed slots since the last succeeded one, from the run log (a slot counts once, by its final attempt after retries; skipped and interrupted slots neither count nor break it)";
const failureWords = (task) => {
  const slots = task.consecutiveFailures ?? 0;
  const attempts = task.consecutiveFailedAttempts ?? slots;
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  return `${plural(slots, "failed slot")} in a row${slots ? ` (${plural(attempts, "attempt")})` : ""}`;
};
const strip = (outcomes) =>
  `<span class="strip" title="outcomes of the recent slots, newest first (a slot's final attempt)">${outcomes.map((o) => `<i class="${html(o)}" title="${html(o)}">${glyph(o)}</i>`).join("")}</span>`;
const duration = (ms) => (ms == null ? "" : ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`);

function enabledCell(task) {
  const pause = task.job?.pausedByFailure;
  if (pause)
    return `<span title="${html(`paused ${pause.at} after ${pause.failures} failed slot(s)${pause.lastError ? `: ${pause.lastError}` : ""}`)}">${badge("paused by failure", "failed")}</span>`;
  const live = task.job ? task.job.enabled : null;
  const wanted = task.configured ? task.configured.enabled : null;
  const text = live === null ? "no job" : live ? "on" : "off";
  const mismatch = wanted !== null && live !== null && wanted !== live;
  return badge(text, live ? "on" : "") + (mismatch ? ` ${badge("differs from config", "warn")}` : "");
}

// ---------- views ----------
async function tasksView() {
  const tasks = await api("/tasks");
  const needle = state.filter.toLowerCase();
  const shown = tasks
    .filter((task) => task.name.toLowerCase().includes(needle))
    .filter((task) =>
      state.show === "all"
        ? true
        : state.show === "enabled"
          ? task.job?.enabled
          : state.show === "disabled"
            ? !task.job?.enabled
            : state.show === "paused"
              ? Boolean(task.job?.pausedByFailure)
              : state.show === "failing"
                ? task.lastOutcome === "failed"
                : task.running,
    )
    .sort((a, b) => {
      const key = (task) =>
        state.sort === "next"
          ? (task.job?.nextRunAt ?? "~")
          : state.sort === "failures"
            ? task.consecutiveFailures
            : task.name;
      const [x, y] = [key(a), key(b)];
      const order = x < y ? -1 : x > y ? 1 : 0;
      return state.descending ? -order : order;
    });
  const rows = shown
    .map((task) => {
      const cron = task.job?.cron ?? task.configured?.cron;
      const zone = task.job?.timezone ?? task.configured?.timezone;
      return `<tr data-task="${html(task.name)}">
        <td><a href="#/tasks/${encodeURIComponent(task.name)}">${html(task.name)}</a>${task.registered ? "" : ` ${badge("not registered", "warn")}`}${task.running ? `<span class="narrow-only"> ${badge("running", "running")}</span>` : ""}</td>
        <td>${enabledCell(task)}</td>
        <td class="opt">${
          task.dependencies?.upstreams?.length
            ? `after ${html(task.dependencies.upstreams.join(", "))}<br><span class="small">slots of <code>${html(cron ?? "")}</code></span>`
            : `${html(cronWords(cron))}<br><code>${html(cron ?? "")}</code>`
        }</td>
        <td class="wide">${html(zone ?? "")}</td>
        <td class="opt">${task.job?.nextRunAt ? `${html(relative(task.job.nextRunAt))}<br><span class="small">${at(task.job.nextRunAt, zone)}</span>` : task.job?.completed ? "completed (one-shot)" : ""}</td>
        <td class="outcome">${badge(task.lastOutcome ?? "")}</td>
        <td class="running opt">${task.running ? badge(`running on ${task.runningOn ?? "?"}`, "running") : ""}</td>
        <td class="opt" title="${html(failureWords(task))}">${task.consecutiveFailures || ""}</td>
        <td class="wide">${strip(task.recentOutcomes ?? [])}</td>
      </tr>`;
    })
    .join("");
  view.innerHTML = `<h1>Tasks</h1>
    <div class="toolbar">
      <input id="filter" type="search" placeholder="Filter by name" value="${html(state.filter)}" aria-label="Filter by name">
      <select id="show" aria-label="Show">
        ${["all", "enabled", "disabled", "paused", "failing", "running"].map((value) => `<option ${state.show === value ? "selected" : ""}>${value}</option>`).join("")}
      </select>
    </div>
    <div class="scroll"><table id="tasks">
      <thead><tr>
        <th data-sort="name" tabindex="0">Task</th><th>Enabled</th><th class="opt">Schedule</th><th class="wide">Timezone</th>
        <th data-sort="next" class="opt" tabindex="0">Next run</th><th>Last outcome</th><th class="opt">Running</th><th data-sort="failures" class="opt" tabindex="0" title="${html(FAILED_SLOTS_HINT)}">Failed slots</th><th class="wide">Recent</th>
      </tr></thead>
      <tbody>${rows || `<tr><td colspan="9">No task matches.</td></tr>`}</tbody>
    </table></div>`;
  const filter = document.getElementById("filter");
  filter.addEventListener("input", () => {
    state.filter = filter.value;
    render().then(() => {
      const again = document.getElementById("filter");
      again.focus();
      again.setSelectionRange(again.value.length, again.value.length);
    });
  });
  document.getElementById("show").addEventListener("change", (event) => {
    state.show = event.target.value;
    render();
  });
  for (const th of view.querySelectorAll("th[data-sort]")) {
    const sort = () => {
      state.descending = state.sort === th.dataset.sort ? !state.descending : false;
      state.sort = th.dataset.sort;
      render();
    };
    th.addEventListener("click", sort);
    th.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        sort();
      }
    });
  }
}

const HISTORY_PAGE = 25;

async function taskView(name, params) {
  const filters = new URLSearchParams();
  for (const key of ["outcome", "trigger", "from", "to"])
    if (params.get(key)) filters.set(key, params.get(key));
  const cursor = params.get("cursor");
  const query = new URLSearchParams(filters);
  query.set("limit", String(HISTORY_PAGE));
  if (cursor) query.set("cursor", cursor);
  const [task, answer, config, chain, backfills] = await Promise.all([
    api(`/tasks/${encodeURIComponent(name)}`),
    apiAnswer(`/tasks/${encodeURIComponent(name)}/runs?${query}`),
    api("/config"),
    api(`/chains?task=${encodeURIComponent(name)}&limit=60`),
    api(`/backfills?task=${encodeURIComponent(name)}&limit=10`).catch(() => []),
  ]);
  const deps = task.dependencies ?? { upstreams: [], downstreams: [] };
  const taskLinks = (names) =>
    names.map((other) => `<a href="#/tasks/${encodeURIComponent(other)}">${html(other)}</a>`).join(", ");
  const runs = answer.body;
  const nextCursor = answer.headers.get("x-next-cursor");
  const zone = task.job?.timezone ?? task.configured?.timezone;
  const rejected = (config.desired?.rejected ?? []).filter((entry) => entry.name === name);
  const canRun = task.registered && task.job?.enabled && !task.running;
  const pause = task.job?.pausedByFailure;
  const link = (extra) => {
    const next = new URLSearchParams(filters);
    for (const [key, value] of Object.entries(extra)) if (value) next.set(key, value);
    const text = next.toString();
    return `#/tasks/${encodeURIComponent(name)}${text ? `?${text}` : ""}`;
  };
  const history = runs
    .map(
      (run) => `<tr data-run="${html(run.id)}">
        <td><a href="#/runs/${html(run.id)}">${at(run.scheduledAt, zone)}</a></td>
        <td class="opt">${run.startedAt ? `${html(relative(run.startedAt))}${run.latenessMs > 1000 && run.trigger !== "rerun" && run.trigger !== "backfill" ? `<br><span class="small">${html(duration(run.latenessMs))} late</span>` : ""}` : ""}</td>
        <td>${html(duration(run.durationMs))}</td>
        <td>${badge(run.outcome)}${run.final === false ? ' <span class="small">retried</span>' : ""}</td>
        <td class="opt">${run.attempt ?? ""}</td>
        <td class="wide">${html(run.trigger ?? "")}${run.requestedBy ? ` by ${html(run.requestedBy)}` : ""}${run.rerun ? " (re-run)" : ""}</td>
        <td class="wide">${html(run.instanceId ?? "")}</td>
        <td class="error-text">${html(run.error ?? run.detail ?? "")}</td>
      </tr>`,
    )
    .join("");
  const select = (id, label, options, value) =>
    `<label>${label} <select id="${id}">${options.map((option) => `<option value="${option === "all" ? "" : option}" ${value === option ? "selected" : ""}>${option}</option>`).join("")}</select></label>`;
  view.innerHTML = `<h1>${html(task.name)} ${task.running ? badge(`running on ${task.runningOn ?? "?"}`, "running") : ""}</h1>
    ${task.description ? `<p>${html(task.description)}</p>` : ""}
    <p><button id="run-now" class="primary" ${canRun ? "" : "disabled"}>Run now</button>
      ${deps.downstreams.length ? `<label class="small"><input id="with-downstream" type="checkbox"> with its downstream tasks</label>` : ""}
      <span id="run-result" class="small">${canRun ? "" : task.running ? "running now" : !task.registered ? "not registered in this service" : pause ? "paused by failure" : "disabled in the config"}</span>
      <a href="#/timeline?tasks=${encodeURIComponent(name)}">Timeline</a></p>
    ${
      pause
        ? `<p id="paused" class="error-text" title="the streak the pause was decided on, counted in slots by each slot's final save">Paused by failure ${at(pause.at, zone)} after ${html(String(pause.failures))} failed slot(s) in a row${pause.lastError ? `: ${html(pause.lastError)}` : ""}. It runs again when its config entry changes, or
      <button id="resume">Resume</button> <span id="resume-result" class="small"></span></p>`
        : ""
    }
    <dl>
      <dt>Enabled</dt><dd>${enabledCell(task)}</dd>
      <dt>Schedule</dt><dd>${
        deps.upstreams.length
          ? `after its upstreams, for their slots: ${html(cronWords(task.configured?.cron))} <code>${html(task.configured?.cron ?? "")}</code> ${html(task.configured?.timezone ?? "")}`
          : `${html(cronWords(task.job?.cron))} <code>${html(task.job?.cron ?? "")}</code> ${html(zone ?? "")}`
      }</dd>
      ${deps.upstreams.length ? `<dt>Upstream</dt><dd id="upstreams">runs after ${taskLinks(deps.upstreams)} when <code>${html(deps.when)}</code>${deps.waitAtMost ? `, waits at most ${html(deps.waitAtMost)}` : ""}</dd>` : ""}
      ${deps.downstreams.length ? `<dt>Downstream</dt><dd id="downstreams">${taskLinks(deps.downstreams)} run${deps.downstreams.length === 1 ? "s" : ""} after this task</dd>` : ""}
      <dt>Config entry</dt><dd>${task.configured ? `<code>${html(JSON.stringify(task.configured))}</code>` : "none (not in the config)"}</dd>
      ${rejected.map((entry) => `<dt>Rejected entry</dt><dd class="error-text">${html(entry.field)} ${html(JSON.stringify(entry.value))}: ${html(entry.reason)}</dd>`).join("")}
      <dt>Last outcome</dt><dd>${badge(task.lastOutcome ?? "")} ${task.lastError ? `<span class="error-text">${html(task.lastError)}</span>` : ""}</dd>
      <dt title="${html(FAILED_SLOTS_HINT)}">Failed slots in a row</dt><dd id="failed-slots">${html(failureWords(task))}</dd>
      <dt>Next runs</dt><dd>${(task.nextRuns ?? []).map((time) => `${at(time, zone)}`).join("<br>") || "none"}</dd>
    </dl>
    ${chainSection(chain, zone)}
    ${backfillSection(task, backfills, deps)}
    <h2>History</h2>
    <form id="history-filter" class="toolbar">
      ${select("f-outcome", "Outcome", ["all", "succeeded", "failed", "skipped", "interrupted", "lock-lost"], params.get("outcome") ?? "all")}
      ${select("f-trigger", "Trigger", ["all", "schedule", "manual", "rerun", "backfill"], params.get("trigger") ?? "all")}
      <label>From <input id="f-from" type="datetime-local" value="${html(localInput(params.get("from")))}"></label>
      <label>To <input id="f-to" type="datetime-local" value="${html(localInput(params.get("to")))}"></label>
      <button type="submit">Filter</button>
    </form>
    <div class="scroll"><table id="history" data-cursor="${html(cursor ?? "")}">
      <thead><tr><th>Slot</th><th class="opt">Started</th><th>Duration</th><th>Outcome</th><th class="opt">Attempt</th><th class="wide">Trigger</th><th class="wide">Instance</th><th>Error</th></tr></thead>
      <tbody>${history || `<tr><td colspan="8">No runs${filters.toString() ? " match" : " yet"}.</td></tr>`}</tbody>
    </table></div>
    <p class="pager">
      ${cursor ? `<a id="history-newest" href="${link({})}">Newest</a>` : ""}
      ${nextCursor ? `<a id="history-older" href="${link({ cursor: nextCursor })}">Older runs</a>` : `<span id="history-end" class="small">${runs.length ? "oldest run reached" : ""}</span>`}
    </p>`;
  document.getElementById("history-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    const value = (id) => document.getElementById(id).value;
    if (value("f-outcome")) next.set("outcome", value("f-outcome"));
    if (value("f-trigger")) next.set("trigger", value("f-trigger"));
    if (value("f-from")) next.set("from", new Date(value("f-from")).toISOString());
    if (value("f-to")) next.set("to", new Date(value("f-to")).toISOString());
    location.hash = `#/tasks/${encodeURIComponent(name)}${next.toString() ? `?${next}` : ""}`;
  });
  document.getElementById("resume")?.addEventListener("click", async (event) => {
    const button = event.currentTarget;
    const result = document.getElementById("resume-result");
    button.disabled = true;
    try {
      await api(`/tasks/${encodeURIComponent(name)}/resume`, { method: "POST" });
      result.textContent = "resumed";
      setTimeout(render, 500);
    } catch (error) {
      result.textContent =
        error.status === 401 || error.status === 403
          ? `refused: ${error.message} (enter an operator token above)`
          : error.message;
      button.disabled = false;
    }
  });
  document.getElementById("run-now").addEventListener("click", async (event) => {
    const button = event.currentTarget;
    const result = document.getElementById("run-result");
    button.disabled = true;
    try {
      const withDownstream = document.getElementById("with-downstream")?.checked === true;
      await api(`/tasks/${encodeURIComponent(name)}/run${withDownstream ? "?withDownstream=true" : ""}`, {
        method: "POST",
      });
      result.textContent = withDownstream ? "run requested, with its downstream tasks" : "run requested";
      setTimeout(render, 500);
    } catch (error) {
      result.textContent =
        error.status === 401 || error.status === 403
          ? `refused: ${error.message} (enter an operator token above)`
          : error.message;
      button.disabled = false;
    }
  });
  wireBackfill(name);
  // an older page stays put (no refresh moves it)
  return { refresh: !cursor };
}

// ---------- re-run a slot, backfill a range (docs/operations.md) ----------
const refusal = (error) =>
  error.status === 401 || error.status === 403
    ? `refused: ${error.message} (enter an operator token above)`
    : error.message;

/** The task page's backfill form and its recent backfills with their progress. */
function backfillSection(task, backfills, deps) {
  const hasSchedule = Boolean(task.job?.cron) && deps.upstreams.length === 0;
  const rows = backfills
    .map((backfill) => {
      const slots = backfill.slots;
      const done = slots.succeeded + slots.failed + slots.skipped + slots.cancelled;
      return `<tr data-backfill="${html(backfill.id)}">
        <td>${at(backfill.from)} &ndash; ${at(backfill.to)}</td>
        <td>${badge(backfill.state, backfill.state === "done" ? "succeeded" : backfill.state === "cancelled" ? "skipped" : "running")}</td>
        <td><progress max="${slots.total}" value="${done}"></progress>
          <span class="backfill-progress small">${done}/${slots.total} done: ${slots.succeeded} succeeded, ${slots.failed} failed, ${slots.skipped} skipped, ${slots.cancelled} cancelled, ${slots.running} running</span></td>
        <td class="wide">${html(backfill.requestedBy)}${backfill.reason ? `: ${html(backfill.reason)}` : ""}</td>
        <td>${backfill.state === "running" ? `<button class="backfill-cancel" data-id="${html(backfill.id)}">Cancel</button>` : ""}</td>
      </tr>`;
    })
    .join("");
  if (!hasSchedule && !rows) return "";
  return `<h2>Backfill</h2>
    ${
      hasSchedule
        ? `<form id="backfill-form" class="toolbar">
      <label>From <input id="bf-from" type="datetime-local" required></label>
      <label>To <input id="bf-to" type="datetime-local" required></label>
      <label>Slots <select id="bf-mode"><option value="missing">only missing</option><option value="all">all</option></select></label>
      <label>At a time <input id="bf-concurrency" type="number" min="1" max="100" value="1"></label>
      ${deps.downstreams.length ? `<label class="small"><input id="bf-downstream" type="checkbox"> with its downstream tasks</label>` : ""}
      <label>Reason <input id="bf-reason" type="text" maxlength="500"></label>
      <button type="submit" id="bf-dry-run" value="dry">Dry run</button>
      <button type="submit" id="bf-start" class="primary" value="start">Start backfill</button>
      <span id="bf-result" class="small" aria-live="polite"></span>
    </form>
    <div id="bf-plan"></div>`
        : ""
    }
    ${rows ? `<div class="scroll"><table id="backfills"><thead><tr><th>Range</th><th>State</th><th>Progress</th><th class="wide">By</th><th></th></tr></thead><tbody>${rows}</tbody></table></div>` : ""}`;
}

function wireBackfill(name) {
  const form = document.getElementById("backfill-form");
  form?.addEventListener("submit", async (event) => {
    event.preventDefault();
    const dryRun = event.submitter?.value === "dry";
    const value = (id) => document.getElementById(id)?.value ?? "";
    const result = document.getElementById("bf-result");
    const body = {
      from: new Date(value("bf-from")).toISOString(),
      to: new Date(value("bf-to")).toISOString(),
      mode: value("bf-mode"),
      concurrency: Number(value("bf-concurrency") || 1),
      withDownstream: document.getElementById("bf-downstream")?.checked === true,
      ...(value("bf-reason") ? { reason: value("bf-reason") } : {}),
      ...(dryRun ? { dryRun: true } : {}),
    };
    try {
      const answer = await api(`/tasks/${encodeURIComponent(name)}/backfills`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      if (dryRun) {
        result.textContent = `${answer.run} slot(s) would run, ${answer.skip} skipped (nothing started)`;
        document.getElementById("bf-plan").innerHTML =
          `<div class="scroll"><table id="bf-slots"><thead><tr><th>Slot</th><th>Would</th></tr></thead><tbody>${answer.slots
            .slice(0, 500)
            .map(
              (slot) =>
                `<tr><td>${at(slot.slot)}</td><td>${slot.state === "pending" ? "run" : html(`skip: ${slot.detail ?? ""}`)}</td></tr>`,
            )
            .join("")}</tbody></table></div>`;
        return;
      }
      result.textContent = `backfill started: ${answer.slots.pending} slot(s) to run`;
      setTimeout(render, 300);
    } catch (error) {
      result.textContent = refusal(error);
    }
  });
  for (const button of document.querySelectorAll(".backfill-cancel"))
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        await api(`/backfills/${encodeURIComponent(button.dataset.id)}/cancel`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{}",
        });
        render();
      } catch (error) {
        button.insertAdjacentText("afterend", ` ${refusal(error)}`);
        button.disabled = false;
      }
    });
}

/** The run page's re-run form: the slot runs again under its own identity (a succeeded one with force). */
function rerunSection(run) {
  if (!run.slot || run.outcome === "running" || run.outcome === "missed") return "";
  const succeeded = run.outcome === "succeeded";
  return `<h2>Re-run this slot</h2>
    <form id="rerun-form" class="toolbar">
      ${succeeded ? `<label class="small"><input id="rerun-force" type="checkbox"> it succeeded: run it again all the same</label>` : ""}
      <label class="small"><input id="rerun-downstream" type="checkbox"> with its downstream tasks</label>
      <label>Reason <input id="rerun-reason" type="text" maxlength="500"></label>
      <button id="rerun" type="submit" class="primary">Re-run slot</button>
      <span id="rerun-result" class="small" aria-live="polite"></span>
    </form>`;
}

function wireRerun(run) {
  document.getElementById("rerun-form")?.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = document.getElementById("rerun");
    const result = document.getElementById("rerun-result");
    const reason = document.getElementById("rerun-reason").value;
    button.disabled = true;
    try {
      const answer = await api(
        `/tasks/${encodeURIComponent(run.task)}/slots/${encodeURIComponent(new Date(run.slot).toISOString())}/rerun`,
        {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            force: document.getElementById("rerun-force")?.checked === true,
            withDownstream: document.getElementById("rerun-downstream").checked,
            ...(reason ? { reason } : {}),
          }),
        },
      );
      result.textContent = `re-run queued: ${answer.runKey}`;
    } catch (error) {
      result.textContent = refusal(error);
      button.disabled = false;
    }
  });
}

/**
 * The per-slot view of a chain (GET /chains?task=): one row per slot, one column per task of the
 * chain, upstreams first. A downstream's cell is its wait's state; an upstream's is its outcome.
 */
function chainSection(chain, zone) {
  if (!chain || chain.tasks.length === 0) return "";
  const links = new Map(chain.tasks.map((task) => [task.name, task]));
  const depth = (name, seen = new Set()) => {
    const ups = links.get(name)?.upstreams ?? [];
    if (seen.has(name) || ups.length === 0) return 0;
    seen.add(name);
    return 1 + Math.max(...ups.map((up) => depth(up, seen)));
  };
  const names = [...links.keys()].sort((a, b) => depth(a) - depth(b) || a.localeCompare(b));
  const bySlot = new Map();
  for (const wait of chain.slots) {
    const row = bySlot.get(wait.scheduledAt) ?? new Map();
    row.set(wait.taskName, { kind: "wait", wait });
    for (const up of wait.upstreams)
      if (!row.has(up.name) || row.get(up.name).kind === "upstream")
        row.set(up.name, row.get(up.name)?.kind === "wait" ? row.get(up.name) : { kind: "upstream", up });
    bySlot.set(wait.scheduledAt, row);
  }
  const cell = (entry) => {
    if (!entry) return "&ndash;";
    if (entry.kind === "upstream")
      return entry.up.outcome
        ? badge(entry.up.outcome)
        : entry.up.disabled
          ? badge("disabled", "warn")
          : badge("running", "running");
    const wait = entry.wait;
    if (wait.state === "ran") return badge(wait.outcome ?? "succeeded");
    if (wait.state === "skipped")
      return `${badge("skipped")} <span class="small">${html(wait.reason ?? "")}</span>`;
    if (wait.state === "running") return badge("running", "running");
    if (wait.state === "queued") return badge("queued", "upcoming");
    return `${badge("waiting", "upcoming")}${wait.deadlineAt ? ` <span class="small">until ${html(new Date(wait.deadlineAt).toLocaleTimeString())}</span>` : ""}`;
  };
  const rows = [...bySlot.entries()]
    .sort(([a], [b]) => b.localeCompare(a))
    .map(
      ([slot, row]) =>
        `<tr data-slot="${html(slot)}"><td>${at(slot, zone)}${[...row.values()].some((entry) => entry.kind === "wait" && entry.wait.manual) ? ' <span class="small">manual</span>' : ""}</td>${names.map((task) => `<td data-task="${html(task)}">${cell(row.get(task))}</td>`).join("")}</tr>`,
    )
    .join("");
  return `<h2>Chain by slot</h2>
    <div class="scroll"><table id="chain">
      <thead><tr><th>Slot</th>${names.map((task) => `<th><a href="#/tasks/${encodeURIComponent(task)}">${html(task)}</a></th>`).join("")}</tr></thead>
      <tbody>${rows || `<tr><td colspan="${names.length + 1}">No slot of this chain yet.</td></tr>`}</tbody>
    </table></div>`;
}

/** An ISO time as the value of a datetime-local input (the viewer's time). */
function localInput(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const local = new Date(date.getTime() - date.getTimezoneOffset() * 60_000);
  return local.toISOString().slice(0, 16);
}

async function runView(id) {
  const run = await api(`/runs/${encodeURIComponent(id)}`);
  const shards = run.slot ? await shardSection(api, html, badge, duration, run) : "";
  const row = (label, value) => (value === "" || value == null ? "" : `<dt>${label}</dt><dd>${value}</dd>`);
  const logs = (run.logs ?? [])
    .map(
      (line) =>
        `<tr class="log-${html(line.level)}"><td class="nowrap">${html(new Date(line.at).toLocaleTimeString())}</td><td>${html(line.level)}</td><td class="log-msg">${html(line.msg)}${line.data ? `<br><code class="log-data">${html(line.data)}</code>` : ""}</td></tr>`,
    )
    .join("");
  view.innerHTML = `<p><a href="#/tasks/${encodeURIComponent(run.task)}">&larr; ${html(run.task)}</a></p>
    <h1>Run of ${html(run.task)} ${badge(run.outcome)}</h1>
    <dl id="run-facts">
      ${row("Slot", at(run.slot))}
      ${row("Started", run.startedAt ? `${at(run.startedAt)}${run.latenessMs != null ? ` <span class="small">(${html(duration(run.latenessMs))} after the slot)</span>` : ""}` : "")}
      ${row("Ended", run.finishedAt ? at(run.finishedAt) : run.outcome === "running" ? "still running" : "")}
      ${row("Duration", html(duration(run.durationMs)))}
      ${row("Attempt", run.attempt == null ? "" : `${run.attempt}${run.final ? "" : " (retried after this)"}`)}
      ${row("Trigger", `${html(run.trigger)}${run.requestedBy ? ` by ${html(run.requestedBy)}` : ""}`)}
      ${row("Instance", html(run.instanceId ?? ""))}
      ${row("Re-run of", run.rerunOf ? `the run started ${run.rerunOf.startedAt ? at(run.rerunOf.startedAt) : "?"} on ${html(run.rerunOf.instanceId ?? "an unknown instance")}${run.trigger === "rerun" ? "" : ", which never finished"}` : "")}
      ${row("Note", html(run.reason ?? ""))}
      ${row("Trace", run.traceparent ? `<code id="run-traceparent">${html(run.traceparent)}</code>` : "")}
      ${run.recordId && run.recordId !== run.id ? row("Record", `<a href="#/runs/${html(run.recordId)}">how it ended</a>`) : ""}
    </dl>
    ${run.error ? `<h2>Error</h2><p id="run-error" class="error-text">${html(run.error)}</p>` : ""}
    ${run.errorStack ? `<pre id="run-stack">${html(run.errorStack)}</pre>` : ""}
    <h2>Log lines</h2>
    <p class="small">What the handler logged through <code>ctx.logger</code> during this attempt (secrets redacted; up to 200 lines or 64 KB).</p>
    ${logs ? `<div class="scroll"><table id="run-logs"><thead><tr><th>Time</th><th>Level</th><th>Message</th></tr></thead><tbody>${logs}</tbody></table></div>` : `<p id="run-logs-none">None.</p>`}
    ${run.logsDropped ? `<p class="small" id="run-logs-dropped">${run.logsDropped} more line(s) left out (size limit).</p>` : ""}
    ${shards}
    ${rerunSection(run)}`;
  wireRerun(run);
  return { refresh: run.outcome === "running" };
}

async function configView() {
  const [config, audit] = await Promise.all([api("/config"), api("/audit?limit=50").catch(() => [])]);
  const desired = config.desired ?? {};
  const entries = (desired.tasks ?? [])
    .map(
      (task) =>
        `<tr><td>${html(task.name)}</td><td>${badge(task.enabled ? "on" : "off", task.enabled ? "on" : "")}</td><td><code>${html(task.cron)}</code> ${html(cronWords(task.cron))}</td><td>${html(task.timezone)}</td></tr>`,
    )
    .join("");
  const rejected = (desired.rejected ?? [])
    .map(
      (entry) =>
        `<tr><td>tasks[${entry.index}]</td><td>${html(entry.name ?? "")}</td><td>${html(entry.field)}</td><td><code>${html(JSON.stringify(entry.value))}</code></td><td class="error-text">${html(entry.reason)}</td></tr>`,
    )
    .join("");
  const last = config.lastReconcile;
  const applied = (last?.changes ?? [])
    .map((action) => `<li>${html(action.kind)} ${html(action.task ?? "")}: ${html(action.reason)}</li>`)
    .join("");
  const drift = audit
    .filter((entry) => entry.kind === "drift")
    .map(
      (entry) =>
        `<tr><td>${at(entry.at)}</td><td>${html(entry.task)}</td><td>${html(entry.field)}</td><td>${html(entry.oldValue ?? "-")} &rarr; ${html(entry.newValue ?? "-")}</td></tr>`,
    )
    .join("");
  view.innerHTML = `<h1>Config</h1>
    <dl><dt>Source</dt><dd>${html(desired.source ?? "none (no config read yet)")}</dd><dt>Revision</dt><dd><code>${html(desired.revision ?? "")}</code></dd></dl>
    <h2>Desired state in force</h2>
    <div class="scroll"><table id="entries"><thead><tr><th>Task</th><th>Enabled</th><th>Cron</th><th>Timezone</th></tr></thead>
      <tbody>${entries || `<tr><td colspan="4">No entries.</td></tr>`}</tbody></table></div>
    <h2>Rejected entries</h2>
    <div class="scroll"><table id="rejected"><thead><tr><th>Entry</th><th>Task</th><th>Field</th><th>Value</th><th>Reason</th></tr></thead>
      <tbody>${rejected || `<tr><td colspan="5">None.</td></tr>`}</tbody></table></div>
    <h2>Last reconcile</h2>
    <p>${last ? `${at(last.at)} (${html(last.trigger)}, revision <code>${html(last.revision)}</code>): ${last.changes?.length ?? 0} change(s)` : "none yet"}</p>
    ${applied ? `<ul>${applied}</ul>` : ""}
    <h2>Drift repairs</h2>
    <div class="scroll"><table id="drift"><thead><tr><th>When</th><th>Task</th><th>Field</th><th>Change</th></tr></thead>
      <tbody>${drift || `<tr><td colspan="4">None.</td></tr>`}</tbody></table></div>`;
}

// ---------- timeline ----------
const RANGES = { "1h": 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000 };
const ROW = 22;
const AXIS = 26;
const OUTCOMES = ["succeeded", "failed", "interrupted", "skipped", "missed", "running", "upcoming"];
const timeline = { marks: [], rows: [], from: 0, to: 0, selected: null };

function palette() {
  const style = getComputedStyle(document.documentElement);
  const get = (name) => style.getPropertyValue(name).trim();
  return {
    succeeded: get("--ok"),
    failed: get("--fail"),
    interrupted: get("--interrupted"),
    skipped: get("--skip"),
    missed: get("--missed"),
    running: get("--run"),
    upcoming: get("--muted"),
    line: get("--line"),
    text: get("--muted"),
    bg: get("--surface"),
    now: get("--run"),
  };
}

function timelineRange(params) {
  const range = params.get("range") ?? "24h";
  if (range === "custom" && params.get("from") && params.get("to")) {
    const from = Date.parse(params.get("from"));
    const to = Date.parse(params.get("to"));
    if (from < to) return { range, from, to };
  }
  const span = RANGES[range] ?? RANGES["24h"];
  // a little past now, so the run in progress and the next slots show
  const to = Date.now() + span / 20;
  return { range: RANGES[range] ? range : "24h", from: to - span, to };
}

async function timelineView(params) {
  const { range, from, to } = timelineRange(params);
  const filter = (params.get("filter") ?? "").toLowerCase();
  const only = params.get("tasks");
  const perPage = Number(params.get("rows") ?? 100) || 100;
  const page = Math.max(0, Number(params.get("page") ?? 0) || 0);
  const tasks = (await api("/tasks"))
    .filter((task) => task.job)
    .filter((task) => (only ? only.split(",").includes(task.name) : true))
    .filter((task) => task.name.toLowerCase().includes(filter));
  const names = tasks.map((task) => task.name).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const shown = names.slice(page * perPage, (page + 1) * perPage);
  const link = (changes) => {
    const next = new URLSearchParams(params);
    for (const [key, value] of Object.entries(changes)) {
      if (value === null) next.delete(key);
      else next.set(key, value);
    }
    return `#/timeline?${next}`;
  };
  view.innerHTML = `<h1>Timeline</h1>
    <div class="toolbar" role="group" aria-label="Range">
      ${Object.keys(RANGES)
        .map(
          (key) =>
            `<a class="button" href="${link({ range: key, from: null, to: null })}" aria-pressed="${range === key}">${key.replace("h", " h").replace("d", " d")}</a>`,
        )
        .join("")}
      <form id="tl-custom" class="inline">
        <label>From <input id="tl-from" type="datetime-local" value="${html(localInput(new Date(from).toISOString()))}"></label>
        <label>To <input id="tl-to" type="datetime-local" value="${html(localInput(new Date(to).toISOString()))}"></label>
        <button type="submit">Show</button>
      </form>
      <input id="tl-filter" type="search" placeholder="Filter tasks" aria-label="Filter tasks" value="${html(params.get("filter") ?? "")}">
    </div>
    <p class="legend" id="tl-legend">${OUTCOMES.map((outcome) => `<span class="lg ${outcome}"><i>${glyph(outcome)}</i> ${outcome}</span>`).join("")}
      <span class="small">bar: start to end; thin line: slot to start (lateness)</span></p>
    <div id="timeline" class="timeline" data-from="${from}" data-to="${to}">
      <div class="tl-names" id="tl-names">${shown.map((name) => `<div class="tl-name" data-task="${html(name)}"><a href="#/tasks/${encodeURIComponent(name)}">${html(name)}</a></div>`).join("")}</div>
      <div class="tl-plot" id="tl-plot">
        <canvas id="tl-canvas" tabindex="0" role="img" aria-label="Timeline of ${shown.length} task(s); use the arrow keys to move between marks, Enter to open a run"></canvas>
        <div id="tl-tip" class="tl-tip" hidden></div>
      </div>
    </div>
    <p class="pager small">
      ${page > 0 ? `<a href="${link({ page: String(page - 1) })}">&larr; previous tasks</a>` : ""}
      tasks ${names.length ? page * perPage + 1 : 0}-${Math.min(names.length, (page + 1) * perPage)} of ${names.length}
      ${(page + 1) * perPage < names.length ? `<a href="${link({ page: String(page + 1) })}">next tasks &rarr;</a>` : ""}
      <span id="tl-stats"></span>
    </p>
    <div id="tl-detail" class="tl-detail" aria-live="polite">Hover, tap or use the arrow keys on a mark to see its run.</div>
    <details id="tl-list-wrap"><summary>Marks as a table</summary><div class="scroll"><table id="tl-list"><thead><tr><th>Task</th><th>Slot</th><th>Outcome</th><th>Started</th><th>Duration</th><th>Run</th></tr></thead><tbody></tbody></table></div></details>`;

  document.getElementById("tl-names").style.paddingTop = `${AXIS}px`;
  document.getElementById("tl-custom").addEventListener("submit", (event) => {
    event.preventDefault();
    const fromValue = document.getElementById("tl-from").value;
    const toValue = document.getElementById("tl-to").value;
    if (!fromValue || !toValue) return;
    location.hash = link({
      range: "custom",
      from: new Date(fromValue).toISOString(),
      to: new Date(toValue).toISOString(),
    });
  });
  const filterInput = document.getElementById("tl-filter");
  filterInput.addEventListener("change", () => {
    location.hash = link({ filter: filterInput.value || null, page: null });
  });

  const plot = document.getElementById("tl-plot");
  const width = Math.max(120, plot.clientWidth);
  const started = performance.now();
  const [data, deaths, shardProgress] = await Promise.all([
    loadSlots(shown, from, to, width),
    loadDeathMarks(api, html, from, to),
    loadShardProgress(api, shown, from, to),
  ]);
  attachShardProgress(data.marks, shardProgress);
  const loaded = performance.now();
  Object.assign(timeline, {
    marks: data.marks,
    deaths,
    upcoming: data.upcoming,
    rows: shown,
    from,
    to,
    width,
    selected: null,
  });
  const previous = timeline.previousSelection;
  if (previous)
    timeline.selected =
      data.marks.find(
        (mark) =>
          mark.task === previous.task && mark.slot === previous.slot && mark.outcome === previous.outcome,
      ) ?? null;
  drawTimeline();
  const drawn = performance.now();
  document.getElementById("tl-stats").textContent =
    ` · ${data.marks.length} marks, ${data.pages} request(s) in ${Math.round(loaded - started)} ms, drawn in ${Math.round(drawn - loaded)} ms`;
  document.getElementById("timeline").dataset.renderMs = String(Math.round(drawn - loaded));
  document.getElementById("timeline").dataset.loadMs = String(Math.round(loaded - started));
  wireTimeline();
  const list = document.getElementById("tl-list-wrap");
  list.addEventListener("toggle", () => {
    if (list.open) fillMarkTable();
  });
  if (timeline.selected) showMark(timeline.selected, false);
  return { refresh: true, everyMs: 15_000 };
}

/** Every mark of the shown tasks over the range: one request per page of the endpoint, not per task. */
async function loadSlots(names, from, to, width) {
  const marks = [];
  const upcoming = {};
  if (names.length === 0) return { marks, upcoming, pages: 0 };
  // one bucket per 3 px: marks stay apart, and a dense row holds a third of the marks
  const bucketMs = Math.max(1000, Math.floor(((to - from) / width) * 3));
  let cursor = null;
  let pages = 0;
  do {
    const query = new URLSearchParams({
      from: new Date(from).toISOString(),
      to: new Date(to).toISOString(),
      tasks: names.join(","),
      bucketMs: String(bucketMs),
      limit: "50000",
    });
    if (cursor) query.set("cursor", cursor);
    const page = await api(`/slots?${query}`);
    pages += 1;
    for (const mark of page.marks) {
      // a bucket cut by a page boundary continues on the next page: add the two up
      const last = marks[marks.length - 1];
      if (last && mark.kind === "bucket" && last.task === mark.task && last.slot === mark.slot) {
        marks[marks.length - 1] = mergeBuckets(last, mark);
      } else marks.push(mark);
    }
    Object.assign(upcoming, page.upcoming);
    cursor = page.nextCursor;
  } while (cursor);
  for (const mark of marks) {
    mark.t = Date.parse(mark.slot);
    mark.s = mark.startedAt ? Date.parse(mark.startedAt) : mark.t;
    mark.e = mark.finishedAt ? Date.parse(mark.finishedAt) : mark.outcome === "running" ? Date.now() : mark.s;
    if (mark.kind === "bucket") mark.e = Math.max(mark.s, Date.parse(mark.until) - 1);
  }
  return { marks, upcoming, pages };
}

function mergeBuckets(a, b) {
  const single = (mark) =>
    mark.kind === "bucket"
      ? mark
      : {
          kind: "bucket",
          task: mark.task,
          slot: mark.slot,
          until: mark.slot,
          count: 1,
          outcomes: { [mark.outcome]: 1 },
          outcome: mark.outcome,
          maxLatenessMs: mark.latenessMs,
          maxDurationMs: mark.durationMs,
          id: mark.id,
        };
  const [x, y] = [single(a), single(b)];
  const outcomes = { ...x.outcomes };
  for (const [key, count] of Object.entries(y.outcomes)) outcomes[key] = (outcomes[key] ?? 0) + count;
  const order = ["failed", "interrupted", "missed", "running", "skipped", "succeeded"];
  // each piece's id is a run of its most severe outcome that has one: keep the more severe
  const rank = (mark) => (mark.id ? order.indexOf(mark.outcome) : order.length);
  return {
    ...x,
    id: rank(y) < rank(x) ? y.id : x.id,
    until: new Date(Math.max(Date.parse(x.until), Date.parse(y.until))).toISOString(),
    count: x.count + y.count,
    outcomes,
    outcome: order.find((key) => outcomes[key]) ?? "succeeded",
    maxLatenessMs: Math.max(x.maxLatenessMs ?? 0, y.maxLatenessMs ?? 0),
    maxDurationMs: Math.max(x.maxDurationMs ?? 0, y.maxDurationMs ?? 0),
  };
}

function drawTimeline() {
  const canvas = document.getElementById("tl-canvas");
  if (!canvas) return;
  const { rows, from, to, width } = timeline;
  const ratio = window.devicePixelRatio || 1;
  const height = AXIS + rows.length * ROW + 4;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  const colors = palette();
  const x = (time) => ((time - from) / (to - from)) * width;
  const rowOf = new Map(rows.map((name, index) => [name, index]));
  ctx.clearRect(0, 0, width, height);

  // axis: ticks at round times, row separators, now
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = colors.text;
  ctx.strokeStyle = colors.line;
  ctx.lineWidth = 1;
  const step = niceStep((to - from) / Math.max(2, Math.floor(width / 110)));
  ctx.beginPath();
  for (let tick = Math.ceil(from / step) * step; tick <= to; tick += step) {
    const px = Math.round(x(tick)) + 0.5;
    ctx.moveTo(px, AXIS - 4);
    ctx.lineTo(px, height);
    ctx.fillText(tickLabel(tick, step), Math.min(px + 3, width - 60), 12);
  }
  for (let row = 0; row <= rows.length; row++) {
    ctx.moveTo(0, AXIS + row * ROW + 0.5);
    ctx.lineTo(width, AXIS + row * ROW + 0.5);
  }
  ctx.stroke();
  const now = Date.now();
  if (now > from && now < to) {
    ctx.strokeStyle = colors.now;
    ctx.setLineDash([3, 3]);
    ctx.beginPath();
    ctx.moveTo(Math.round(x(now)) + 0.5, AXIS - 6);
    ctx.lineTo(Math.round(x(now)) + 0.5, height);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = colors.now;
    ctx.fillText("now", Math.min(x(now) + 3, width - 24), AXIS - 4);
  }
  drawDeathMarks(ctx, timeline.deaths, x, height, colors, width);

  // marks, batched per outcome: one path each (fast for a million marks)
  const paths = {};
  const bars = {};
  const lateness = new Path2D();
  for (const outcome of OUTCOMES) {
    paths[outcome] = new Path2D();
    bars[outcome] = new Path2D();
  }
  const byRow = rows.map(() => []);
  for (const mark of timeline.marks) {
    const row = rowOf.get(mark.task);
    if (row === undefined) continue;
    byRow[row].push(mark);
    const middle = AXIS + row * ROW + ROW / 2;
    const slotX = x(mark.t);
    const startX = x(mark.s);
    const endX = x(mark.e);
    mark.x = startX;
    mark.row = row;
    if (mark.kind !== "bucket" && startX - slotX >= 2) {
      lateness.moveTo(slotX, middle + 0.5);
      lateness.lineTo(startX, middle + 0.5);
    }
    if (endX - startX >= 2) bars[mark.outcome]?.rect(startX, middle - 3, endX - startX, 6);
    shape(paths[mark.outcome] ?? paths.succeeded, mark.outcome, startX, middle);
    if (mark.kind === "run" && mark.final === false) {
      // a retried attempt: a tick above its mark
      paths.failed.rect(startX - 0.5, middle - 9, 1.5, 3);
    }
  }
  for (const marks of byRow) marks.sort((a, b) => a.x - b.x);
  timeline.byRow = byRow;
  for (const [task, times] of Object.entries(timeline.upcoming ?? {})) {
    const row = rowOf.get(task);
    if (row === undefined) continue;
    for (const time of times) {
      const t = Date.parse(time);
      if (t >= from && t <= to) shape(paths.upcoming, "upcoming", x(t), AXIS + row * ROW + ROW / 2);
    }
  }
  ctx.strokeStyle = colors.text;
  ctx.lineWidth = 1;
  ctx.stroke(lateness);
  for (const outcome of OUTCOMES) {
    ctx.globalAlpha = 0.45;
    ctx.fillStyle = colors[outcome];
    ctx.fill(bars[outcome]);
    ctx.globalAlpha = outcome === "upcoming" ? 0.45 : 1;
    ctx.fillStyle = colors[outcome];
    ctx.strokeStyle = colors[outcome];
    ctx.lineWidth = 1.5;
    if (outcome === "skipped" || outcome === "missed" || outcome === "upcoming" || outcome === "interrupted")
      ctx.stroke(paths[outcome]);
    else ctx.fill(paths[outcome]);
  }
  ctx.globalAlpha = 1;
  drawShardProgress(ctx, timeline.marks, colors, (row) => AXIS + row * ROW + ROW / 2);
  if (timeline.selected?.x !== undefined) {
    const mark = timeline.selected;
    ctx.strokeStyle = colors.now;
    ctx.lineWidth = 2;
    ctx.strokeRect(mark.x - 7, AXIS + mark.row * ROW + 2, 14, ROW - 4);
  }
}

/** The symbol of each state, the same as the legend's: square, triangle, diamond, circle, cross, arrow. */
function shape(path, outcome, cx, cy) {
  switch (outcome) {
    case "succeeded":
      path.rect(cx - 3.5, cy - 3.5, 7, 7);
      break;
    case "failed":
      path.moveTo(cx, cy - 5);
      path.lineTo(cx + 5, cy + 4);
      path.lineTo(cx - 5, cy + 4);
      path.closePath();
      break;
    case "interrupted":
      path.moveTo(cx, cy - 5);
      path.lineTo(cx + 5, cy);
      path.lineTo(cx, cy + 5);
      path.lineTo(cx - 5, cy);
      path.closePath();
      break;
    case "missed":
      path.moveTo(cx - 4, cy - 4);
      path.lineTo(cx + 4, cy + 4);
      path.moveTo(cx + 4, cy - 4);
      path.lineTo(cx - 4, cy + 4);
      break;
    case "running":
      path.moveTo(cx - 3, cy - 5);
      path.lineTo(cx + 5, cy);
      path.lineTo(cx - 3, cy + 5);
      path.closePath();
      break;
    default:
      path.moveTo(cx + 4, cy);
      path.arc(cx, cy, 4, 0, Math.PI * 2);
  }
}

function niceStep(raw) {
  const steps = [
    60e3,
    300e3,
    900e3,
    1800e3,
    3600e3,
    3 * 3600e3,
    6 * 3600e3,
    12 * 3600e3,
    86400e3,
    2 * 86400e3,
  ];
  return steps.find((step) => step >= raw) ?? 7 * 86400e3;
}

function tickLabel(time, step) {
  const date = new Date(time);
  return step >= 86400e3
    ? date.toLocaleDateString(undefined, { month: "short", day: "numeric" })
    : date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}

/** The marks of one row, left to right (indexed when drawn). */
function rowMarks(row) {
  return timeline.byRow?.[row] ?? [];
}

/** The mark nearest to `px` in a row, within 8 px: a binary search of the row. */
function nearestMark(row, px) {
  const marks = rowMarks(row);
  let low = 0;
  let high = marks.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (marks[middle].x < px) low = middle + 1;
    else high = middle;
  }
  let best = null;
  for (const mark of [marks[low - 1], marks[low]]) {
    if (!mark) continue;
    const distance = Math.abs(mark.x - px);
    if (distance <= 8 && (!best || distance < best.distance)) best = { mark, distance };
  }
  return best?.mark ?? null;
}

function describeMark(mark) {
  if (mark.kind === "bucket") {
    const counts = Object.entries(mark.outcomes)
      .map(([outcome, count]) => `${count} ${outcome}`)
      .join(", ");
    return `<strong>${html(mark.task)}</strong> ${badge(mark.outcome)}<br>${mark.count} marks from ${html(new Date(mark.slot).toLocaleString())}: ${html(counts)}${mark.maxDurationMs ? `<br>longest ${html(duration(mark.maxDurationMs))}` : ""}${mark.maxLatenessMs ? `, latest start ${html(duration(mark.maxLatenessMs))} after its slot` : ""}${mark.id ? `<br><a class="tl-open" href="#/runs/${html(mark.id)}">open its most severe run</a>` : ""}<br><a href="#/tasks/${encodeURIComponent(mark.task)}?from=${encodeURIComponent(mark.slot)}&to=${encodeURIComponent(new Date(Date.parse(mark.until) + 3_600_000).toISOString())}">these runs</a>${mark.shardSlots ? `<br>${bucketShardLine(mark.shardSlots, html)}` : ""}`;
  }
  const parts = [
    `<strong>${html(mark.task)}</strong> ${badge(mark.outcome)}${mark.final === false ? ' <span class="small">retried</span>' : ""}`,
    `slot ${html(new Date(mark.slot).toLocaleString())}`,
  ];
  if (mark.startedAt) parts.push(`started ${html(duration(mark.latenessMs ?? 0))} after it`);
  if (mark.durationMs != null)
    parts.push(`${mark.outcome === "running" ? "running for" : "took"} ${html(duration(mark.durationMs))}`);
  if (mark.attempt) parts.push(`attempt ${mark.attempt}`);
  if (mark.trigger === "manual") parts.push("run now");
  if (mark.rerunOf) parts.push("re-run");
  if (mark.shards) parts.push(shardLine(mark.shards, html));
  if (mark.reason) parts.push(`<span class="error-text">${html(mark.reason)}</span>`);
  if (mark.id) parts.push(`<a class="tl-open" href="#/runs/${html(mark.id)}">open run</a>`);
  return parts.join("<br>");
}

function showMark(mark, tip, px, py, redraw = true) {
  timeline.selected = mark;
  timeline.previousSelection = { task: mark.task, slot: mark.slot, outcome: mark.outcome };
  const detail = document.getElementById("tl-detail");
  if (detail) {
    detail.innerHTML = describeMark(mark);
    detail.dataset.outcome = mark.outcome;
    detail.dataset.task = mark.task;
  }
  const tooltip = document.getElementById("tl-tip");
  if (tooltip && tip) {
    tooltip.innerHTML = describeMark(mark);
    tooltip.hidden = false;
    const plot = document.getElementById("tl-plot");
    const left = Math.min(px + 12, plot.clientWidth - 230);
    tooltip.style.left = `${Math.max(0, left)}px`;
    tooltip.style.top = `${py + 14}px`;
  }
  // the selection frame needs a redraw; hovering only moves the tooltip
  if (redraw) drawTimeline();
}

function wireTimeline() {
  const canvas = document.getElementById("tl-canvas");
  const tooltip = document.getElementById("tl-tip");
  const locate = (event) => {
    const box = canvas.getBoundingClientRect();
    const px = event.clientX - box.left;
    const py = event.clientY - box.top;
    return { px, py, row: Math.floor((py - AXIS) / ROW) };
  };
  canvas.addEventListener("mousemove", (event) => {
    const { px, py, row } = locate(event);
    const mark = row >= 0 ? nearestMark(row, px) : null;
    if (mark) showMark(mark, true, px, py, false);
    else tooltip.hidden = true;
  });
  canvas.addEventListener("mouseleave", () => {
    tooltip.hidden = true;
  });
  canvas.addEventListener("click", (event) => {
    const { px, py, row } = locate(event);
    const mark = row >= 0 ? nearestMark(row, px) : null;
    if (mark) showMark(mark, true, px, py);
  });
  canvas.addEventListener("keydown", (event) => {
    const current = timeline.selected;
    let row = current?.row ?? 0;
    let marks = rowMarks(row);
    let index = current ? marks.indexOf(current) : -1;
    if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
      index = current ? index + (event.key === "ArrowRight" ? 1 : -1) : 0;
    } else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      row = Math.min(timeline.rows.length - 1, Math.max(0, row + (event.key === "ArrowDown" ? 1 : -1)));
      const x = current?.x ?? 0;
      marks = rowMarks(row);
      index = marks.reduce(
        (best, mark, i) => (best < 0 || Math.abs(mark.x - x) < Math.abs(marks[best].x - x) ? i : best),
        -1,
      );
    } else if (event.key === "Enter" && current?.id) {
      location.hash = `#/runs/${current.id}`;
      return;
    } else if (event.key === "Escape") {
      tooltip.hidden = true;
      return;
    } else return;
    event.preventDefault();
    const mark = marks[Math.max(0, Math.min(marks.length - 1, index))];
    if (mark) showMark(mark, false);
  });
}

function fillMarkTable() {
  const body = document.querySelector("#tl-list tbody");
  if (!body) return;
  const limit = 5000;
  const rows = timeline.marks.slice(0, limit).map(
    (
      mark,
    ) => `<tr data-task="${html(mark.task)}" data-outcome="${html(mark.outcome)}" data-kind="${html(mark.kind)}">
      <td>${html(mark.task)}</td><td>${html(new Date(mark.slot).toLocaleString())}</td>
      <td>${badge(mark.outcome)}${
        mark.kind === "bucket"
          ? ` <span class="small">${mark.count} marks: ${html(
              Object.entries(mark.outcomes)
                .map(([outcome, count]) => `${count} ${outcome}`)
                .join(", "),
            )}</span>`
          : ""
      }${mark.reason ? ` <span class="small">${html(mark.reason)}</span>` : ""}${
        mark.shards
          ? `<br>${shardLine(mark.shards, html)}`
          : mark.shardSlots
            ? `<br>${bucketShardLine(mark.shardSlots, html)}`
            : ""
      }</td>
      <td>${mark.startedAt ? `${html(duration(mark.latenessMs ?? 0))} late` : ""}</td>
      <td>${html(duration(mark.durationMs ?? mark.maxDurationMs))}</td>
      <td>${mark.id ? `<a href="#/runs/${html(mark.id)}">open</a>` : ""}</td></tr>`,
  );
  body.innerHTML =
    rows.join("") +
    (timeline.marks.length > limit
      ? `<tr><td colspan="6">${timeline.marks.length - limit} more not listed.</td></tr>`
      : "");
}

// ---------- routing and refresh ----------
/** A form in the view was changed and not yet submitted: a timed refresh would reset it. */
let editing = false;
for (const type of ["input", "change"]) {
  document.addEventListener(type, (event) => {
    if (event.target instanceof Element && view.contains(event.target) && event.target.closest("form"))
      editing = true;
  });
}

function scheduleRefresh(everyMs) {
  timer = setTimeout(() => (editing ? scheduleRefresh(everyMs) : render()), everyMs);
}

/**
 * Renders one at a time: a render whose data arrives after a newer one's (a filter chosen while the
 * page was still loading) would paint the older view last. Renders asked for meanwhile make one
 * more, once the current one is done, with the address as it is then.
 */
let rendering = null;
let queued = null;
function render() {
  if (!rendering) {
    rendering = renderOnce().finally(() => {
      rendering = null;
    });
    return rendering;
  }
  queued ??= rendering.then(() => {
    queued = null;
    return render();
  });
  return queued;
}

/** The route of the page in view: another route's page is not left in view while the new one loads. */
let shownRoute = null;

async function renderOnce() {
  clearTimeout(timer);
  editing = false;
  const hash = location.hash.replace(/^#/, "") || "/";
  const [route, search = ""] = hash.split("?");
  if (route !== shownRoute) {
    // the previous page's form and buttons would act on the previous task until the data arrives
    shownRoute = route;
    view.setAttribute("aria-busy", "true");
    view.innerHTML = '<p class="small">Loading…</p>';
  }
  const params = new URLSearchParams(search);
  const section =
    opsSection(route) ??
    (route.startsWith("/config") ? "config" : route.startsWith("/timeline") ? "timeline" : "tasks");
  void refreshBanner({ api, html, relative, render });
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", section === link.dataset.nav);
    if (section === link.dataset.nav) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  let next = { refresh: true };
  try {
    const taskMatch = route.match(/^\/tasks\/(.+)$/);
    const runMatch = route.match(/^\/runs\/(.+)$/);
    if (opsSection(route))
      next = (await opsView(section, params, { api, html, relative, render, view, badge })) ?? next;
    else if (taskMatch) next = (await taskView(decodeURIComponent(taskMatch[1]), params)) ?? next;
    else if (runMatch) next = (await runView(decodeURIComponent(runMatch[1]))) ?? next;
    else if (section === "timeline") next = (await timelineView(params)) ?? next;
    else if (section === "config") await configView();
    else await tasksView();
    errorBox.hidden = true;
    refreshed.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    errorBox.hidden = false;
    errorBox.textContent =
      error.status === 401 || error.status === 403
        ? `The admin API refused: ${error.message}. Enter a viewer or operator token above.`
        : `Could not load: ${error.message}`;
    if (view.hasAttribute("aria-busy")) view.innerHTML = "";
  }
  view.removeAttribute("aria-busy");
  if (!document.hidden && next.refresh) scheduleRefresh(next.everyMs ?? REFRESH_MS);
}

window.addEventListener("hashchange", render);
window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => drawTimeline());
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) render();
});
render();
