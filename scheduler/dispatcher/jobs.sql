-- Named statements of the jobs' transitions (scheduler/dispatcher/transitions.py), loaded once.
-- Each block starts with `-- name: <name>`. Parameters are psycopg's named style, %(name)s.
-- Time is the database clock: statement_timestamp().

-- name: scheduled_claim_due
-- The dispatcher's claim: due ScheduledJob rows of the shards this tick holds, in time order (partial index
-- scheduledjob_due_idx), with their jobs locked too, skipping any row or job another dispatcher,
-- a "run now", an edit or a settle holds. Locked until the batch commits: a crash before
-- commit leaves them due; two dispatchers never hold the same row. Paused jobs have no due rows
-- (pause removes or parks them); the enabled test guards a race with a pause. The jobs of an
-- owner or a workflow an operator paused have none either: their rows are held beyond the due
-- range (year 9999; scheduler/holds.md), so this claim needs no test of pauses. The shard of a
-- row is a hash of its job (`shard_of` in scheduler/dispatcher/transitions.py says the same):
-- every row of a job is in one shard, so a job's queued rows are started in order by one
-- dispatcher. The job's columns come with the row (`j.*`): the batch decides with them, and
-- reading the jobs again by id was a query and a fifth of a batch's time (bench/README.md, "Jobs").
-- Two steps: the rows first (`due`, at most `limit`), then their jobs by primary key. In one
-- join the planner read all 100,000 jobs to hash them, a third of a burst's batch (35 ms of a
-- claim's 37 ms at 100,000 due; 10 ms this way - bench/README.md, "Issue 20, fourth session").
-- A row whose job is held by another is locked but not returned (left as it was, due: the next
-- batch takes it); `locked` counts the rows locked, so a batch that lost some to held jobs is not
-- taken for the shard's last.
WITH due AS MATERIALIZED (
    SELECT sj.id, sj.job_id, sj.kind, sj.reason, sj.scheduled_for, sj.attempt, sj.next_execution_at
    FROM scheduler_scheduledjob AS sj
    WHERE sj.next_execution_at <= statement_timestamp()
      AND (hashint8(sj.job_id) & 2147483647) %% %(shards)s = ANY(%(held)s::int[])
    ORDER BY sj.next_execution_at, sj.id
    LIMIT %(limit)s
    FOR UPDATE OF sj SKIP LOCKED
)
SELECT due.id, due.job_id, due.kind, due.reason, due.scheduled_for, due.attempt, due.next_execution_at,
       statement_timestamp(), (SELECT count(*) FROM due) AS locked, j.*
FROM due
JOIN scheduler_job AS j ON j.id = due.job_id
WHERE j.enabled
ORDER BY due.next_execution_at, due.id
-- NO KEY UPDATE: exclusive among dispatchers, settles and "run now" (all take it or FOR
-- UPDATE), but not against FOR KEY SHARE - a settle queueing a dependent run of this job (its
-- foreign key check) does not wait for this batch (issue 30; scheduler/jobs.md, "Dependencies").
FOR NO KEY UPDATE OF j SKIP LOCKED

-- name: shards_ensure
-- Not a transition: the lease rows of shards 0 .. shards-1, written once (a setting may grow).
-- Only the missing ones are inserted: an insert that meets an existing row which a dispatcher's
-- open batch has renewed (updated) waits for that batch to end, even with ON CONFLICT DO NOTHING.
INSERT INTO scheduler_dispatchershard (shard, holder, leased_until, ticked_at)
SELECT s, '', NULL, NULL FROM generate_series(0, %(shards)s - 1) AS s
WHERE NOT EXISTS (SELECT 1 FROM scheduler_dispatchershard AS d WHERE d.shard = s)
ON CONFLICT (shard) DO NOTHING

