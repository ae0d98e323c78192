// cronwarden dashboard: pause all (the banner on every page, its switch), the instances page and
// the run search (docs/operations.md). Loaded by app.js, which passes its helpers in.
const TOKEN_KEY = "cronwarden-admin-token";
const banner = document.getElementById("pause-banner");

/** A POST with a JSON body and the token (app.js's api() sends no body type). */
async function post(path, body) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const response = await fetch(path, {
    method: "POST",
    signal: AbortSignal.timeout(15_000),
    headers: {
      accept: "application/json",
      "content-type": "application/json",
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(answer.error ?? `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return answer;
}

const refused = (error) =>
  error.status === 401 || error.status === 403
    ? `refused: ${error.message} (enter an operator token above)`
    : error.message;

/** The pause-all banner, on every page: shown while the switch is on, with its lift form. */
export async function refreshBanner({ api, html, relative, render }) {
  let state;
  try {
    state = await api("/pause-all");
  } catch {
    return; // the page's own load reports the API's refusal
  }
  if (!state.paused) {
    banner.hidden = true;
    banner.innerHTML = "";
    return;
  }
  const pause = state.pause;
  const text = `All tasks are paused (pause-all) since ${html(new Date(pause.pausedAt).toLocaleString())} (${html(relative(new Date(Math.min(Date.parse(pause.pausedAt), Date.now() - 1000)).toISOString()))}) by ${html(pause.pausedBy)}: ${html(pause.reason)}. No run starts until it is lifted; missed slots then follow each task's catchUp.`;
  if (!banner.hidden && banner.dataset.since === pause.pausedAt) return; // keep a reason being typed
  banner.dataset.since = pause.pausedAt;
  banner.hidden = false;
  banner.innerHTML = `<span id="pause-text">${text}</span>
    <form id="resume-all" class="inline"><input id="resume-reason" placeholder="why lift it (optional)" maxlength="500">
    <button type="submit">Resume all</button> <span id="resume-result" class="small" aria-live="polite"></span></form>`;
  document.getElementById("resume-all").addEventListener("submit", async (event) => {
    event.preventDefault();
    const reason = document.getElementById("resume-reason").value.trim();
    try {
      await post("/resume-all", reason ? { reason } : {});
      banner.dataset.since = "";
      render();
    } catch (error) {
      document.getElementById("resume-result").textContent = refused(error);
    }
  });
}

/** The pages this file draws: their route prefix and nav section. */
export function opsSection(route) {
  if (route.startsWith("/instances")) return "instances";
  if (route.startsWith("/search")) return "search";
  return undefined;
}

export async function opsView(section, params, helpers) {
  if (section === "instances") return instancesView(helpers);
  return searchView(params, helpers);
}

async function instancesView({ api, html, relative, render, view, badge }) {
  const [instances, state] = await Promise.all([api("/instances"), api("/pause-all")]);
  const time = (iso) => (iso ? `<span title="${html(iso)}">${html(relative(iso))}</span>` : "");
  const rows = instances
    .map(
      (instance) => `<tr data-instance="${html(instance.id)}">
        <td>${html(instance.id)}</td>
        <td>${badge(instance.state, instance.state === "live" ? "succeeded" : "failed")}</td>
        <td>${html(instance.host ?? "")}</td><td>${html(instance.version ?? "")}</td>
        <td>${time(instance.startedAt)}</td><td>${time(instance.lastSeenAt)}</td>
        <td>${instance.runsInProgress}</td><td>${instance.concurrency ?? ""}</td>
        <td>${instance.diedAt ? `died ${time(instance.diedAt)}, seen by ${html(instance.seenBy ?? "")}${instance.handedOver?.length ? `; handed over: ${html(instance.handedOver.join(", "))}` : ""}` : ""}</td>
      </tr>`,
    )
    .join("");
  const live = instances.filter((instance) => instance.state === "live").length;
  view.innerHTML = `<h1>Instances</h1>
    <p class="small">${live} live, ${instances.length - live} dead (deaths are shown for a day). Last seen: the instance's liveness check.</p>
    <table id="instances"><thead><tr><th>Instance</th><th>State</th><th>Host</th><th>Version</th><th>Started</th>
      <th>Last seen</th><th>Runs in progress</th><th>Concurrency</th><th>Note</th></tr></thead><tbody>${rows}</tbody></table>
    <h2>Pause all</h2>
    ${
      state.paused
        ? `<p>Pause-all is on (see the banner above to lift it).</p>`
        : `<form id="pause-all" class="inline"><label>Reason <input id="pause-reason" required maxlength="500" placeholder="why (kept in the audit trail)"></label>
           <button type="submit">Pause all tasks</button> <span id="pause-result" class="small" aria-live="polite"></span></form>
           <p class="small">Stops every run from starting, on every instance, until lifted; runs in progress finish. No task's configuration changes.</p>`
    }`;
  document.getElementById("pause-all")?.addEventListener("submit", async (event) => {
    event.preventDefault();
    const reason = document.getElementById("pause-reason").value.trim();
    try {
      await post("/pause-all", { reason });
      render();
    } catch (error) {
      document.getElementById("pause-result").textContent = refused(error);
    }
  });
  return { refresh: true };
}

const OUTCOMES = ["succeeded", "failed", "skipped", "interrupted"];

async function searchView(params, { api, html, relative, view, badge }) {
  const q = params.get("q") ?? "";
  const task = params.get("task") ?? "";
  const outcome = params.get("outcome") ?? "";
  const from = params.get("from") ?? "";
  const to = params.get("to") ?? "";
  const asked = q || task || outcome || from || to;
  let page = { runs: [], nextCursor: null };
  if (asked) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries({ q, task, outcome })) if (value) query.set(key, value);
    if (from) query.set("from", new Date(from).toISOString());
    if (to) query.set("to", new Date(to).toISOString());
    query.set("limit", "50");
    if (params.get("cursor")) query.set("cursor", params.get("cursor"));
    page = await api(`/runs/search?${query}`);
  }
  const rows = page.runs
    .map(
      (run) => `<tr>
        <td><span title="${html(run.recordedAt)}">${html(relative(run.recordedAt))}</span></td>
        <td><a href="#/tasks/${encodeURIComponent(run.task)}">${html(run.task)}</a></td>
        <td>${html(run.scheduledAt ?? "")}</td><td>${badge(run.outcome)}</td>
        <td>${html(run.instanceId ?? "")}</td>
        <td class="error-text">${html(run.error ?? run.detail ?? "")}</td>
        <td><a href="#/runs/${encodeURIComponent(run.id)}">detail</a></td></tr>`,
    )
    .join("");
  const next = new URLSearchParams(params);
  if (page.nextCursor) next.set("cursor", page.nextCursor);
  view.innerHTML = `<h1>Search runs</h1>
    <form id="search-form" class="filters" role="search">
      <label>Words <input id="search-q" name="q" value="${html(q)}" placeholder="e.g. ECONNRESET" maxlength="200"></label>
      <label>Task <input name="task" value="${html(task)}" maxlength="200"></label>
      <label>Outcome <select name="outcome"><option value="">any</option>${OUTCOMES.map((value) => `<option${value === outcome ? " selected" : ""}>${value}</option>`).join("")}</select></label>
      <label>From <input name="from" type="datetime-local" value="${html(from)}"></label>
      <label>To <input name="to" type="datetime-local" value="${html(to)}"></label>
      <button type="submit">Search</button>
    </form>
    <p class="small">Words are matched whole, case aside, in a run's error, its reason and its handler's log lines ("a phrase", -word to exclude, or). Newest first.</p>
    ${
      asked
        ? `<table id="search-results"><thead><tr><th>Recorded</th><th>Task</th><th>Slot</th><th>Outcome</th><th>Instance</th><th>Error</th><th></th></tr></thead>
           <tbody>${rows || `<tr><td colspan="7">no run matches</td></tr>`}</tbody></table>
           ${page.nextCursor ? `<p><a href="#/search?${next}">older runs</a></p>` : ""}`
        : ""
    }`;
  document.getElementById("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = new FormData(event.currentTarget);
    const query = new URLSearchParams();
    for (const [key, value] of form) if (value) query.set(key, String(value));
    location.hash = `#/search?${query}`;
  });
  return { refresh: false };
}

