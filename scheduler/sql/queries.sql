-- Named statements of the engine's transitions, loaded once by scheduler/transitions/statements.py.
-- Each block starts with `-- name: <name>`; the text up to the next such line is the statement.
-- The hot transitions are functions (functions.sql); these call them, or are single
-- conditional statements themselves. Parameters are psycopg's named style, %(name)s.

-- name: step_claim
SELECT sas_step_claim(%(ids)s::bigint[], %(instance)s)

-- name: step_claim_if_room
-- claim, for those of the steps whose bulkhead has a free slot for them (sas_step_admit: the
-- submit's claim of a new run's first step, a reply's of its run's next step - backpressure and
-- claim in one round trip).
SELECT sas_step_claim(sas_step_admit(%(ids)s::bigint[], %(bulkheads)s::jsonb), %(instance)s)

-- name: step_claim_due
SELECT sas_step_claim_due(%(instance)s, %(limit)s, %(operation)s, %(exclude)s::text[], %(run_id)s::uuid,
                          %(bulkheads)s::jsonb)

-- name: step_succeed
SELECT sas_step_succeed(%(step_id)s, %(lease)s::uuid, %(result)s::jsonb, %(instance)s, %(claim_next)s,
                        %(observed_ok)s, %(bulkheads)s::jsonb)

-- name: step_fail
SELECT sas_step_fail(%(ids)s::bigint[], %(leases)s::uuid[], %(errors)s::text[], %(reached)s::boolean[],
                     %(cause)s, %(count)s, %(min_backoff)s, %(actor)s, %(history_kind)s, %(require_live)s)

-- name: run_skip_unstarted
SELECT sas_run_skip_unstarted(%(batch)s)

-- name: holds_reconcile
-- The supervisor's tick: pauses' missed steps and occurrences held, keys' free slots given (holds.sql).
SELECT sas_holds_reconcile(%(batch)s)

-- name: runs_key_hold
-- New runs take their concurrency keys and wait for a slot, or are admitted (holds.sql).
SELECT sas_runs_key_hold(%(run_ids)s::uuid[], %(keys)s::text[], %(limits)s::integer[])

-- name: pauses_hold
SELECT sas_pauses_hold()

-- name: occurrences_hold
-- The jobs of paused scopes: their ScheduledJob rows with a due time held (holds.sql).
SELECT sas_occurrences_hold()

-- name: pause_release
SELECT sas_pause_release(%(pause_id)s)

-- name: step_due_for_supervision
-- The supervisor's batch: Processing steps past their first deadline - start_by while no agent
-- has been seen starting them, complete_by after - oldest first, skipping rows a reply or
-- another sweep holds (partial index step_processing_deadline_idx). Locked until the batch's
-- transitions commit. A step of a paused owner or workflow is left alone while the pause lasts
-- (issue 30: its deadlines are frozen; scheduler/holds.md) - no pause at all costs one probe.
SELECT id, lease, start_by, complete_by, statement_timestamp()
FROM scheduler_step
WHERE process_state = 'processing' AND coalesce(start_by, complete_by) < statement_timestamp()
  AND (NOT EXISTS (SELECT 1 FROM scheduler_pause) OR NOT sas_paused(owner_id, run_id))
ORDER BY coalesce(start_by, complete_by)
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED

-- name: step_request_held
-- What an agent may act on (issue 26): the request of a step while it is Processing under this
-- lease for this operation; no row otherwise (forged, replayed, taken back, cancelled, another
-- operation). One primary-key lookup, on every attempt's path. The row is fetched by id alone
-- (a MATERIALIZED CTE is planned on its own): with `process_state = 'processing'` beside the id,
-- the planner took the partial index of Processing steps on small or stale statistics and
-- filtered every step in flight for the id - 300 in flight halved a burst's orders/s.
WITH s AS MATERIALIZED (
    SELECT payload, idempotency_key, complete_by, start_by, timeout, attempts, heartbeat_window,
           lease, process_state, operation
    FROM scheduler_step
    WHERE id = %(step_id)s
)
SELECT payload, idempotency_key, complete_by, start_by, extract(epoch FROM timeout)::float8,
       attempts, extract(epoch FROM heartbeat_window)::float8
