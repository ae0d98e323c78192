// Sharded slots in the dashboard (docs/sharding.md, docs/dashboard.md): the timeline's shard
// progress (GET /sharded-slots) and the run page's list of a slot's shards
// (GET /tasks/:name/slots/:slot/shards).

/** Shards listed on a run page at most: failed and running ones first, then by index. */
const LISTED = 1000;

const ENDED = ["succeeded", "failed", "skipped"];

/** The shard progress of the shown tasks' sharded slots over the range, by task. */
export async function loadShardProgress(api, names, from, to) {
  const byTask = new Map();
  if (names.length === 0) return byTask;
  const query = new URLSearchParams({
    from: new Date(from).toISOString(),
    to: new Date(to).toISOString(),
    tasks: names.join(","),
  });
  const { slots } = await api(`/sharded-slots?${query}`);
  for (const slot of slots) {
    slot.t = Date.parse(slot.slot);
    if (!byTask.has(slot.task)) byTask.set(slot.task, []);
    byTask.get(slot.task).push(slot);
  }
  return byTask;
}

/**
 * Gives each mark of a sharded slot its progress: a run mark the progress of its slot, a bucket
 * the sharded slots it holds (`shardSlots`).
 */
export function attachShardProgress(marks, byTask) {
  for (const mark of marks) {
    const slots = byTask.get(mark.task);
    if (!slots) continue;
    if (mark.kind === "bucket") {
      const until = Date.parse(mark.until);
      const inside = slots.filter((slot) => slot.t >= mark.t && slot.t <= until);
      if (inside.length > 0) mark.shardSlots = inside;
    } else {
      const slot = slots.find((each) => each.t === mark.t);
      if (slot) mark.shards = slot;
    }
  }
}

const done = (slot) => ENDED.reduce((sum, state) => sum + (slot.counts[state] ?? 0), 0);

/** "Shards 180/200 done · 2 failed: 4, 17 · reduce waiting", as HTML. */
export function shardLine(slot, html) {
  const failed = slot.counts.failed ?? 0;
  const named = slot.failed.join(", ") + (failed > slot.failed.length ? ", ..." : "");
  const parts = [`shards ${done(slot)}/${slot.shardCount} done`];
  if (slot.counts.running) parts.push(`${slot.counts.running} running`);
  if (failed) parts.push(`<span class="error-text">${failed} failed: ${html(named)}</span>`);
  if (slot.counts.skipped) parts.push(`${slot.counts.skipped} skipped`);
  if (slot.reduce !== "none") parts.push(`reduce ${html(slot.reduce)}`);
  return `<span class="shard-line">${parts.join(" · ")}</span>`;
}

/** A bucket's sharded slots, summed: "3 sharded slots: 600/600 shards done · failed in 1". */
export function bucketShardLine(slots, html) {
  const total = slots.reduce((sum, slot) => sum + slot.shardCount, 0);
  const ended = slots.reduce((sum, slot) => sum + done(slot), 0);
  const failing = slots.filter((slot) => slot.counts.failed > 0);
  return `<span class="shard-line">${slots.length} sharded slot(s): shards ${ended}/${total} done${
    failing.length
      ? ` · <span class="error-text">failed shards in ${failing.length}: ${html(
          failing
            .slice(0, 3)
            .map((slot) => `${new Date(slot.t).toLocaleTimeString()} (${slot.failed.join(", ")})`)
            .join("; "),
        )}</span>`
      : ""
  }</span>`;
}

/** The canvas mark of a sharded slot's progress: a thin bar under the mark, the ended share filled. */
export function drawShardProgress(ctx, marks, colors, middle) {
  for (const mark of marks) {
    const slot = mark.shards;
    if (!slot || slot.shardCount === 0 || mark.x === undefined) continue;
    const y = middle(mark.row) + 7;
    const width = 16;
    const left = mark.x - width / 2;
    ctx.globalAlpha = 0.35;
    ctx.fillStyle = colors.text;
    ctx.fillRect(left, y, width, 2);
    ctx.globalAlpha = 1;
    const ok = (slot.counts.succeeded + slot.counts.skipped) / slot.shardCount;
    const failed = slot.counts.failed / slot.shardCount;
    ctx.fillStyle = colors.succeeded;
    ctx.fillRect(left, y, width * ok, 2);
    ctx.fillStyle = colors.failed;
    ctx.fillRect(left + width * ok, y, width * failed, 2);
  }
}

/** The run page's section of a sharded slot's shards; "" when the run's slot was not sharded. */
export async function shardSection(api, html, badge, duration, run) {
  let answer;
  try {
    answer = await api(
      `/tasks/${encodeURIComponent(run.task)}/slots/${encodeURIComponent(new Date(run.slot).toISOString())}/shards`,
    );
  } catch (error) {
    if (error.status === 404) return "";
    return `<h2>Shards</h2><p class="error-text">could not read the shards: ${html(error.message)}</p>`;
  }
  const rank = (shard) => (shard.state === "failed" ? 0 : shard.state === "running" ? 1 : 2);
  const shards = [...answer.shards].sort((a, b) => rank(a) - rank(b) || a.index - b.index);
  const rows = shards
    .slice(0, LISTED)
    .map(
      (shard) => `<tr data-shard="${shard.index}" data-state="${html(shard.state)}">
        <td>${shard.index}</td><td>${badge(shard.state)}</td><td>${html(shard.instance ?? "")}</td>
        <td>${html(duration(shard.durationMs))}</td><td>${shard.attempts}</td><td>${shard.claims}</td>
        <td class="error-text">${html(shard.error ?? "")}</td></tr>`,
    )
    .join("");
  const counts = Object.entries(answer.counts)
    .map(([state, count]) => `${count} ${state}`)
    .join(", ");
  const reduce = answer.reduce;
  return `<h2>Shards</h2>
    <p id="run-shards-summary">Round ${answer.round}: ${answer.shardCount} shard(s): ${html(counts || "none")};
      reduce ${html(reduce.state)}${reduce.runs > 1 ? ` (started ${reduce.runs} times)` : ""}${reduce.error ? `: <span class="error-text">${html(reduce.error)}</span>` : ""};
      coordinator ${html(answer.coordinator ?? "?")}${answer.detail ? `<br><span class="small">${html(answer.detail)}</span>` : ""}</p>
    <div class="scroll"><table id="run-shards"><thead><tr><th>Shard</th><th>State</th><th>Instance</th><th>Duration</th><th>Attempts</th><th>Claims</th><th>Error</th></tr></thead>
      <tbody>${rows}</tbody></table></div>
    ${shards.length > LISTED ? `<p class="small">${shards.length - LISTED} more shard(s) not listed (failed and running ones come first).</p>` : ""}`;
}
