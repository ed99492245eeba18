-- The engine's state machine, as PostgreSQL functions (installed by migration 0003 and every
-- later migration that calls scheduler.transitions.install_functions; CREATE OR REPLACE).
--
-- Each function is one transition (or one transition and the bookkeeping that must commit with
-- it: the attempt's history row, the run event). Its write is one conditional statement whose
-- WHERE clause carries the state it moves from (and the lease where there is one); the rows it
-- touched are the concurrency check. Time is the database clock: statement_timestamp(), never
-- now() (a transaction's start) and never a worker's clock.
--
-- The table of transitions (from, to, trigger, guard) is in scheduler/transitions.py. Every
-- state literal here is pinned to the models' choices by tests/scheduler/test_transitions.py.
--
-- Functions return jsonb: one value per call is cheaper to decode in Python than a set of
-- heterogeneous rows, and carries what the orchestration needs (claims to dispatch, events
-- to announce for observed runs, steps that errored).

-- Events of observed runs, as jsonb, for the `run_event` signal (webhooks listen to those runs
-- only, so runs nobody watches cost no extra query).
CREATE OR REPLACE FUNCTION sas_observed_events(p_event_ids bigint[]) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'id', e.id, 'event_id', e.event_id, 'run_id', e.run_id, 'step_id', e.step_id,
               'type', e.type, 'data', e.data, 'created_at', e.created_at) ORDER BY e.id), '[]'::jsonb)
    FROM scheduler_runevent AS e JOIN scheduler_run AS r ON r.id = e.run_id
    WHERE e.id = ANY(p_event_ids) AND r.observed
$$;