FROM s
WHERE lease = %(lease)s::uuid AND process_state = 'processing' AND operation = %(operation)s

-- name: step_mark_started
-- Processing (not yet seen started) -> Processing (started): its agent started it before
-- start_by, so from now on only complete_by bounds it.
UPDATE scheduler_step AS s
SET start_by = NULL, updated_at = statement_timestamp()
FROM unnest(%(ids)s::bigint[], %(leases)s::uuid[]) AS t(id, lease)
WHERE s.id = t.id AND s.lease = t.lease AND s.process_state = 'processing' AND s.start_by IS NOT NULL

-- name: step_mark_done
SELECT sas_step_mark_done(%(step_id)s, %(actor)s, %(reason)s)

-- name: reply_ignored
SELECT sas_reply_ignored(%(step_id)s, %(lease)s::uuid, %(outcome)s, %(worker)s, %(error)s, %(result)s::jsonb)

-- name: step_fail_permanent
-- Processing -> Error: the remote refused for good (a declined card). Its effect did not
-- happen (error_permanent), so compensation skips it. Fenced like a success.
WITH s AS (
    UPDATE scheduler_step
    SET process_state = 'error', last_error = left(%(error)s, 4000), error_permanent = true,
        locked_by = NULL, finished_at = statement_timestamp(), updated_at = statement_timestamp()
    WHERE id = %(step_id)s AND process_state = 'processing' AND lease = %(lease)s::uuid
      AND complete_by > statement_timestamp()
    RETURNING id, run_id, name, kind
), closed AS (
    UPDATE scheduler_taskexecutionhistory
    SET status = 'failed_permanent', ended_at = statement_timestamp(), error = left(%(error)s, 4000)
    WHERE lease = %(lease)s::uuid AND kind = 'attempt' AND EXISTS (SELECT 1 FROM s)
      AND started_at BETWEEN sas_lease_time(%(lease)s::uuid) - interval '1 hour' AND sas_lease_time(%(lease)s::uuid) + interval '1 minute'
)
SELECT id, run_id, name, kind FROM s

-- name: step_advance
-- Waiting -> Pending, with the payload Python built from earlier results (a step whose
-- workflow definition says its payload needs them; others are made Pending by sas_step_succeed).
UPDATE scheduler_step
SET process_state = 'pending', payload = %(payload)s::jsonb, not_before = statement_timestamp(),
    updated_at = statement_timestamp()
WHERE id = %(step_id)s AND process_state = 'waiting'

-- name: step_first_delay
-- Pending -> Pending later: a new run's first step, never claimed, waits until %(at)s (a task
-- enqueued with run_after, tasksbackend/). A held step (a pause, year 9999) stays held.
UPDATE scheduler_step
SET not_before = %(at)s, updated_at = statement_timestamp()
WHERE id = %(step_id)s AND process_state = 'pending' AND failure_count = 0 AND not_before < %(at)s

-- name: run_compensate
-- Pending | Running -> Compensating: the run starts being undone (a step errored, or a cancel).
UPDATE scheduler_run
SET state = 'compensating', cancel_requested = cancel_requested OR %(cancel)s,
    error = left(%(reason)s, 4000), updated_at = statement_timestamp()
WHERE id = %(run_id)s AND state IN ('pending', 'running')
RETURNING cancel_requested

-- name: step_cancel_unstarted
-- Waiting | Pending -> Cancelled: the run's forward steps that had not started when it began
-- compensating. Returns them with `reached` (an earlier attempt may have had an effect).
UPDATE scheduler_step
SET process_state = 'cancelled', locked_by = NULL, updated_at = statement_timestamp()
WHERE run_id = %(run_id)s AND kind = 'forward' AND process_state IN ('waiting', 'pending')
RETURNING id, reached

