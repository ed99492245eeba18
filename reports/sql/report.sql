-- The report's statements, loaded once by reports/selectors.py (`-- name: <name>` starts each).
-- bench/reports.py runs and EXPLAINs these same texts. Parameters are psycopg's named style.
--
-- Every statement starts from one user's runs submitted in the window, an index range scan of
-- run_owner_created_idx (owner_id, created_at DESC); history rows are reached from those runs
-- through the history's run_id index. Neither reads another user's rows, so the cost follows
-- the user's own work in the window, not the size of the tables. reports/selectors.py runs them
-- with JIT and parallel workers off (see `_fetch`).
--
-- Definitions (docs/using/reports.md says the same for people):
--   outcome       completed | compensated | failed | cancelled | in_progress (pending, running,
--                 compensating) - the run's state now.
--   success rate  completed / (completed + compensated + failed); cancelled (someone chose to
--                 stop) and unfinished runs are not counted. NULL when nothing counted.
--   duration      finished_at - created_at of runs that have finished (any terminal outcome):
--                 submit to final answer. p50 / p95 are nearest-rank percentiles
--                 (percentile_disc: the smallest duration with at least p of them <= it).
--   retries       attempts that were not their step's first (attempt number > 1), whatever
--                 ended the attempt before (a failure, a timeout, a deferral, a requeue) -
--                 except the next page of a paginated step: an attempt that ended 'continued'
--                 (its page committed) is followed by one that is no retry.
--   missed deadlines, one per deadline that passed:
--                 attempt_start    an attempt no agent started before its start_by (requeued)
--                 attempt_complete an attempt with no reply before its complete_by (timed_out:
--                                  the supervisor expired it)
--                 step_close       a step that gave up because its whole-step deadline
--                                  (close_by) passed (an 'errored' decision with give_up deadline)
--                 run              a run with a deadline that finished after it, or is still
--                                  going past it

-- name: report_groups
-- A run "compensated" that undid nothing (no compensation step of it reached processed: the
-- failed step was the first to have any effect) is counted failed: scheduler/outcomes.py, the
-- one rule the pages follow too (issue 28).
-- Figures per job (the job's runs) and per workflow (runs not from a job, e.g. orders), and one
-- total row over all of them (GROUPING SETS: `is_total`). The history is read per run, LATERAL:
-- one probe of the run_id index per run (a plain join lets the planner hash the whole history
-- table once a user's window holds a few thousand runs - bench/README.md has both plans).
SELECT grouping(r.job_id, r.workflow) = 3 AS is_total,
       r.job_id, r.workflow,
       count(*) AS runs,
       count(*) FILTER (WHERE r.state = 'completed') AS completed,
       count(*) FILTER (WHERE r.state = 'compensated' AND r.undone) AS compensated,
       count(*) FILTER (WHERE r.state = 'failed' OR (r.state = 'compensated' AND NOT r.undone)) AS failed,
       count(*) FILTER (WHERE r.state = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE r.state IN ('pending', 'running', 'compensating')) AS in_progress,
       count(r.duration) AS finished,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY r.duration) AS p50,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY r.duration) AS p95,
       coalesce(sum(h.retries), 0)::bigint AS retries,
       coalesce(sum(h.missed_start), 0)::bigint AS missed_start,
       coalesce(sum(h.missed_complete), 0)::bigint AS missed_complete,
       coalesce(sum(h.missed_close), 0)::bigint AS missed_close,
       count(*) FILTER (WHERE r.deadline IS NOT NULL
                        AND coalesce(r.finished_at, %(now)s) > r.deadline) AS missed_run
