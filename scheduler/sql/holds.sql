-- Holds (issue 30): at most N at a time per key, and pauses of an owner or a workflow. Installed
-- by scheduler.transitions.statements.install_holds (migration 0032; CREATE OR REPLACE, the
-- triggers with CREATE OR REPLACE TRIGGER). The rules, their table and the choices:
-- scheduler/holds.md. Time is the database clock: statement_timestamp().


-- ---------------------------------------------------------------------------------------------
-- Concurrency keys. A run whose workflow computed a key from its input carries
-- (concurrency_key, concurrency_limit); its first step is written Waiting, and the run waits,
-- holding no worker, until sas_key_admit gives it a slot: Waiting -> Pending and admitted_at set.
-- A slot is held by an unfinished (pending, running, compensating) admitted run of the same
-- owner and key - a fact read from the runs, never a counter, so whatever ends a run (success,
-- failure, compensation, cancellation, a skip, an operator) frees its slot by ending it.
-- ---------------------------------------------------------------------------------------------

-- key_admit: give the free slots of (owner, key) to its oldest waiting runs (FIFO: created_at,
-- id). Serialized per key by a transaction-scoped advisory lock, so two admissions of one key
-- never both count the same free slot; the holders are counted after the lock is taken (each
-- statement of a PL/pgSQL function reads a fresh snapshot under READ COMMITTED). The limit is
-- the head waiter's (its workflow's, at its submit). A waiter another transaction holds (being
-- cancelled) is skipped. Returns the runs admitted.
-- p_wait false: give up at once when another transaction admits this key (the supervisor's
-- reconciliation: that transaction does the admitting).
CREATE OR REPLACE FUNCTION sas_key_admit(p_owner bigint, p_key text, p_wait boolean DEFAULT true) RETURNS uuid[]
LANGUAGE plpgsql AS $$
DECLARE
    v_lock bigint := hashtextextended('sas_key:' || coalesce(p_owner, 0)::text || ':' || p_key, 0);
    v_held integer;
    v_limit integer;
    v_admitted uuid[];
BEGIN
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(v_lock);
    ELSIF NOT pg_try_advisory_xact_lock(v_lock) THEN
        RETURN '{}'::uuid[];
    END IF;
    SELECT count(*) INTO v_held FROM scheduler_run
    WHERE coalesce(owner_id, 0) = coalesce(p_owner, 0) AND concurrency_key = p_key
      AND state IN ('pending', 'running', 'compensating') AND admitted_at IS NOT NULL;
    SELECT concurrency_limit INTO v_limit FROM scheduler_run
    WHERE coalesce(owner_id, 0) = coalesce(p_owner, 0) AND concurrency_key = p_key
      AND state = 'pending' AND admitted_at IS NULL
    ORDER BY created_at, id LIMIT 1;
    IF v_limit IS NULL OR v_held >= v_limit THEN
        RETURN '{}'::uuid[];
    END IF;
    WITH next AS (
        SELECT id FROM scheduler_run
        WHERE coalesce(owner_id, 0) = coalesce(p_owner, 0) AND concurrency_key = p_key
          AND state = 'pending' AND admitted_at IS NULL
        ORDER BY created_at, id
        LIMIT v_limit - v_held
        FOR UPDATE SKIP LOCKED
    ), admitted AS (
        UPDATE scheduler_run AS r
        SET admitted_at = statement_timestamp(), updated_at = statement_timestamp()
        FROM next WHERE r.id = next.id AND r.admitted_at IS NULL
        RETURNING r.id
    ), first_steps AS (
        -- Its schedule-to-start window starts now: the wait for a slot is not a backlog.
        UPDATE scheduler_step AS s
        SET process_state = 'pending', not_before = statement_timestamp(),
            expires_at = statement_timestamp() + (s.expires_at - s.created_at),
            updated_at = statement_timestamp()
        FROM admitted AS a
        WHERE s.run_id = a.id AND s.kind = 'forward' AND s.seq = 0 AND s.process_state = 'waiting'
    )
    SELECT coalesce(array_agg(id), '{}') INTO v_admitted FROM admitted;
    RETURN v_admitted;