-- name: step_stop
-- Processing -> Cancelled: a forward step in flight when its run began compensating. Its
-- agent may still be working until complete_by; its attempt is closed as cancelled.
WITH s AS (
    UPDATE scheduler_step
    SET process_state = 'cancelled', locked_by = NULL, finished_at = statement_timestamp(),
        updated_at = statement_timestamp()
    WHERE run_id = %(run_id)s AND kind = 'forward' AND process_state = 'processing'
    RETURNING id, lease, complete_by
), closed AS (
    UPDATE scheduler_taskexecutionhistory AS h
    SET status = 'cancelled', ended_at = statement_timestamp(), error = left(%(reason)s, 4000)
    FROM s WHERE h.lease = s.lease AND h.kind = 'attempt'
)
SELECT id, complete_by FROM s

-- name: step_mark_compensating
-- Processed -> Compensating: its compensation step has been scheduled.
UPDATE scheduler_step
SET process_state = 'compensating', updated_at = statement_timestamp()
WHERE id = ANY(%(ids)s::bigint[]) AND process_state = 'processed'

-- name: run_finish_compensation
-- Compensating -> Compensated (or Cancelled, when a cancel asked for it): nothing is left to
-- undo. (A run whose last compensation succeeds finishes inside sas_step_succeed.)
UPDATE scheduler_run
SET state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'compensated' END,
    finished_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE id = %(run_id)s AND state = 'compensating'
RETURNING state, correlation_id

-- name: runs_cancel_unstarted
-- Pending -> Cancelled: a job's runs none of whose steps was ever claimed (the job is being
-- deleted or paused), their Waiting / Pending steps -> Cancelled, a "cancelled" event each with
-- the reason. A run leaves Pending at its first claim (sas_step_claim), in the claim's statement;
-- rows a claim holds right now are skipped (SKIP LOCKED), and a run whose steps are not all
-- locked here, unclaimed (attempts = 0), is left alone: a run already started finishes.
WITH runs AS MATERIALIZED (
    SELECT r.id FROM scheduler_run AS r
    WHERE r.job_id = %(job_id)s AND r.state = 'pending'
    FOR UPDATE SKIP LOCKED
), steps AS MATERIALIZED (
    SELECT s.id, s.run_id, s.process_state IN ('waiting', 'pending') AND s.attempts = 0 AS unstarted
    FROM scheduler_step AS s WHERE s.run_id IN (SELECT id FROM runs)
    FOR UPDATE OF s SKIP LOCKED
), doomed AS MATERIALIZED (
    SELECT runs.id FROM runs
    WHERE NOT EXISTS (
        SELECT 1 FROM scheduler_step AS s
        WHERE s.run_id = runs.id
          AND NOT EXISTS (SELECT 1 FROM steps WHERE steps.id = s.id AND steps.unstarted))
), cancelled_steps AS (
    UPDATE scheduler_step AS s
    SET process_state = 'cancelled', locked_by = NULL, updated_at = statement_timestamp()
    WHERE s.run_id IN (SELECT id FROM doomed) AND s.process_state IN ('waiting', 'pending')
), cancelled AS (
    UPDATE scheduler_run AS r
    SET state = 'cancelled', cancel_requested = true, error = left(%(reason)s, 4000),
        finished_at = statement_timestamp(), updated_at = statement_timestamp()
    WHERE r.id IN (SELECT id FROM doomed) AND r.state = 'pending'
    RETURNING r.id, r.observed, r.correlation_id
), events AS (
    INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
    SELECT sas_uuid7(), c.id, NULL, 'cancelled',
           jsonb_build_object('reason', left(%(reason)s, 500), 'correlation_id', c.correlation_id),
           statement_timestamp()
    FROM cancelled AS c
    RETURNING id, run_id
)
SELECT c.id, c.observed, e.id FROM cancelled AS c JOIN events AS e ON e.run_id = c.id