-- claim: Pending -> Processing, for the given ids that are still Pending and due.
-- Guard: process_state = 'pending' AND not_before <= now. Each claim gets a fresh lease and
-- complete_by = now + timeout; its attempt's history row is written; a run whose first claim
-- this is goes Pending -> Running with its "started" event. The callers lock the ids first
-- (FOR UPDATE SKIP LOCKED) where several schedulers may race.
CREATE OR REPLACE FUNCTION sas_step_claim(p_ids bigint[], p_instance text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_claims jsonb;
    v_events bigint[];
BEGIN
    WITH claimed AS (
        UPDATE scheduler_step AS s
        SET process_state = 'processing',
            locked_by = p_instance,
            lease = gen_random_uuid(),
            complete_by = statement_timestamp() + s.timeout,
            attempts = s.attempts + 1,
            updated_at = statement_timestamp()
        WHERE s.id = ANY(p_ids) AND s.process_state = 'pending' AND s.not_before <= statement_timestamp()
        RETURNING s.id, s.run_id, s.name, s.operation, s.lease, s.complete_by, s.idempotency_key,
                  s.payload, s.attempts, s.failure_count, s.priority, s.deadline, s.not_before
    ), history AS (
        INSERT INTO scheduler_taskexecutionhistory
            (step_id, run_id, kind, status, lease, retry_count, worker, error, detail, started_at)
        SELECT id, run_id, 'attempt', 'started', lease, failure_count, p_instance, '',
               jsonb_build_object('attempt', attempts, 'complete_by', complete_by), statement_timestamp()
        FROM claimed
    ), started AS (
        UPDATE scheduler_run AS r
        SET state = 'running', updated_at = statement_timestamp()
        WHERE r.id IN (SELECT run_id FROM claimed) AND r.state = 'pending'
        RETURNING r.id
    ), started_events AS (
        INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
        SELECT gen_random_uuid(), id, NULL, 'started', '{}'::jsonb, statement_timestamp() FROM started
        RETURNING id
    )
    SELECT (SELECT coalesce(jsonb_agg(jsonb_build_object(
                'step_id', id, 'run_id', run_id, 'name', name, 'operation', operation,
                'lease', lease, 'complete_by', complete_by, 'claimed_at', statement_timestamp(),
                'idempotency_key', idempotency_key, 'payload', coalesce(payload, '{}'::jsonb),
                'attempt', attempts, 'failure_count', failure_count)
                ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC), '[]'::jsonb)
            FROM claimed),
           (SELECT array_agg(id) FROM started_events)
    INTO v_claims, v_events;
    RETURN jsonb_build_object('claims', v_claims, 'events', sas_observed_events(v_events));
END;
$$;


-- claim_due: the scheduler's claim. Picks up to p_limit due Pending steps, highest priority,
-- then earliest run deadline, then longest waiting (the partial index step_pending_claim_idx
-- serves exactly this order), skipping rows another scheduler holds, and claims them.
-- Filters: only one operation (a reply claiming one more step for the slot it freed); not the
-- saturated operations (backpressure); only one run (tests, operators). NULL / empty = no filter.
CREATE OR REPLACE FUNCTION sas_step_claim_due(
    p_instance text, p_limit integer, p_operation text, p_exclude text[], p_run_id uuid
) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT sas_step_claim(ARRAY(
        SELECT id FROM scheduler_step
        WHERE process_state = 'pending' AND not_before <= statement_timestamp()
          AND (p_operation IS NULL OR operation = p_operation)
          AND operation <> ALL(coalesce(p_exclude, '{}'))
          AND (p_run_id IS NULL OR run_id = p_run_id)
        ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), p_instance)
$$;


-- A reply the fence refused (stale lease, deadline passed, step no longer Processing) is
-- recorded, never applied: one history row of kind late_reply.
CREATE OR REPLACE FUNCTION sas_reply_ignored(
    p_step_id bigint, p_lease uuid, p_outcome text, p_worker text, p_error text, p_result jsonb
) RETURNS jsonb
LANGUAGE sql AS $$
    INSERT INTO scheduler_taskexecutionhistory
        (step_id, run_id, kind, status, lease, retry_count, worker, error, detail, started_at, ended_at)
    SELECT s.id, s.run_id, 'late_reply', 'ignored', NULL, s.failure_count, p_worker, left(p_error, 4000),
           jsonb_build_object('reply_lease', p_lease::text, 'outcome', p_outcome,
                              'current_state', s.process_state, 'current_lease', s.lease::text,
                              'result', p_result),
           statement_timestamp(), statement_timestamp()
    FROM scheduler_step AS s WHERE s.id = p_step_id
    RETURNING jsonb_build_object('outcome', 'ignored', 'step_id', step_id, 'run_id', run_id)
$$;


-- succeed: Processing -> Processed (the accept of a success reply), then everything that
-- follows in the same statement's transaction - the hot path of the engine, one round trip:
--   the attempt's history row closed (succeeded) and the step_completed event;
--   a compensation's forward step Compensating | Error | Cancelled -> Compensated (it was
--   processed, errored after attempts that may have had an effect, or stopped in flight);
--   the next step of the same kind Waiting -> Pending (when its payload is ready: payloads
--   are built at submit / at compensation start unless the workflow says a step's payload
--   needs earlier results, in which case Python builds it and calls step_advance);
--   or, with no next step, the run Running -> Completed / Compensating -> Compensated|Cancelled
--   with its event;
--   with p_claim_next, the claim of the run's next step and of one more due step of the same
--   operation (the slot this reply freed).
-- Guard: process_state = 'processing' AND lease = p_lease AND complete_by > now. A refused
-- reply is recorded by sas_reply_ignored and changes nothing.
-- p_observed_ok: the caller is in a transaction of its own and will send the run's events to
-- signal receivers in it. Without it, an observed run raises SQLSTATE SAS01 and nothing is
-- written: the caller redoes the reply inside a transaction, so receivers commit with it.
CREATE OR REPLACE FUNCTION sas_step_succeed(
    p_step_id bigint, p_lease uuid, p_result jsonb, p_instance text, p_claim_next boolean,
    p_observed_ok boolean
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    v_run record;
    v_next record;
    v_events bigint[] := '{}';
    v_event bigint;
    v_final text;
    v_claim jsonb := '{"claims": [], "events": []}'::jsonb;
    v_more jsonb;
    v_needs_payload bigint;
BEGIN
    UPDATE scheduler_step
    SET process_state = 'processed', result = p_result, locked_by = NULL,
        finished_at = statement_timestamp(), updated_at = statement_timestamp()
    WHERE id = p_step_id AND process_state = 'processing' AND lease = p_lease
      AND complete_by > statement_timestamp()
    RETURNING id, run_id, name, kind, seq, attempts, operation, compensates_id INTO s;
    IF NOT FOUND THEN
        RETURN sas_reply_ignored(p_step_id, p_lease, 'success', p_instance, '', p_result);
    END IF;

    SELECT id, state, observed, cancel_requested, correlation_id INTO v_run
    FROM scheduler_run WHERE id = s.run_id;
    IF v_run.observed AND NOT p_observed_ok THEN
        RAISE EXCEPTION 'run % is observed', s.run_id USING ERRCODE = 'SAS01';
    END IF;

    UPDATE scheduler_taskexecutionhistory
    SET status = 'succeeded', ended_at = statement_timestamp()
    WHERE lease = p_lease AND kind = 'attempt';
    INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
    VALUES (gen_random_uuid(), s.run_id, s.id, 'step_completed',
            jsonb_build_object('attempt', s.attempts, 'step', s.name), statement_timestamp())
    RETURNING id INTO v_event;
    v_events := v_events || v_event;

    IF s.kind = 'compensation' AND s.compensates_id IS NOT NULL THEN
        UPDATE scheduler_step SET process_state = 'compensated', updated_at = statement_timestamp()
        WHERE id = s.compensates_id AND process_state IN ('compensating', 'error', 'cancelled');
    END IF;

    SELECT id, payload INTO v_next FROM scheduler_step
    WHERE run_id = s.run_id AND kind = s.kind AND seq > s.seq AND process_state = 'waiting'
    ORDER BY seq LIMIT 1;
    IF FOUND THEN
        IF v_next.payload IS NULL THEN
            v_needs_payload := v_next.id;
        ELSE
            UPDATE scheduler_step
            SET process_state = 'pending', not_before = statement_timestamp(),
                updated_at = statement_timestamp()
            WHERE id = v_next.id AND process_state = 'waiting';
            IF p_claim_next THEN
                v_claim := sas_step_claim(ARRAY[v_next.id], p_instance);
            END IF;
        END IF;
    ELSIF s.kind = 'forward' THEN
        UPDATE scheduler_run
        SET state = 'completed', finished_at = statement_timestamp(), updated_at = statement_timestamp()
        WHERE id = s.run_id AND state = 'running';
        IF FOUND THEN
            INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
            VALUES (gen_random_uuid(), s.run_id, NULL, 'completed',
                    jsonb_build_object('correlation_id', v_run.correlation_id), statement_timestamp())
            RETURNING id INTO v_event;
            v_events := v_events || v_event;
        END IF;
    ELSE
        v_final := CASE WHEN v_run.cancel_requested THEN 'cancelled' ELSE 'compensated' END;
        UPDATE scheduler_run
        SET state = v_final, finished_at = statement_timestamp(), updated_at = statement_timestamp()
        WHERE id = s.run_id AND state = 'compensating';
        IF FOUND THEN
            INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
            VALUES (gen_random_uuid(), s.run_id, NULL, v_final,
                    jsonb_build_object('correlation_id', v_run.correlation_id), statement_timestamp())
            RETURNING id INTO v_event;
            v_events := v_events || v_event;
        END IF;
    END IF;

    IF p_claim_next THEN
        -- One more step of the operation whose slot this reply freed (not the run's own: that
        -- one was claimed above), so in-flight work per operation stays level between ticks.
        v_more := sas_step_claim(ARRAY(
            SELECT id FROM scheduler_step
            WHERE process_state = 'pending' AND not_before <= statement_timestamp()
              AND operation = s.operation
            ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ), p_instance);
        v_claim := jsonb_build_object(
            'claims', (v_claim -> 'claims') || (v_more -> 'claims'),
            'events', (v_claim -> 'events') || (v_more -> 'events'));
    END IF;

    RETURN jsonb_build_object(
        'outcome', 'accepted', 'step_id', s.id, 'run_id', s.run_id, 'name', s.name,
        'operation', s.operation, 'needs_payload', v_needs_payload,
        'claims', v_claim -> 'claims',
        'events', sas_observed_events(v_events) || (v_claim -> 'events'));
END;
$$;


-- fail: one attempt of each given step failed (a transient reply, or no reply before
-- complete_by: the supervisor's sweep). Processing -> Pending with failure_count + 1 and
-- not_before = now + backoff (exponential, equal jitter, at least p_min_backoff), or
-- Processing -> Error when that count reaches the step's limit.
-- Guard: process_state = 'processing' AND lease = the attempt's lease (and, for a reply,
-- complete_by > now: a reply after the deadline is the supervisor's to judge).
-- The attempt's history row is closed with p_cause; a decision row (p_history_kind) and, for a
-- retry, a step_retrying event are written. Errored steps come back for the orchestration
-- (events, alert signal, compensation), which is Python's.
CREATE OR REPLACE FUNCTION sas_step_fail(
    p_ids bigint[], p_leases uuid[], p_errors text[], p_cause text, p_min_backoff double precision,
    p_actor text, p_history_kind text, p_require_live boolean
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_result jsonb;
BEGIN
    WITH input AS (
        SELECT * FROM unnest(p_ids, p_leases, p_errors) AS t(id, lease, error)
    ), cur AS (
        SELECT s.id, s.run_id, s.name, s.kind, s.lease, s.failure_count + 1 AS failures,
               s.max_failures, left(i.error, 4000) AS error,
               greatest(p_min_backoff + random() * 0.1,
                        least(s.backoff_max, s.backoff_base * power(2, s.failure_count)) * (0.5 + random() / 2))
                   AS delay
        FROM scheduler_step AS s JOIN input AS i ON i.id = s.id
        WHERE s.process_state = 'processing' AND s.lease = i.lease
          AND (NOT p_require_live OR s.complete_by > statement_timestamp())
        FOR UPDATE OF s
    ), changed AS (
        UPDATE scheduler_step AS s
        SET process_state = CASE WHEN c.failures < c.max_failures THEN 'pending' ELSE 'error' END,
            failure_count = c.failures,
            locked_by = NULL,
            lease = CASE WHEN c.failures < c.max_failures THEN NULL ELSE s.lease END,
            complete_by = CASE WHEN c.failures < c.max_failures THEN NULL ELSE s.complete_by END,
            not_before = CASE WHEN c.failures < c.max_failures
                              THEN statement_timestamp() + make_interval(secs => c.delay)
                              ELSE s.not_before END,
            finished_at = CASE WHEN c.failures < c.max_failures THEN NULL ELSE statement_timestamp() END,
            last_error = c.error,
            updated_at = statement_timestamp()
        FROM cur AS c
        WHERE s.id = c.id AND s.process_state = 'processing' AND s.lease = c.lease
        RETURNING s.id, c.run_id, c.name, c.kind, c.lease, c.failures, c.max_failures, c.error,
                  c.delay, s.process_state = 'pending' AS retried
    ), closed AS (
        UPDATE scheduler_taskexecutionhistory AS h
        SET status = p_cause, ended_at = statement_timestamp(), error = c.error
        FROM changed AS c
        WHERE h.lease = c.lease AND h.kind = 'attempt'
    ), logged AS (
        INSERT INTO scheduler_taskexecutionhistory
            (step_id, run_id, kind, status, lease, retry_count, worker, error, detail, started_at, ended_at)
        SELECT id, run_id, p_history_kind,
               CASE WHEN retried THEN 'retry_scheduled' ELSE 'errored' END, NULL, failures, p_actor, error,
               jsonb_build_object('cause', p_cause, 'failed_lease', lease::text,
                                  'backoff_seconds', CASE WHEN retried THEN round(delay::numeric, 3) ELSE 0 END),
               statement_timestamp(), statement_timestamp()
        FROM changed
    ), retry_events AS (
        INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
        SELECT gen_random_uuid(), run_id, id, 'step_retrying',
               jsonb_build_object('step', name, 'failure_count', failures, 'error', left(error, 500)),
               statement_timestamp()
        FROM changed WHERE retried
        RETURNING id
    )
    SELECT jsonb_build_object(
        'retried', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'step_id', id, 'run_id', run_id, 'name', name, 'delay', delay,
                        'failure_count', failures) ORDER BY id), '[]'::jsonb)
                    FROM changed WHERE retried),
        'errored', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'step_id', id, 'run_id', run_id, 'name', name, 'kind', kind,
                        'failure_count', failures, 'max_failures', max_failures, 'error', error)
                        ORDER BY id), '[]'::jsonb)
                    FROM changed WHERE NOT retried),
        'event_ids', (SELECT coalesce(jsonb_agg(id), '[]'::jsonb) FROM retry_events))
    INTO v_result;
    RETURN v_result || jsonb_build_object('events', sas_observed_events(ARRAY(
        SELECT jsonb_array_elements_text(v_result -> 'event_ids')::bigint)));
END;
$$;


-- expire: the supervisor's sweep. The oldest p_batch Processing steps whose complete_by has
-- passed (partial index step_processing_deadline_idx), skipping rows a reply or another sweep
-- holds, each failed by the same transition as a transient reply (sas_step_fail).
CREATE OR REPLACE FUNCTION sas_step_expire_due(p_batch integer, p_instance text) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT sas_step_fail(
        coalesce(array_agg(id ORDER BY complete_by, id), '{}'),
        coalesce(array_agg(lease ORDER BY complete_by, id), '{}'),
        coalesce(array_agg('no reply before complete_by '
            || to_char(complete_by AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')
            ORDER BY complete_by, id), '{}'),
        'timed_out', 0, p_instance, 'supervisor', false)
    FROM (
        SELECT id, lease, complete_by FROM scheduler_step
        WHERE process_state = 'processing' AND complete_by < statement_timestamp()
        ORDER BY complete_by
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ) AS expired
$$;