END;
$$;


-- runs_key_hold: new runs (their submit's transaction, right after runs_insert_many) take their
-- keys; their first steps Pending -> Waiting; then each key admits (keys in a fixed order, so
-- two batches that admit the same keys take their locks in the same order).
-- Guard: the first step still Pending and never claimed (attempts = 0).
CREATE OR REPLACE FUNCTION sas_runs_key_hold(p_run_ids uuid[], p_keys text[], p_limits integer[]) RETURNS uuid[]
LANGUAGE plpgsql AS $$
DECLARE
    v_admitted uuid[] := '{}';
    r record;
BEGIN
    UPDATE scheduler_run AS run
    SET concurrency_key = k.key, concurrency_limit = k.lim
    FROM unnest(p_run_ids, p_keys, p_limits) AS k(id, key, lim)
    WHERE run.id = k.id AND run.state = 'pending' AND run.admitted_at IS NULL;
    UPDATE scheduler_step AS s
    SET process_state = 'waiting', updated_at = statement_timestamp()
    WHERE s.run_id = ANY(p_run_ids) AND s.kind = 'forward' AND s.seq = 0
      AND s.process_state = 'pending' AND s.attempts = 0;
    FOR r IN
        SELECT DISTINCT owner_id, concurrency_key FROM scheduler_run
        WHERE id = ANY(p_run_ids) AND concurrency_key IS NOT NULL
        ORDER BY owner_id, concurrency_key
    LOOP
        v_admitted := v_admitted || sas_key_admit(r.owner_id, r.concurrency_key);
    END LOOP;
    RETURN v_admitted;
END;
$$;


-- The run's end frees its slot: the next waiter of its key is admitted in the same transaction
-- as the transition that ended it, whichever it was (they all write scheduler_run.state).
CREATE OR REPLACE FUNCTION sas_run_key_release() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM sas_key_admit(NEW.owner_id, NEW.concurrency_key);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER run_key_release
AFTER UPDATE OF state ON scheduler_run
FOR EACH ROW
WHEN (OLD.concurrency_key IS NOT NULL
      AND NEW.state IN ('completed', 'compensated', 'cancelled', 'failed')
      AND OLD.state IN ('pending', 'running', 'compensating'))
EXECUTE FUNCTION sas_run_key_release();


-- ---------------------------------------------------------------------------------------------
-- Pauses. A scheduler_pause row holds a whole owner or a whole workflow: every Pending step of
-- its scope has not_before = sas_held() (year 9999), which every claim already refuses (the pick, the admit,
-- the claim statement all test not_before <= now) - so no claim path needs to know about pauses.
-- A step that becomes Pending while its scope is paused (a reply's next step, a retry, a new
-- run, a compensation, an admission) is held by the BEFORE trigger below as it is written.
-- The jobs of a paused scope are held the same way: every ScheduledJob row of theirs that has
-- a due time gets next_execution_at = sas_held(), out of the dispatcher's due range (its claim,
-- its shard lease and its wake-up all test next_execution_at <= now), so the dispatcher does
-- not fire their occurrences and pays nothing for them; the resume puts each `next` row back at
-- its occurrence's time, so the dispatcher sees the occurrences missed while paused as a
-- misfire and applies the job's catch-up policy (scheduler/jobs.md, "Misfires").
-- ---------------------------------------------------------------------------------------------

-- held: the not_before of a held step. Not 'infinity': Python's datetime (Django, psycopg) cannot
-- load it, and every page that shows a step would fail; year 9999 is the last it can.
CREATE OR REPLACE FUNCTION sas_held() RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '9999-12-31 00:00:00+00'::timestamptz
$$;