-- name: run_fail
-- Compensating -> Failed: a compensation step errored; an operator must act.
UPDATE scheduler_run
SET state = 'failed', error = left(%(reason)s, 4000), finished_at = statement_timestamp(),
    updated_at = statement_timestamp()
WHERE id = %(run_id)s AND state = 'compensating'

-- name: run_resume_compensation
-- Failed -> Compensating: an operator resumes the undo after fixing the cause.
UPDATE scheduler_run
SET state = 'compensating', finished_at = NULL, updated_at = statement_timestamp()
WHERE id = %(run_id)s AND state = 'failed'

-- name: step_resume
-- Error -> Pending, with a fresh failure budget: the run's errored compensation steps, when an
-- operator resumes the run's compensation. Those in %(ids)s (refused for good: the caller asked
-- scheduler/keys.py's rule) send under the new key and generation given beside them; the others
-- keep theirs (issue 28).
UPDATE scheduler_step AS s
SET process_state = 'pending', failure_count = 0, locked_by = NULL, lease = NULL, complete_by = NULL,
    not_before = statement_timestamp(), finished_at = NULL, updated_at = statement_timestamp(),
    error_permanent = false,
    idempotency_key = coalesce(
        (SELECT r.key FROM unnest(%(ids)s::bigint[], %(keys)s::text[]) AS r(id, key) WHERE r.id = s.id),
        s.idempotency_key),
    key_generation = coalesce(
        (SELECT r.generation FROM unnest(%(ids)s::bigint[], %(generations)s::int[]) AS r(id, generation)
         WHERE r.id = s.id),
        s.key_generation)
WHERE s.run_id = %(run_id)s AND s.kind = 'compensation' AND s.process_state = 'error'
RETURNING s.id, s.name

-- name: step_resubmit
-- Error -> Pending (an operator resubmits it): a compensation step of a Failed run, with a fresh
-- failure budget; its idempotency key renewed (%(key)s at %(generation)s) when the caller's rule
-- says so (scheduler/keys.py: refused for good), else the same one (NULLs: the remote side
-- deduplicates by it). Only the
-- row the operator saw: `seen` is its updated_at on the confirmation page (a stale form changes
-- nothing). The run's Failed -> Compensating is `run_resume_compensation`, in the same transaction.
UPDATE scheduler_step
SET process_state = 'pending', failure_count = 0, locked_by = NULL, lease = NULL, complete_by = NULL,
    start_by = NULL, not_before = statement_timestamp(), finished_at = NULL,
    updated_at = statement_timestamp(), error_permanent = false,
    idempotency_key = coalesce(%(key)s::text, idempotency_key),
    key_generation = coalesce(%(generation)s::int, key_generation)
WHERE id = %(step_id)s AND kind = 'compensation' AND process_state = 'error'
  AND updated_at = %(seen)s
RETURNING run_id, name