-- name: shard_lease_take
-- Free -> held: of the shards with a row due now, the `take` least recently ticked whose lease
-- has ended (or that this holder already holds), not one of `skip` (drained in this tick),
-- skipping any another dispatcher is taking at this instant. A shard with nothing due is not
-- taken: an idle tick costs this one statement, and a tick woken for an occurrence goes to its
-- shard first. Guard: still free (or ours) when updated.
UPDATE scheduler_dispatchershard AS d
SET holder = %(holder)s, leased_until = statement_timestamp() + make_interval(secs => %(lease)s)
WHERE d.shard IN (
    SELECT f.shard FROM scheduler_dispatchershard AS f
    WHERE f.shard < %(shards)s AND NOT (f.shard = ANY(%(skip)s::smallint[]))
      AND (f.leased_until IS NULL OR f.leased_until <= statement_timestamp() OR f.holder = %(holder)s)
      AND EXISTS (
          SELECT 1 FROM scheduler_scheduledjob AS sj
          WHERE sj.next_execution_at <= statement_timestamp()
            AND (hashint8(sj.job_id) & 2147483647) %% %(shards)s = f.shard
      )
    ORDER BY f.ticked_at NULLS FIRST, f.shard
    LIMIT %(take)s
    FOR UPDATE SKIP LOCKED
) AND (d.leased_until IS NULL OR d.leased_until <= statement_timestamp() OR d.holder = %(holder)s)
RETURNING d.shard

-- name: shard_lease_renew
-- Held -> held longer, by its holder only (a lease that ended and was taken is not renewed:
-- the holder then stops firing those shards).
UPDATE scheduler_dispatchershard
SET leased_until = statement_timestamp() + make_interval(secs => %(lease)s)
WHERE shard = ANY(%(held)s::int[]) AND holder = %(holder)s AND leased_until > statement_timestamp()

-- name: shard_lease_release
-- Held -> free, ticked now; by its holder only.
UPDATE scheduler_dispatchershard
SET leased_until = NULL, ticked_at = statement_timestamp()
WHERE shard = ANY(%(held)s::int[]) AND holder = %(holder)s AND leased_until IS NOT NULL

-- name: shards_free_due
-- Not a transition: how many shards are free and have a row due now - more work than this
-- dispatcher is doing, for an idle one (the tick relays itself when there is).
SELECT count(*) FROM scheduler_dispatchershard AS d
WHERE d.shard < %(shards)s AND NOT (d.shard = ANY(%(skip)s::smallint[]))
  AND (d.leased_until IS NULL OR d.leased_until <= statement_timestamp())
  AND EXISTS (
      SELECT 1 FROM scheduler_scheduledjob AS sj
      WHERE sj.next_execution_at <= statement_timestamp()
        AND (hashint8(sj.job_id) & 2147483647) %% %(shards)s = d.shard
  )

-- name: firing_context
-- Not a transition: what a batch's decisions read under the claim's locks, in one statement -
-- each job's unfinished runs (is_run; partial index run_job_unfinished_idx) and each job whose
-- buffer slot is taken (a queued row of one of the buffer reasons). Job by job (a lateral
-- lookup; OFFSET 0 keeps the planner from flattening it into a join): in a burst the tables'
-- statistics are those of before it, and the planner then read every pending run and every
-- scheduled row to hash them (12 ms a batch of 1,000 at 50,000 fired, against ~1 ms;
-- bench/README.md, "Issue 20, fourth session"). The same for the dispatcher's other batch
-- statements that read by id.
SELECT true AS is_run, r.job_id, r.id, r.state
FROM unnest(%(job_ids)s::bigint[]) AS t(job_id)
CROSS JOIN LATERAL (
    SELECT r.job_id, r.id, r.state FROM scheduler_run AS r
    WHERE r.job_id = t.job_id AND r.job_id IS NOT NULL AND r.state IN ('pending', 'running', 'compensating')
    OFFSET 0
) AS r
UNION ALL
SELECT false, t.job_id, NULL::uuid, NULL
FROM unnest(%(job_ids)s::bigint[]) AS t(job_id)
WHERE EXISTS (
    SELECT 1 FROM scheduler_scheduledjob AS sj
    WHERE sj.job_id = t.job_id AND sj.kind = 'queued' AND sj.reason = ANY(%(reasons)s::text[])
    OFFSET 0
)

-- name: scheduled_next_due
-- The first row that comes due after now, and now (the database clock): the first entry of the
-- partial index scheduledjob_due_idx past now, whatever the number of jobs.
SELECT (SELECT next_execution_at FROM scheduler_scheduledjob
        WHERE next_execution_at > statement_timestamp()
        ORDER BY next_execution_at LIMIT 1),
       statement_timestamp()