-- paused: is the step of (owner, run) in a paused scope?
-- PL/pgSQL, not SQL: a SQL function called from a trigger's PL/pgSQL expression is planned again
-- at every call (157 us a row on this machine, against a few with PL/pgSQL's cached plans;
-- bench/pause.py, decision 52) - and the triggers below call these once per row written.
CREATE OR REPLACE FUNCTION sas_paused(p_owner bigint, p_run_id uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM scheduler_pause WHERE scope = 'owner' AND owner_id = p_owner)
        OR EXISTS (SELECT 1 FROM scheduler_pause AS p JOIN scheduler_run AS r ON r.workflow = p.workflow
                   WHERE p.scope = 'workflow' AND r.id = p_run_id);
END;
$$;

-- The pause that holds the step is locked FOR KEY SHARE until this transaction ends: a resume
-- (its DELETE) waits for it, then releases the step it can now see. Without the lock a resume
-- racing this write released the held steps it saw, not this one, which stayed held with no
-- pause (bench/pause.py found four such steps in 1,400; decision 52). A resume that deleted the
-- pause first makes this lock wait for its commit, then find no pause: the step is not held.
CREATE OR REPLACE FUNCTION sas_step_hold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- No pause at all (the common case): one probe of an empty table.
    IF NEW.not_before <> sas_held() AND EXISTS (SELECT 1 FROM scheduler_pause) THEN
        PERFORM 1 FROM scheduler_pause AS p
        WHERE (p.scope = 'owner' AND p.owner_id = NEW.owner_id)
           OR (p.scope = 'workflow'
               AND p.workflow = (SELECT r.workflow FROM scheduler_run AS r WHERE r.id = NEW.run_id))
        FOR KEY SHARE;
        IF FOUND THEN
            NEW.not_before := sas_held();
        END IF;
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER step_hold_if_paused
BEFORE INSERT OR UPDATE OF process_state ON scheduler_step
FOR EACH ROW
WHEN (NEW.process_state = 'pending')
EXECUTE FUNCTION sas_step_hold();


-- job_paused: is the job in a paused scope (its owner's, or its workflow's)? PL/pgSQL: see
-- sas_paused.
CREATE OR REPLACE FUNCTION sas_job_paused(p_job_id bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM scheduler_job AS j JOIN scheduler_pause AS p
            ON (p.scope = 'owner' AND p.owner_id = j.owner_id)
            OR (p.scope = 'workflow' AND p.workflow = j.workflow)
        WHERE j.id = p_job_id
    );
END;
$$;

-- A ScheduledJob row given a due time while its job's scope is paused (a new job's first
-- occurrence, a job resumed or edited, a retry, a parked row unparked by a run's end, a
-- dependency's or a catch-up's queued row) is held at the end of the statement that wrote it,
-- in its transaction (nobody sees it due). Parked rows (NULL) stay parked: a pause of the job
-- itself (scheduled_park_all) parks held rows as it parks due ones.
-- Once per statement, not per row: the dispatcher writes a row per occurrence it fires (the next
-- row moved on, queued rows), and a row trigger cost 14 us a row with no pause at all against
-- one probe of the empty scheduler_pause per statement here (bench/pause.py, decision 52).
-- Its own UPDATE fires it again, with only held rows: the second test below ends that. The
-- pauses that hold the rows are locked FOR KEY SHARE to this transaction's end first, as
-- sas_step_hold does (a resume waits for this write, then releases its rows); the UPDATE after
-- the lock reads a fresh snapshot, so a pause a resume deleted meanwhile holds nothing.
CREATE OR REPLACE FUNCTION sas_scheduled_hold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM scheduler_pause)
       OR NOT EXISTS (SELECT 1 FROM written WHERE next_execution_at <> sas_held()) THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM scheduler_pause AS p
    WHERE EXISTS (
        SELECT 1 FROM written AS w JOIN scheduler_job AS j ON j.id = w.job_id
        WHERE w.next_execution_at <> sas_held()
          AND ((p.scope = 'owner' AND p.owner_id = j.owner_id)
               OR (p.scope = 'workflow' AND p.workflow = j.workflow))
    )
    ORDER BY p.id
    FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Set-based (a join, not sas_job_paused per row: 16 us a row while another owner is paused).
    UPDATE scheduler_scheduledjob AS sj
    SET next_execution_at = sas_held()
    FROM written AS w JOIN scheduler_job AS j ON j.id = w.job_id JOIN scheduler_pause AS p
        ON (p.scope = 'owner' AND p.owner_id = j.owner_id)
        OR (p.scope = 'workflow' AND p.workflow = j.workflow)
    WHERE sj.id = w.id AND w.next_execution_at <> sas_held();
    RETURN NULL;