-- name: step_resubmit_in_place
-- Error -> Pending (an operator resubmits it) for a FORWARD step whose run began compensating
-- but has undone nothing yet: no compensation step attempted (the caller holds them locked, so
-- no claim starts one meanwhile). In one statement: the run Compensating -> Running (its error
-- cleared); its compensation steps, never attempted, removed; the forward steps marked for undo
-- (Compensating) back to Processed, those cancelled after the errored one back to Waiting; the
-- errored step Pending with a fresh failure budget and its idempotency key renewed when the
-- caller's rule says so (%(key)s at %(generation)s; NULLs: the same key). Only the row
-- the operator saw (`seen`: its updated_at). Once a compensation was attempted the run is
-- undone instead, and then run again as a new run (new keys: the old ones' effects were undone,
-- and a remote service would answer them from its idempotency record).
WITH target AS (
    SELECT id, run_id, seq FROM scheduler_step
    WHERE id = %(step_id)s AND kind = 'forward' AND process_state = 'error' AND updated_at = %(seen)s
), reopened AS (
    UPDATE scheduler_run r
    SET state = 'running', error = '', finished_at = NULL, updated_at = statement_timestamp()
    FROM target t
    WHERE r.id = t.run_id AND r.state = 'compensating' AND NOT r.cancel_requested
      AND NOT EXISTS (
          SELECT 1 FROM scheduler_step c
          WHERE c.run_id = r.id AND c.kind = 'compensation'
            AND (c.attempts > 0 OR c.process_state NOT IN ('pending', 'waiting'))
      )
    RETURNING r.id
), dropped AS (
    DELETE FROM scheduler_step c
    USING reopened
    WHERE c.run_id = reopened.id AND c.kind = 'compensation' AND c.attempts = 0
      AND c.process_state IN ('pending', 'waiting')
    RETURNING c.id
), restored AS (
    UPDATE scheduler_step f
    SET process_state = CASE
            WHEN f.id = t.id THEN 'pending'
            WHEN f.process_state = 'compensating' THEN 'processed'
            ELSE 'waiting'
        END,
        failure_count = CASE WHEN f.id = t.id THEN 0 ELSE f.failure_count END,
        error_permanent = CASE WHEN f.id = t.id THEN false ELSE f.error_permanent END,
        idempotency_key = CASE WHEN f.id = t.id THEN coalesce(%(key)s::text, f.idempotency_key)
                               ELSE f.idempotency_key END,
        key_generation = CASE WHEN f.id = t.id THEN coalesce(%(generation)s::int, f.key_generation)
                              ELSE f.key_generation END,
        not_before = CASE WHEN f.id = t.id THEN statement_timestamp() ELSE f.not_before END,
        finished_at = CASE WHEN f.process_state = 'compensating' THEN f.finished_at END,
        locked_by = NULL, lease = NULL, complete_by = NULL, start_by = NULL,
        updated_at = statement_timestamp()
    FROM target t, reopened
    WHERE f.run_id = reopened.id AND f.kind = 'forward'
      AND (f.id = t.id OR f.process_state = 'compensating' OR (f.process_state = 'cancelled' AND f.seq > t.seq))
    RETURNING f.id, f.run_id, f.name
)
SELECT restored.run_id, restored.name, (SELECT count(*) FROM dropped)
FROM restored WHERE restored.id = %(step_id)s

-- name: step_compensation_retry
-- Pending -> Pending, due now with a fresh failure count: a compensation step waiting out its
-- backoff after failures (the "compensation keeps failing" alert), retried at once by an
-- operator who fixed the cause. Only the row the operator saw (`seen`, its updated_at).
UPDATE scheduler_step
SET not_before = statement_timestamp(), failure_count = 0, updated_at = statement_timestamp()
WHERE id = %(step_id)s AND kind = 'compensation' AND process_state = 'pending' AND failure_count > 0
  AND updated_at = %(seen)s
RETURNING run_id, name

-- name: step_continue
SELECT sas_step_continue(%(step_id)s, %(lease)s::uuid, %(instance)s, %(claim)s)

-- name: step_heartbeat
SELECT sas_step_heartbeat(%(step_id)s, %(lease)s::uuid, %(worker)s)