-- name: scheduled_next_advance
-- A next row moves to its following occurrence. Guard: still the next row of the occurrence
-- that was claimed (kind = 'next', scheduled_for unchanged).
UPDATE scheduler_scheduledjob AS sj
SET scheduled_for = t.new_for, next_execution_at = t.due
FROM unnest(%(ids)s::bigint[], %(old_for)s::timestamptz[], %(new_for)s::timestamptz[], %(due)s::timestamptz[])
     AS t(id, old_for, new_for, due)
WHERE sj.id = t.id AND sj.kind = 'next' AND sj.scheduled_for = t.old_for
  -- The same rows again, as the primary key's index reads them: without it, the planner hashed
  -- the whole table once a batch in a burst (see firing_context).
  AND sj.id = ANY(%(ids)s::bigint[])

-- name: scheduled_delete
-- Rows whose occurrence started (queued, retry), or a next row with no following occurrence.
DELETE FROM scheduler_scheduledjob WHERE id = ANY(%(ids)s::bigint[])

-- name: scheduled_park
-- Due -> parked: the row waits for the job's unfinished run to end.
UPDATE scheduler_scheduledjob SET next_execution_at = NULL
WHERE id = ANY(%(ids)s::bigint[]) AND next_execution_at IS NOT NULL

-- name: scheduled_defer
-- Due -> due later: queued or retry rows whose owner is at the runs-in-flight quota wait
-- %(seconds)s seconds (fired then, if the owner has room; scheduler/limits.py).
UPDATE scheduler_scheduledjob
SET next_execution_at = statement_timestamp() + make_interval(secs => %(seconds)s)
WHERE id = ANY(%(ids)s::bigint[]) AND next_execution_at IS NOT NULL

-- name: scheduled_unpark_oldest
-- Parked -> due now: the oldest parked row (by occurrence, attempt) of each given job.
UPDATE scheduler_scheduledjob AS sj SET next_execution_at = statement_timestamp()
WHERE sj.id IN (
    SELECT DISTINCT ON (job_id) id FROM scheduler_scheduledjob
    WHERE job_id = ANY(%(job_ids)s::bigint[]) AND next_execution_at IS NULL
    ORDER BY job_id, scheduled_for, attempt
) AND sj.next_execution_at IS NULL

-- name: scheduled_unpark_all
-- Parked -> due now: every parked row of a job (its resume).
UPDATE scheduler_scheduledjob SET next_execution_at = statement_timestamp()
WHERE job_id = %(job_id)s AND next_execution_at IS NULL

-- name: scheduled_park_all
-- Due -> parked for every queued or retry row of a job (its pause); its next row is deleted.
WITH parked AS (
    UPDATE scheduler_scheduledjob SET next_execution_at = NULL
    WHERE job_id = %(job_id)s AND kind <> 'next' AND next_execution_at IS NOT NULL
)
DELETE FROM scheduler_scheduledjob WHERE job_id = %(job_id)s AND kind = 'next'

-- name: job_firings_add
-- Scheduled occurrences accepted (started or buffered) count toward max_firings.
UPDATE scheduler_job AS j SET firing_count = j.firing_count + t.n
FROM unnest(%(ids)s::bigint[], %(counts)s::integer[]) AS t(id, n)
WHERE j.id = t.id

-- name: job_finish
-- Scheduled -> finished: no more occurrences (one-off fired, end passed, max firings reached).
UPDATE scheduler_job SET finished_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE id = ANY(%(ids)s::bigint[]) AND finished_at IS NULL

-- name: job_pause
-- Enabled -> paused, with the note; who did it and why is the job's history (an operator row).
WITH paused AS (
    UPDATE scheduler_job
    SET enabled = false, paused_note = %(note)s, paused_at = statement_timestamp(),
        updated_at = statement_timestamp()
    WHERE id = %(job_id)s AND enabled
    RETURNING id
)
INSERT INTO scheduler_taskexecutionhistory
    (job_id, kind, status, retry_count, worker, error, detail, started_at, ended_at)