END;
$$;

-- Two triggers, one function: PostgreSQL gives transition tables to one-event triggers only.
CREATE OR REPLACE TRIGGER scheduled_hold_if_paused_insert
AFTER INSERT ON scheduler_scheduledjob
REFERENCING NEW TABLE AS written
FOR EACH STATEMENT
EXECUTE FUNCTION sas_scheduled_hold();

CREATE OR REPLACE TRIGGER scheduled_hold_if_paused_update
AFTER UPDATE ON scheduler_scheduledjob
REFERENCING NEW TABLE AS written
FOR EACH STATEMENT
EXECUTE FUNCTION sas_scheduled_hold();


-- pauses_hold: every Pending step of every paused scope not yet held, held (the pause's own
-- statement, and the supervisor's every tick: a step made Pending by a statement that started
-- before the pause committed did not see it). Nothing to do without a pause.
CREATE OR REPLACE FUNCTION sas_pauses_hold() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_owner_held integer;
    v_workflow_held integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM scheduler_pause) THEN
        RETURN 0;
    END IF;
    UPDATE scheduler_step AS s
    SET not_before = sas_held(), updated_at = statement_timestamp()
    FROM scheduler_pause AS p
    WHERE p.scope = 'owner' AND s.owner_id = p.owner_id
      AND s.process_state = 'pending' AND s.not_before <> sas_held();
    GET DIAGNOSTICS v_owner_held = ROW_COUNT;
    UPDATE scheduler_step AS s
    SET not_before = sas_held(), updated_at = statement_timestamp()
    FROM scheduler_run AS r JOIN scheduler_pause AS p ON p.scope = 'workflow' AND p.workflow = r.workflow
    WHERE s.run_id = r.id AND r.state IN ('pending', 'running', 'compensating')
      AND s.process_state = 'pending' AND s.not_before <> sas_held();
    GET DIAGNOSTICS v_workflow_held = ROW_COUNT;
    RETURN v_owner_held + v_workflow_held;
END;
$$;


-- occurrences_hold: every ScheduledJob row with a due time of every paused scope's jobs, held
-- (the pause's own transaction, and the supervisor's every tick: a dispatcher batch that
-- claimed before the pause committed writes its rows after it). One statement; nothing to do
-- without a pause. Jobs by owner through scheduler_job's owner index, their rows through the
-- (job, scheduled_for, attempt) unique index.
CREATE OR REPLACE FUNCTION sas_occurrences_hold() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_held integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM scheduler_pause) THEN
        RETURN 0;
    END IF;
    UPDATE scheduler_scheduledjob AS sj
    SET next_execution_at = sas_held()
    FROM scheduler_job AS j JOIN scheduler_pause AS p
        ON (p.scope = 'owner' AND p.owner_id = j.owner_id)
        OR (p.scope = 'workflow' AND p.workflow = j.workflow)
    WHERE sj.job_id = j.id AND sj.next_execution_at IS NOT NULL AND sj.next_execution_at <> sas_held();
    GET DIAGNOSTICS v_held = ROW_COUNT;
    RETURN v_held;
END;
$$;


