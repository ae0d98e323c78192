// cronwarden dashboard: a read-only view of the admin API (plus run-now). No build step, no CDN.
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

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { accept: "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) };
  const response = await fetch(path, { ...options, headers });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(body.error ?? `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

// ---------- formatting ----------
const html = (value) =>
  String(value ?? "").replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c],
  );

function cronWords(cron) {
  if (!cron) return "";
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

const badge = (text, kind = text) => (text ? `<span class="badge ${html(kind)}">${html(text)}</span>` : "");
const strip = (outcomes) =>
  `<span class="strip" title="outcomes of the recent slots, newest first (a slot's final attempt)">${outcomes.map((o) => `<i class="${html(o)}" title="${html(o)}"></i>`).join("")}</span>`;
const duration = (ms) => (ms == null ? "" : ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`);

function enabledCell(task) {
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
        <td><a href="#/tasks/${encodeURIComponent(task.name)}">${html(task.name)}</a>${task.registered ? "" : ` ${badge("not registered", "warn")}`}</td>
        <td>${enabledCell(task)}</td>
        <td>${html(cronWords(cron))}<br><code>${html(cron ?? "")}</code></td>
        <td class="wide">${html(zone ?? "")}</td>
        <td>${task.job?.nextRunAt ? `${html(relative(task.job.nextRunAt))}<br><span class="small">${at(task.job.nextRunAt, zone)}</span>` : ""}</td>
        <td class="outcome">${badge(task.lastOutcome ?? "")}</td>
        <td class="running">${task.running ? badge(`running on ${task.runningOn ?? "?"}`, "running") : ""}</td>
        <td>${task.consecutiveFailures || ""}</td>
        <td class="wide">${strip(task.recentOutcomes ?? [])}</td>
      </tr>`;
    })
    .join("");
  view.innerHTML = `<h1>Tasks</h1>
    <div class="toolbar">
      <input id="filter" type="search" placeholder="Filter by name" value="${html(state.filter)}" aria-label="Filter by name">
      <select id="show" aria-label="Show">
        ${["all", "enabled", "disabled", "failing", "running"].map((value) => `<option ${state.show === value ? "selected" : ""}>${value}</option>`).join("")}
      </select>
    </div>
    <div class="scroll"><table id="tasks">
      <thead><tr>
        <th data-sort="name">Task</th><th>Enabled</th><th>Schedule</th><th class="wide">Timezone</th>
        <th data-sort="next">Next run</th><th>Last outcome</th><th>Running</th><th data-sort="failures">Failures</th><th class="wide">Recent</th>
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
    th.addEventListener("click", () => {
      state.descending = state.sort === th.dataset.sort ? !state.descending : false;
      state.sort = th.dataset.sort;
      render();
    });
  }
}

async function taskView(name) {
  const [task, runs, config] = await Promise.all([
    api(`/tasks/${encodeURIComponent(name)}`),
    api(`/tasks/${encodeURIComponent(name)}/runs?limit=50`),
    api("/config"),
  ]);
  const zone = task.job?.timezone ?? task.configured?.timezone;
  const rejected = (config.desired?.rejected ?? []).filter((entry) => entry.name === name);
  const canRun = task.registered && task.job?.enabled && !task.running;
  const history = runs
    .map(
      (run) => `<tr>
        <td>${at(run.scheduledAt, zone)}</td>
        <td>${run.startedAt ? `${html(relative(run.startedAt))}` : ""}</td>
        <td>${html(duration(run.durationMs))}</td>
        <td>${badge(run.outcome)}</td>
        <td>${run.attempt ?? ""}</td>
        <td class="wide">${html(run.trigger ?? "")}${run.requestedBy ? ` by ${html(run.requestedBy)}` : ""}${run.rerun ? " (re-run)" : ""}</td>
        <td class="wide">${html(run.instanceId ?? "")}</td>
        <td class="error-text">${html(run.error ?? run.detail ?? "")}</td>
      </tr>`,
    )
    .join("");
  view.innerHTML = `<h1>${html(task.name)} ${task.running ? badge(`running on ${task.runningOn ?? "?"}`, "running") : ""}</h1>
    ${task.description ? `<p>${html(task.description)}</p>` : ""}
    <p><button id="run-now" class="primary" ${canRun ? "" : "disabled"}>Run now</button>
      <span id="run-result" class="small">${canRun ? "" : task.running ? "running now" : !task.registered ? "not registered in this service" : "disabled in the config"}</span></p>
    <dl>
      <dt>Enabled</dt><dd>${enabledCell(task)}</dd>
      <dt>Schedule</dt><dd>${html(cronWords(task.job?.cron))} <code>${html(task.job?.cron ?? "")}</code> ${html(zone ?? "")}</dd>
      <dt>Config entry</dt><dd>${task.configured ? `<code>${html(JSON.stringify(task.configured))}</code>` : "none (not in the config)"}</dd>
      ${rejected.map((entry) => `<dt>Rejected entry</dt><dd class="error-text">${html(entry.field)} ${html(JSON.stringify(entry.value))}: ${html(entry.reason)}</dd>`).join("")}
      <dt>Last outcome</dt><dd>${badge(task.lastOutcome ?? "")} ${task.lastError ? `<span class="error-text">${html(task.lastError)}</span>` : ""}</dd>
      <dt>Failed slots in a row</dt><dd>${task.consecutiveFailures}</dd>
      <dt>Next runs</dt><dd>${(task.nextRuns ?? []).map((time) => `${at(time, zone)}`).join("<br>") || "none"}</dd>
    </dl>
    <h2>History</h2>
    <div class="scroll"><table id="history">
      <thead><tr><th>Slot</th><th>Started</th><th>Duration</th><th>Outcome</th><th>Attempt</th><th class="wide">Trigger</th><th class="wide">Instance</th><th>Error</th></tr></thead>
      <tbody>${history || `<tr><td colspan="8">No runs yet.</td></tr>`}</tbody>
    </table></div>`;
  document.getElementById("run-now").addEventListener("click", async (event) => {
    const button = event.currentTarget;
    const result = document.getElementById("run-result");
    button.disabled = true;
    try {
      await api(`/tasks/${encodeURIComponent(name)}/run`, { method: "POST" });
      result.textContent = "run requested";
      setTimeout(render, 500);
    } catch (error) {
      result.textContent =
        error.status === 401 || error.status === 403
          ? `refused: ${error.message} (enter an operator token above)`
          : error.message;
      button.disabled = false;
    }
  });
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

// ---------- routing and refresh ----------
async function render() {
  clearTimeout(timer);
  const route = location.hash.replace(/^#/, "") || "/";
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", (route.startsWith("/config") ? "config" : "tasks") === link.dataset.nav);
  }
  try {
    const taskMatch = route.match(/^\/tasks\/(.+)$/);
    if (taskMatch) await taskView(decodeURIComponent(taskMatch[1]));
    else if (route.startsWith("/config")) await configView();
    else await tasksView();
    errorBox.hidden = true;
    refreshed.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    errorBox.hidden = false;
    errorBox.textContent =
      error.status === 401 || error.status === 403
        ? `The admin API refused: ${error.message}. Enter a viewer or operator token above.`
        : `Could not load: ${error.message}`;
  }
  if (!document.hidden) timer = setTimeout(render, REFRESH_MS);
}

window.addEventListener("hashchange", render);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) render();
});
render();