SELECT id, 'operator', 'action', 0, %(actor)s, '', jsonb_build_object('reason', 'paused', 'note', %(note)s),
       statement_timestamp(), statement_timestamp()
FROM paused

-- name: job_resume
-- Paused -> enabled; who did it is the job's history (an operator row).
WITH resumed AS (
    UPDATE scheduler_job
    SET enabled = true, paused_note = '', paused_at = NULL, updated_at = statement_timestamp()
    WHERE id = %(job_id)s AND NOT enabled
    RETURNING id
)
INSERT INTO scheduler_taskexecutionhistory
    (job_id, kind, status, retry_count, worker, error, detail, started_at, ended_at)
SELECT id, 'operator', 'action', 0, %(actor)s, '', jsonb_build_object('reason', 'resumed'),
       statement_timestamp(), statement_timestamp()
FROM resumed

-- name: job_edit_record
-- Not a transition: who edited a job, and which fields, as the job's history (an operator row).
INSERT INTO scheduler_taskexecutionhistory
    (job_id, kind, status, retry_count, worker, error, detail, started_at, ended_at)
VALUES (%(job_id)s, 'operator', 'action', 0, %(actor)s, '',
        jsonb_build_object('reason', 'edited', 'changed', %(changed)s::text[]),
        statement_timestamp(), statement_timestamp())

-- name: job_runs_mark_settled
-- Ended, unsettled job runs -> settled (partial index run_job_unsettled_idx), skipping any run
-- or job another settle, a dispatcher batch or a "run now" holds. Returns what the jobs layer
-- decides on: the occurrence, its attempt and how the run ended.
WITH picked AS (
    SELECT r.id FROM scheduler_run AS r JOIN scheduler_job AS j ON j.id = r.job_id
    WHERE r.job_id IS NOT NULL AND NOT r.job_settled
      AND r.state IN ('completed', 'compensated', 'cancelled', 'failed')
    ORDER BY r.finished_at
    LIMIT %(limit)s
    -- NO KEY UPDATE of the job (see scheduled_claim_due): another settle queueing a dependent
    -- run of this job does not wait for this one, so two settles never wait for each other.
    FOR NO KEY UPDATE OF r, j SKIP LOCKED
)
UPDATE scheduler_run AS r SET job_settled = true
FROM picked WHERE r.id = picked.id AND NOT r.job_settled
RETURNING r.id, r.job_id, r.state, r.scheduled_for, r.job_attempt, r.finished_at, r.error,
          statement_timestamp()

-- name: job_history_open
-- -> a job occurrence's "started" history row, open (ended_at NULL; `job_history_close` closes
-- it once its run has ended): one per run the batch has just written, in the batch's
-- transaction, started at the run's created_at. The runs are read by their primary key. Guard:
-- a job's run (job_id set).
INSERT INTO scheduler_taskexecutionhistory
    (kind, status, lease, retry_count, worker, error, detail, started_at, ended_at, run_id, step_id,
     job_id, scheduled_for)
SELECT 'job', 'started', NULL, r.job_attempt, %(worker)s, '', jsonb_build_object('reason', t.reason),
       r.created_at, NULL, r.id, NULL, r.job_id, r.scheduled_for
FROM unnest(%(run_ids)s::uuid[], %(reasons)s::text[]) AS t(run_id, reason)
CROSS JOIN LATERAL (
    -- By primary key, run by run (see firing_context).
    SELECT r.id, r.job_attempt, r.created_at, r.job_id, r.scheduled_for FROM scheduler_run AS r
    WHERE r.id = t.run_id AND r.job_id IS NOT NULL
    OFFSET 0
) AS r