-- pause_release: the pause ends (its row deleted: the operator's resume). Its scope's held steps
-- not held by another pause are due now; the deadlines of its unfinished work are shifted by
-- the time it was paused (frozen while paused): the whole-step deadline (close_by) of Pending and
-- Waiting steps, and a job occurrence's schedule-to-start (expires_at). A Processing step past
-- its attempt's deadline, which the sweep left alone while paused, is swept at the next tick (its
-- attempt did end). Its jobs' held ScheduledJob rows come back: a `next` row due at its
-- occurrence's time (past, when the pause outlasted it: the dispatcher then applies the job's
-- catch-up policy to the occurrences missed, as after its own downtime - scheduler/jobs.md,
-- "Misfires"; the occurrence's jitter is not applied again), a queued or retry row due now.
-- Returns {"released": steps due again, "occurrences": ScheduledJob rows due again,
-- "paused_seconds": the pause's length}, or NULL when no such pause (resumed already).
CREATE OR REPLACE FUNCTION sas_pause_release(p_pause_id bigint) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_pause record;
    v_paused interval;
    v_released integer;
    v_occurrences integer;
BEGIN
    DELETE FROM scheduler_pause WHERE id = p_pause_id RETURNING * INTO v_pause;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_paused := statement_timestamp() - v_pause.created_at;
    WITH scope AS (
        SELECT s.id FROM scheduler_step AS s
        WHERE v_pause.scope = 'owner' AND s.owner_id = v_pause.owner_id
          AND s.process_state IN ('pending', 'waiting')
        UNION ALL
        SELECT s.id FROM scheduler_run AS r JOIN scheduler_step AS s ON s.run_id = r.id
        WHERE v_pause.scope = 'workflow' AND r.workflow = v_pause.workflow
          AND r.state IN ('pending', 'running', 'compensating') AND s.process_state IN ('pending', 'waiting')
    ), released AS (
        UPDATE scheduler_step AS s
        SET not_before = CASE WHEN s.not_before = sas_held() THEN statement_timestamp() ELSE s.not_before END,
            close_by = s.close_by + v_paused,
            expires_at = s.expires_at + v_paused,
            updated_at = statement_timestamp()
        FROM scope
        WHERE s.id = scope.id AND NOT sas_paused(s.owner_id, s.run_id)
        RETURNING s.process_state, s.not_before
    ), occurrences AS (
        -- Held rows are the far end of the due index (next_execution_at = sas_held()).
        UPDATE scheduler_scheduledjob AS sj
        SET next_execution_at = CASE WHEN sj.kind = 'next' THEN sj.scheduled_for ELSE statement_timestamp() END
        FROM scheduler_job AS j
        WHERE sj.next_execution_at = sas_held() AND j.id = sj.job_id
          AND ((v_pause.scope = 'owner' AND j.owner_id = v_pause.owner_id)
               OR (v_pause.scope = 'workflow' AND j.workflow = v_pause.workflow))
          AND NOT sas_job_paused(j.id)
        RETURNING sj.id
    )
    SELECT count(*) FILTER (WHERE process_state = 'pending'), (SELECT count(*) FROM occurrences)
    INTO v_released, v_occurrences FROM released;
    RETURN jsonb_build_object('released', v_released, 'occurrences', v_occurrences,
                              'paused_seconds', extract(epoch FROM v_paused));
END;
$$;


-- holds_reconcile: the supervisor's tick - hold what a pause missed (sas_pauses_hold, and
-- sas_occurrences_hold for its jobs' occurrences), and give
-- any free slot to its key's waiters (a key whose release was rolled back with its transaction,
-- a limit raised). Bounded: p_batch keys; a key another transaction is admitting is skipped.
CREATE OR REPLACE FUNCTION sas_holds_reconcile(p_batch integer) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_held integer;
    v_occurrences integer;
    v_admitted uuid[] := '{}';
    r record;
BEGIN
    v_held := sas_pauses_hold();
    v_occurrences := sas_occurrences_hold();
    FOR r IN
        SELECT DISTINCT owner_id, concurrency_key FROM scheduler_run
        WHERE concurrency_key IS NOT NULL AND state = 'pending' AND admitted_at IS NULL
        ORDER BY owner_id, concurrency_key
        LIMIT p_batch
    LOOP
        v_admitted := v_admitted || sas_key_admit(r.owner_id, r.concurrency_key, false);
    END LOOP;
    RETURN jsonb_build_object('held', v_held, 'held_occurrences', v_occurrences,
                              'admitted', cardinality(v_admitted));
END;
$$;
