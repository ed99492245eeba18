-- The report's statements, loaded once by reports/selectors.py (`-- name: <name>` starts each).
-- bench/reports.py runs and EXPLAINs these same texts. Parameters are psycopg's named style.
--
-- Every statement starts from one user's runs submitted in the window, an index range scan of
-- run_owner_created_idx (owner_id, created_at DESC); history rows are reached from those runs
-- through history_run_started_idx (run_id, started_at). Neither reads another user's rows, so
-- the cost follows the user's own work in the window, not the size of the tables.
--
-- Definitions (docs/reports.md says the same for people):
--   outcome       completed | compensated | failed | cancelled | in_progress (pending, running,
--                 compensating) - the run's state now.
--   success rate  completed / (completed + compensated + failed); cancelled (someone chose to
--                 stop) and unfinished runs are not counted. NULL when nothing counted.
--   duration      finished_at - created_at of runs that have finished (any terminal outcome):
--                 submit to final answer. p50 / p95 are nearest-rank percentiles
--                 (percentile_disc: the smallest duration with at least p of them <= it).
--   retries       attempts that were not their step's first (attempt number > 1), whatever
--                 ended the attempt before (a failure, a timeout, a deferral, a requeue).
--   missed deadlines, one per deadline that passed:
--                 attempt_start    an attempt no agent started before its start_by (requeued)
--                 attempt_complete an attempt with no reply before its complete_by (timed_out:
--                                  the supervisor expired it)
--                 step_close       a step that gave up because its whole-step deadline
--                                  (close_by) passed (an 'errored' decision with give_up deadline)
--                 run              a run with a deadline that finished after it, or is still
--                                  going past it

-- name: report_groups
-- Figures per job (the job's runs) and per workflow (runs not from a job, e.g. orders), and one
-- total row over all of them (GROUPING SETS: `is_total`).
WITH runs AS (
    SELECT r.id, r.job_id, CASE WHEN r.job_id IS NULL THEN r.workflow ELSE '' END AS workflow,
           r.state, r.deadline, r.finished_at,
           extract(epoch FROM r.finished_at - r.created_at)::float8 AS duration
    FROM scheduler_run AS r
    WHERE r.owner_id = %(owner)s AND r.created_at >= %(start)s AND r.created_at < %(end)s
), history AS (
    SELECT h.run_id,
           count(*) FILTER (WHERE h.kind = 'attempt'
                            AND coalesce((h.detail ->> 'attempt')::int, 1) > 1) AS retries,
           count(*) FILTER (WHERE h.kind = 'attempt' AND h.status = 'requeued') AS missed_start,
           count(*) FILTER (WHERE h.kind = 'attempt' AND h.status = 'timed_out') AS missed_complete,
           count(*) FILTER (WHERE h.kind IN ('supervisor', 'scheduler') AND h.status = 'errored'
                            AND h.detail ->> 'give_up' = 'deadline') AS missed_close
    FROM runs JOIN scheduler_taskexecutionhistory AS h ON h.run_id = runs.id
    GROUP BY h.run_id
)
SELECT grouping(runs.job_id, runs.workflow) = 3 AS is_total,
       runs.job_id, runs.workflow,
       count(*) AS runs,
       count(*) FILTER (WHERE runs.state = 'completed') AS completed,
       count(*) FILTER (WHERE runs.state = 'compensated') AS compensated,
       count(*) FILTER (WHERE runs.state = 'failed') AS failed,
       count(*) FILTER (WHERE runs.state = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE runs.state IN ('pending', 'running', 'compensating')) AS in_progress,
       count(runs.duration) AS finished,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY runs.duration) AS p50,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY runs.duration) AS p95,
       coalesce(sum(history.retries), 0)::bigint AS retries,
       coalesce(sum(history.missed_start), 0)::bigint AS missed_start,
       coalesce(sum(history.missed_complete), 0)::bigint AS missed_complete,
       coalesce(sum(history.missed_close), 0)::bigint AS missed_close,
       count(*) FILTER (WHERE runs.deadline IS NOT NULL
                        AND coalesce(runs.finished_at, %(now)s) > runs.deadline) AS missed_run
FROM runs LEFT JOIN history ON history.run_id = runs.id
GROUP BY GROUPING SETS ((runs.job_id, runs.workflow), ())
ORDER BY is_total, runs.job_id NULLS LAST, runs.workflow

-- name: report_buckets
-- Runs per bucket of their submit time, by outcome, with the bucket's duration percentiles.
-- Buckets are wall-clock times of the report's time zone (date_bin on the local timestamp).
SELECT date_bin(%(bucket)s::interval, r.created_at AT TIME ZONE %(tz)s, TIMESTAMP '2000-01-01') AS bucket,
       count(*) FILTER (WHERE r.state = 'completed') AS completed,
       count(*) FILTER (WHERE r.state = 'compensated') AS compensated,
       count(*) FILTER (WHERE r.state = 'failed') AS failed,
       count(*) FILTER (WHERE r.state = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE r.state IN ('pending', 'running', 'compensating')) AS in_progress,
       count(r.finished_at) AS finished,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.created_at)::float8) AS p50,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.created_at)::float8) AS p95
FROM scheduler_run AS r
WHERE r.owner_id = %(owner)s AND r.created_at >= %(start)s AND r.created_at < %(end)s
GROUP BY 1
ORDER BY 1

-- name: report_jobs
-- The user's jobs, each with its last run (any time, not only in the window): one probe of
-- run_job_created_idx (job_id, created_at DESC) per job.
SELECT j.id, j.name, j.workflow, j.cron, j.timezone, j.enabled,
       last.id AS last_run_id, last.created_at AS last_run_at, last.state AS last_run_state
FROM scheduler_job AS j
LEFT JOIN LATERAL (
    SELECT r.id, r.created_at, r.state FROM scheduler_run AS r
    WHERE r.job_id = j.id ORDER BY r.created_at DESC LIMIT 1
) AS last ON true
WHERE j.owner_id = %(owner)s
ORDER BY j.name, j.id