-- name: job_history_close
-- The open attempt row of each settled run closes with how its run ended. A run the supervisor
-- skipped because its first step was not started within its schedule-to-start window
-- (`run_skip_unstarted`: Cancelled, its error "skipped: not started within N s (backlog)")
-- closes as skipped, its reason that sentence and why it had started beside it, as an overlap
-- skip's row says why. The history rows are
-- found by their run ids (index on run_id), not by joining every open job row to the runs: that
-- join read all open job history rows - one per unfinished job run - for every settle batch, and
-- after a burst of 100,000 occurrences each batch took tens of seconds (bench/README.md, "Jobs").
UPDATE scheduler_taskexecutionhistory AS h
SET status = CASE WHEN r.state = 'cancelled' AND r.error LIKE 'skipped: %%' THEN 'skipped'
                  WHEN r.state = 'completed' THEN 'succeeded'
                  ELSE r.state END,
    ended_at = coalesce(r.finished_at, statement_timestamp()),
    error = left(r.error, 4000),
    detail = CASE WHEN r.state = 'cancelled' AND r.error LIKE 'skipped: %%'
                  THEN h.detail || jsonb_build_object('reason', r.error, 'start_reason', h.detail -> 'reason')
                  ELSE h.detail END
FROM scheduler_run AS r
WHERE h.run_id = ANY(%(run_ids)s::uuid[]) AND r.id = h.run_id AND h.kind = 'job' AND h.ended_at IS NULL

-- name: job_history_record
-- Not a transition: a batch's job history rows - occurrences skipped or buffered, and starts
-- refused (input no longer valid) - in one statement, arrays in.
INSERT INTO scheduler_taskexecutionhistory
    (job_id, kind, status, scheduled_for, retry_count, worker, error, detail, started_at, ended_at)
SELECT t.job_id, 'job', t.status, t.scheduled_for, t.retry_count, %(worker)s, t.error, t.detail::jsonb,
       %(at)s, %(at)s
FROM unnest(%(job_ids)s::bigint[], %(statuses)s::text[], %(fors)s::timestamptz[],
            %(retries)s::integer[], %(errors)s::text[], %(details)s::text[])
     AS t(job_id, status, scheduled_for, retry_count, error, detail)