FROM (
    SELECT run.id, run.job_id, CASE WHEN run.job_id IS NULL THEN run.workflow ELSE '' END AS workflow,
           run.state, run.deadline, run.finished_at,
           extract(epoch FROM run.finished_at - run.created_at)::float8 AS duration,
           -- Only a compensated run is probed (one index probe by run id).
           run.state = 'compensated' AND EXISTS (
               SELECT 1 FROM scheduler_step AS s
               WHERE s.run_id = run.id AND s.kind = 'compensation' AND s.process_state = 'processed'
           ) AS undone
    FROM scheduler_run AS run
    WHERE run.owner_id = %(owner)s AND run.created_at >= %(start)s AND run.created_at < %(end)s
) AS r
CROSS JOIN LATERAL (
    SELECT greatest(count(*) FILTER (WHERE h.kind = 'attempt'
                                     AND coalesce((h.detail ->> 'attempt')::int, 1) > 1)
                    - count(*) FILTER (WHERE h.kind = 'attempt' AND h.status = 'continued'), 0) AS retries,
           count(*) FILTER (WHERE h.kind = 'attempt' AND h.status = 'requeued') AS missed_start,
           count(*) FILTER (WHERE h.kind = 'attempt' AND h.status = 'timed_out') AS missed_complete,
           count(*) FILTER (WHERE h.kind IN ('supervisor', 'scheduler') AND h.status = 'errored'
                            AND h.detail ->> 'give_up' = 'deadline') AS missed_close
    FROM scheduler_taskexecutionhistory AS h
    -- A run's history starts after the run: the bound lets the planner read only the
    -- partitions from the window's start on (the history is partitioned by day, issue 29).
    WHERE h.run_id = r.id AND h.started_at >= %(start)s
) AS h
GROUP BY GROUPING SETS ((r.job_id, r.workflow), ())
ORDER BY is_total, r.job_id NULLS LAST, r.workflow

-- name: report_buckets
-- Runs per bucket of their submit time, by outcome, with the bucket's duration percentiles.
-- Buckets are wall-clock times of the report's time zone (date_bin on the local timestamp).
SELECT date_bin(%(bucket)s::interval, r.created_at AT TIME ZONE %(tz)s, TIMESTAMP '2000-01-01') AS bucket,
       count(*) FILTER (WHERE r.state = 'completed') AS completed,
       count(*) FILTER (WHERE r.state = 'compensated' AND u.undone) AS compensated,
       count(*) FILTER (WHERE r.state = 'failed' OR (r.state = 'compensated' AND NOT u.undone)) AS failed,
       count(*) FILTER (WHERE r.state = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE r.state IN ('pending', 'running', 'compensating')) AS in_progress,
       count(r.finished_at) AS finished,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.created_at)::float8) AS p50,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - r.created_at)::float8) AS p95
FROM scheduler_run AS r
CROSS JOIN LATERAL (
    SELECT r.state = 'compensated' AND EXISTS (
        SELECT 1 FROM scheduler_step AS s
        WHERE s.run_id = r.id AND s.kind = 'compensation' AND s.process_state = 'processed'
    ) AS undone
) AS u
WHERE r.owner_id = %(owner)s AND r.created_at >= %(start)s AND r.created_at < %(end)s
GROUP BY 1
ORDER BY 1

-- name: report_jobs
-- The user's jobs, each with its last run (any time, not only in the window): one probe of
-- run_job_created_idx (job_id, created_at DESC) per job.
SELECT j.id, j.name, j.workflow, j.cron, j.timezone, j.enabled,
       last.id AS last_run_id, last.created_at AS last_run_at,
       CASE WHEN last.state = 'compensated' AND NOT EXISTS (
                SELECT 1 FROM scheduler_step AS s
                WHERE s.run_id = last.id AND s.kind = 'compensation' AND s.process_state = 'processed')
            THEN 'failed' ELSE last.state END AS last_run_state
FROM scheduler_job AS j
LEFT JOIN LATERAL (
    SELECT r.id, r.created_at, r.state FROM scheduler_run AS r
    WHERE r.job_id = j.id ORDER BY r.created_at DESC LIMIT 1
) AS last ON true
WHERE j.owner_id = %(owner)s
ORDER BY j.name, j.id