/** The timeline's instance deaths in [from, to) (GET /instances/deaths), listed under the plot too. */
export async function loadDeathMarks(api, html, from, to) {
  let marks = [];
  try {
    const query = new URLSearchParams({ from: new Date(from).toISOString(), to: new Date(to).toISOString() });
    marks = (await api(`/instances/deaths?${query}`)).marks;
  } catch {
    marks = []; // the timeline itself stands without them
  }
  const plot = document.getElementById("timeline");
  let list = document.getElementById("tl-deaths");
  if (!list && plot) {
    list = document.createElement("ul");
    list.id = "tl-deaths";
    list.className = "small tl-deaths";
    plot.after(list);
  }
  if (list)
    list.innerHTML = marks
      .map(
        (mark) =>
          `<li data-instance="${html(mark.instanceId)}">\u2020 instance ${html(mark.instanceId)} died ${html(new Date(mark.at).toLocaleString())} (seen by ${html(mark.seenBy)})${mark.handedOver.length ? `; runs handed over: ${html(mark.handedOver.join(", "))}` : "; no run in progress"}</li>`,
      )
      .join("");
  return marks.map((mark) => ({ ...mark, t: Date.parse(mark.at) }));
}

/** A death: a dashed vertical line across the plot, with the instance's name at the top. */
export function drawDeathMarks(ctx, deaths, x, height, colors, width) {
  for (const death of deaths ?? []) {
    const px = Math.round(x(death.t)) + 0.5;
    if (px < 0 || px > width) continue;
    ctx.strokeStyle = colors.failed;
    ctx.setLineDash([6, 3]);
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(px, 14);
    ctx.lineTo(px, height);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = colors.failed;
    ctx.fillText(`\u2020 ${death.instanceId}`, Math.min(px + 3, width - 80), 24);
  }
}