-- name: dependency_edges_from
-- Not a transition: the edges out of the given parent jobs, each with every parent of its child
-- (a child's gate is complete when all of them have arrived). Index: the parent's foreign key.
SELECT e.id, e.parent_id, e.child_id, e.condition,
       ARRAY(SELECT p.parent_id FROM scheduler_jobdependency AS p WHERE p.child_id = e.child_id),
       pj.name
FROM scheduler_jobdependency AS e JOIN scheduler_job AS pj ON pj.id = e.parent_id
WHERE e.parent_id = ANY(%(parent_ids)s::bigint[])
ORDER BY e.child_id, e.parent_id

-- name: job_runs_start_reason
-- Not a transition: why each settled run started (its open "started" history row's reason; a
-- backfill without dependents does not fire them).
SELECT h.run_id, coalesce(h.detail ->> 'start_reason', h.detail ->> 'reason', '')
FROM scheduler_taskexecutionhistory AS h
WHERE h.run_id = ANY(%(run_ids)s::uuid[]) AND h.kind = 'job'

-- name: dependency_children_share
-- Not a transition: the children about to get gate rows and queued rows, locked FOR KEY SHARE in
-- id order before any gate is: a job being deleted (FOR UPDATE, then its gates) is waited for
-- here, never while this settle holds a gate it wants (no deadlock).
SELECT id FROM scheduler_job WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR KEY SHARE

-- name: dependency_gates_arrive
-- Absent/open -> open (more parents arrived) or blocked: the parents' outcomes for a child's
-- logical time, one row per (child, time) - UNIQUE, so every settle of every dispatcher counts
-- into the same row, and the upsert holds its lock until commit (the fire below decides under
-- it). Rows in (child, time) order: two settles lock gates in the same order. `arrived` comes
-- as text ('1,2'): arrays of unequal lengths do not unnest. Guard: a gate already blocked keeps
-- its first reason. The gate's owner (in its unique key: decision record 55) is the child's,
-- filled by the table's trigger before the conflict check.
INSERT INTO scheduler_dependencygate AS g (child_id, logical_time, arrived, blocked, fired_at, created_at)
SELECT t.child_id, t.logical_time, string_to_array(t.arrived, ',')::bigint[], t.blocked, NULL,
       statement_timestamp()
FROM unnest(%(child_ids)s::bigint[], %(times)s::timestamptz[], %(arrived)s::text[], %(blocked)s::text[])
     AS t(child_id, logical_time, arrived, blocked)
ORDER BY t.child_id, t.logical_time
ON CONFLICT (child_id, logical_time, owner_id) DO UPDATE
SET arrived = ARRAY(SELECT DISTINCT x FROM unnest(g.arrived || excluded.arrived) AS x ORDER BY x),
    blocked = CASE WHEN g.blocked <> '' THEN g.blocked ELSE excluded.blocked END
RETURNING g.child_id, g.logical_time, g.arrived, g.blocked, g.fired_at

-- name: dependency_gates_fire
-- Open and complete -> fired, and the child's run for the logical time queued: a queued row
-- (reason 'dependency', due now; parked when the child is paused - its resume makes it due).
-- Guard: not fired, not blocked; the queued row is the occurrence's (job, time, attempt 0),
-- inserted once (ON CONFLICT: the child's own schedule already has that occurrence).
WITH fired AS (
    UPDATE scheduler_dependencygate AS g SET fired_at = statement_timestamp()
    FROM unnest(%(child_ids)s::bigint[], %(times)s::timestamptz[]) AS t(child_id, logical_time)
    WHERE g.child_id = t.child_id AND g.logical_time = t.logical_time
      AND g.fired_at IS NULL AND g.blocked = ''
    RETURNING g.child_id, g.logical_time
)
INSERT INTO scheduler_scheduledjob
    (job_id, kind, reason, scheduled_for, attempt, next_execution_at, created_at, owner_id)
SELECT f.child_id, 'queued', 'dependency', f.logical_time, 0,
       CASE WHEN j.enabled THEN statement_timestamp() END, statement_timestamp(), j.owner_id
FROM fired AS f JOIN scheduler_job AS j ON j.id = f.child_id
ORDER BY f.child_id, f.logical_time
ON CONFLICT (job_id, scheduled_for, attempt, owner_id) DO NOTHING
RETURNING job_id, scheduled_for

-- name: dependency_edges_record
-- Not a transition: each edge's last parent outcome (the job graph shows it). Guard: not older
-- than the one recorded.
UPDATE scheduler_jobdependency AS e
SET last_outcome = t.outcome, last_logical_time = t.logical_time, last_matched = t.matched
FROM unnest(%(ids)s::bigint[], %(outcomes)s::text[], %(times)s::timestamptz[], %(matched)s::boolean[])
     AS t(id, outcome, logical_time, matched)
WHERE e.id = t.id AND (e.last_logical_time IS NULL OR e.last_logical_time <= t.logical_time)

-- name: dependency_parents_busy
-- Not a transition: whether a job with children has a run not settled yet (going, or ended and
-- not settled): the dispatcher then ticks again within SAS["JOBS_DEPENDENTS_POLL"] s
-- (`jobs_dispatch_follow`), so a child's run is written soon after its parent's ends, not at
-- beat's next send. One probe of the partial indexes run_job_unfinished_idx /
-- run_job_unsettled_idx per parent; stops at the first.
SELECT EXISTS (
    SELECT 1 FROM (SELECT DISTINCT e.parent_id FROM scheduler_jobdependency AS e) AS p
    WHERE EXISTS (
        SELECT 1 FROM scheduler_run AS r
        WHERE r.job_id = p.parent_id AND r.job_id IS NOT NULL AND r.state IN ('pending', 'running', 'compensating')
    ) OR EXISTS (
        SELECT 1 FROM scheduler_run AS r
        WHERE r.job_id = p.parent_id AND r.job_id IS NOT NULL AND NOT r.job_settled
          AND r.state IN ('completed', 'compensated', 'cancelled', 'failed')
    )
)

-- name: hot_tables_analyze
-- The statistics of the tables a burst of firings changes (issue 29, item 5): due rows moved
-- to their next time, new runs and steps. Not the partitioned history: its ANALYZE samples
-- every partition kept (30 days) and the whole again. Waits at most a second for a lock (a
-- VACUUM or another ANALYZE of them holds it: then the statistics are being refreshed anyway).
-- bench/stats_after_burst.py times it.
ANALYZE scheduler_scheduledjob, scheduler_run, scheduler_step
