/**
 * Every run start the database holds, as a FROM item `starts` with the columns of a start row
 * (timestamp, job_id, job_name, agenda_name, meta): the runs in progress
 * (cronwarden_run_starts), the start rows of runs that never finished (moved into agenda_logs by
 * the job's next start), and the records whose run's handler started (`meta.started`: the record
 * took the place of its start row; the start's time is `meta.startedAt`). See
 * src/engine/sql/runStarts.ts.
 */
export const STARTS = `(
  SELECT timestamp, job_id, job_name, agenda_name, meta FROM cronwarden_run_starts
  UNION ALL
  SELECT timestamp, job_id, job_name, agenda_name, meta FROM agenda_logs WHERE event = 'start'
  UNION ALL
  SELECT (meta->>'startedAt')::timestamptz, job_id, job_name, agenda_name, meta FROM agenda_logs
   WHERE event IN ('success', 'fail') AND meta->>'started' = 'true') starts`;