-- name: checkpoint_page_begin
-- A page's transaction begins: the step's row is locked while its lease is current (so until
-- this transaction ends no sweep, cancel or other claim can take the step, and a stale worker
-- gets no row), and the checkpoint row with it; the first page stamps started_at.
-- That lock must not outlive the attempt: the transaction's statement and idle-in-transaction
-- timeouts (SET LOCAL, through set_config) become the time left until complete_by, so the
-- database itself ends a page that hangs in a statement (a lock wait, a bad plan) or whose
-- worker stopped mid-page (frozen, stuck), and the supervisor can take the step back.
WITH s AS (
    SELECT id, greatest(1, ceil(extract(epoch FROM complete_by - clock_timestamp()) * 1000))::bigint::text AS ms
    FROM scheduler_step
    WHERE id = %(step_id)s AND process_state = 'processing' AND lease = %(lease)s::uuid
      AND complete_by > statement_timestamp()
    FOR UPDATE
)
UPDATE scheduler_checkpoint AS c
SET started_at = coalesce(c.started_at, statement_timestamp())
FROM s WHERE c.step_id = s.id
RETURNING c.page_size, c.page_start, c.pages_done, c.rows_done, c.total, c.completed,
          set_config('statement_timeout', s.ms, true),
          set_config('idle_in_transaction_session_timeout', s.ms, true)

-- name: checkpoint_advance
-- The page's effect is written; the checkpoint moves past it, in the same transaction. Guard:
-- the checkpoint is still where this page started (compare-and-set: a page is applied once)
-- and not completed, and the step is still held by this lease within its complete_by (a page
-- that ran past its deadline is not applied: its transaction rolls back, and the supervisor
-- takes the step back once the lock is released).
UPDATE scheduler_checkpoint AS c
SET page_start = %(next_start)s, pages_done = c.pages_done + 1, rows_done = c.rows_done + %(rows)s,
    total = coalesce(%(total)s, c.total), completed = %(completed)s, updated_at = statement_timestamp()
FROM scheduler_step AS s
WHERE c.step_id = %(step_id)s AND c.page_start = %(page_start)s AND NOT c.completed
  AND s.id = c.step_id AND s.process_state = 'processing' AND s.lease = %(lease)s::uuid
  AND s.complete_by > statement_timestamp()

-- name: heartbeat_complete
-- A heartbeat step's work is done: its HeartbeatStatus row in_progress | waiting -> completed, in the
-- transaction that writes the work's effect and accepts its success; the step's row is locked
-- while its lease is current, so the effect commits only under the lease.
WITH s AS (
    SELECT id FROM scheduler_step
    WHERE id = %(step_id)s AND process_state = 'processing' AND lease = %(lease)s::uuid
      AND complete_by > statement_timestamp()
    FOR UPDATE
)
UPDATE scheduler_heartbeatstatus AS h
SET status = 'completed', lease = %(lease)s::uuid, updated_at = statement_timestamp()
FROM s WHERE h.step_id = s.id AND h.status IN ('waiting', 'in_progress')
RETURNING h.step_id

-- name: runs_insert_many
-- New runs in one statement (the jobs dispatcher's batch; run_submit's one run): see
-- sas_runs_insert in functions.sql.
SELECT * FROM sas_runs_insert(
    %(run_ids)s::uuid[],
    %(workflows)s::text[],
    %(inputs)s::jsonb[],
    %(owner_ids)s::bigint[],
    %(priorities)s::smallint[],
    %(job_ids)s::bigint[],
    %(correlation_ids)s::text[],
    %(scheduled_for)s::timestamptz[],
    %(job_attempts)s::smallint[],
    %(deadlines)s::timestamptz[],
    %(observed)s::boolean[],
    %(schedule_to_start)s::interval[],
    %(shapes)s::integer[],
    %(first_payloads)s::jsonb[],
    %(shape_ids)s::integer[],
    %(shape_seqs)s::integer[],
    %(shape_names)s::text[],
    %(shape_operations)s::text[],
    %(shape_timeouts)s::interval[],
    %(shape_queue_timeouts)s::interval[],
    %(shape_schedule_to_close)s::interval[],
    %(shape_max_failures)s::integer[],
    %(shape_heartbeat_windows)s::interval[],
    %(shape_backoff_base)s::float8[],
    %(shape_backoff_max)s::float8[],
    %(later_run_ids)s::uuid[],
    %(later_seqs)s::integer[],
    %(later_payloads)s::jsonb[]
)
