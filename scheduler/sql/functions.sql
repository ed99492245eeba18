-- The engine's state machine, as PostgreSQL functions (installed by migration 0003 and every
-- later migration that calls scheduler.transitions.install_functions; CREATE OR REPLACE).
--
-- Each function is one transition (or one transition and the bookkeeping that must commit with
-- it: the attempt's history row, the run event). Its write is one conditional statement whose
-- WHERE clause carries the state it moves from (and the lease where there is one); the rows it
-- touched are the concurrency check. Time is the database clock: statement_timestamp(), never
-- now() (a transaction's start) and never a worker's clock.
--
-- The table of transitions (from, to, trigger, guard) is in scheduler/transitions.md. Every
-- state literal here is pinned to the models' choices by tests/scheduler/test_transitions.py.
--
-- Functions return jsonb: one value per call is cheaper to decode in Python than a set of
-- heterogeneous rows, and carries what the orchestration needs (claims to dispatch, events
-- to announce for observed runs, steps that errored).

-- Signatures that changed or went away (CREATE OR REPLACE cannot change a signature).
DROP FUNCTION IF EXISTS sas_step_expire_due(integer, text);
-- Before the bulkheads' slots (issue 26): the claims without p_bulkheads.
DROP FUNCTION IF EXISTS sas_step_claim_due(text, integer, text, text[], uuid);
DROP FUNCTION IF EXISTS sas_step_pick(integer, text, text[], uuid);
DROP FUNCTION IF EXISTS sas_step_succeed(bigint, uuid, jsonb, text, boolean, boolean);
DROP FUNCTION IF EXISTS sas_after_processed(bigint, text, boolean);
DROP FUNCTION IF EXISTS sas_step_fail(bigint[], uuid[], text[], text, double precision, text, text, boolean);
DROP FUNCTION IF EXISTS sas_runs_insert(uuid[], text[], jsonb[], bigint[], smallint[], bigint[], text[], timestamptz[],
    smallint[], timestamptz[], boolean[], uuid[], text[], integer[], text[], interval[], interval[], interval[],
    integer[], interval[], float8[], float8[], smallint[], jsonb[], text[], text);
-- Before the job history's "started" rows moved to the jobs dispatcher's room (issue 20): the same
-- with p_job_reasons and p_worker.
DROP FUNCTION IF EXISTS sas_runs_insert(uuid[], text[], jsonb[], bigint[], smallint[], bigint[], text[], timestamptz[],
    smallint[], timestamptz[], boolean[], interval[], uuid[], text[], integer[], text[], interval[], interval[],
    interval[], integer[], interval[], float8[], float8[], smallint[], jsonb[], text[], text);
-- Before each step's policy came once per workflow step of the batch (its shape), not once per
-- step of every run (issue 20: the arrays' dumping was a sixth of a jobs batch's Python).
DROP FUNCTION IF EXISTS sas_runs_insert(uuid[], text[], jsonb[], bigint[], smallint[], bigint[], text[], timestamptz[],
    smallint[], timestamptz[], boolean[], interval[], uuid[], text[], integer[], text[], interval[], interval[],
    interval[], integer[], interval[], float8[], float8[], smallint[], jsonb[]);

-- A version 7 UUID (RFC 9562: 48 bits of Unix time in ms, version, variant, random): ids that
-- sort by time, so the indexes they key fill at their right-hand edge (scheduler/ids.py says
-- why). PostgreSQL 15 has no uuidv7(); this is the same layout from gen_random_uuid()'s bytes.
CREATE OR REPLACE FUNCTION sas_uuid7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

-- When a lease was made: a lease is a sas_uuid7() of its claim, whose first 48 bits are the claim's
-- time in ms. The attempt's history row was written by the same claim statement (started_at <=
-- the lease's time), so an update of "the attempt of this lease" bounds started_at with it and
-- reads the one or two day partitions of the history that can hold it, not every partition's
-- lease index (issue 29: the history is partitioned by day).
CREATE OR REPLACE FUNCTION sas_lease_time(p_lease uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_timestamp(('x' || left(replace(p_lease::text, '-', ''), 12))::bit(48)::bigint / 1000.0)
$$;

-- The rows the engine writes on every step, checked by one function call per row: the CHECK
-- constraints step_row_valid, run_row_valid and history_row_valid (scheduler/models.py).
-- PostgreSQL rebuilds every CHECK constraint's expression from its stored text, and plans it,
-- on each statement that writes the table (ExecRelCheck, per query), and a step is written
-- three or four times per step plus two history rows: eight small constraints on the step
-- table were a fifth of the step statement's server time. One call of a plpgsql function per
-- row checks the same things at a fraction of that (bench/README.md, "Row checks").
-- The literals are pinned to the models' choices by tests/scheduler/test_transitions.py, both
-- ways (every choice passes, nothing else does).
CREATE OR REPLACE FUNCTION sas_step_row_valid(
    p_state text, p_kind text, p_lease uuid, p_complete_by timestamptz, p_locked_by text,
    p_seq integer, p_failure_count integer, p_max_failures integer, p_attempts integer
) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN p_state IN ('waiting', 'pending', 'processing', 'processed', 'error', 'compensating',
                       'compensated', 'cancelled')
       AND p_kind IN ('forward', 'compensation')
       -- A claimed step always carries its fence, its deadline and its owner...
       AND (p_state <> 'processing'
            OR (p_lease IS NOT NULL AND p_complete_by IS NOT NULL AND p_locked_by IS NOT NULL))
       -- ...and an unclaimed one is owned by nobody.
       AND (p_state <> 'pending' OR p_locked_by IS NULL)
       AND p_seq >= 0 AND p_failure_count >= 0 AND p_max_failures >= 0 AND p_attempts >= 0;
END;
$$;

CREATE OR REPLACE FUNCTION sas_run_row_valid(p_state text, p_job_attempt integer) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN p_state IN ('pending', 'running', 'completed', 'compensating', 'compensated', 'cancelled', 'failed')
       AND p_job_attempt >= 0;
END;
$$;

CREATE OR REPLACE FUNCTION sas_history_row_valid(p_status text, p_retry_count integer) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN p_status IN ('started', 'succeeded', 'failed_transient', 'failed_permanent', 'timed_out',
                        'cancelled', 'ignored', 'retry_scheduled', 'errored', 'deferred', 'requeued',
                        'action', 'continued', 'compensated', 'failed', 'skipped', 'buffered')
       AND p_retry_count >= 0;
END;
$$;

-- Events of observed runs, as jsonb, for the `run_event` signal (webhooks listen to those runs
-- only, so runs nobody watches cost no extra query).
CREATE OR REPLACE FUNCTION sas_observed_events(p_event_ids bigint[]) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- Most calls have no event (a claim that started no run): no query. plpgsql, not sql: a
    -- LANGUAGE sql function called from plpgsql is planned again on every call.
    IF p_event_ids IS NULL OR cardinality(p_event_ids) = 0 THEN
        RETURN '[]'::jsonb;
    END IF;
    RETURN (
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'id', e.id, 'event_id', e.event_id, 'run_id', e.run_id, 'step_id', e.step_id,
                   'type', e.type, 'data', e.data, 'created_at', e.created_at) ORDER BY e.id), '[]'::jsonb)
        FROM scheduler_runevent AS e JOIN scheduler_run AS r ON r.id = e.run_id
        WHERE e.id = ANY(p_event_ids) AND r.observed);
END;
$$;


-- claim: Pending -> Processing, for the given ids that are still Pending and due.
-- Guard: process_state = 'pending' AND not_before <= now. Each claim gets a fresh lease,
-- start_by = now + queue_timeout (an agent must start it by then, or it is sent again with no
-- failure counted) and complete_by = start_by + timeout (the outer bound of the attempt; the
-- agent's own deadline is its start + timeout); a step's first claim starts its whole-step
-- deadline (close_by). Its attempt's history row is written; a run whose first claim this is
-- goes Pending -> Running with its "started" event. The callers lock the ids first
-- (FOR UPDATE SKIP LOCKED) where several schedulers may race.
-- The run's start is a statement of its own, run only when some claimed step is a run's first
-- (its first forward step's first attempt: a run leaves Pending at its first claim and never
-- comes back, so no other claim can find it Pending). Most claims - a reply's claim of its
-- run's next step - then touch neither the run nor the event table: a statement that names them
-- opens and locks them and their twelve indexes even when it writes no row there (7% of a
-- reply's server CPU, bench/README.md "Row checks, and the run's start").
CREATE OR REPLACE FUNCTION sas_step_claim(p_ids bigint[], p_instance text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_claims jsonb;
    v_first_runs uuid[];
    v_events bigint[];
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        -- Nothing to claim (a reply's "one more" found no due step): no statement.
        RETURN '{"claims": [], "events": []}'::jsonb;
    END IF;
    WITH claimed AS (
        UPDATE scheduler_step AS s
        SET process_state = 'processing',
            locked_by = p_instance,
            lease = sas_uuid7(),
            start_by = statement_timestamp() + s.queue_timeout,
            complete_by = statement_timestamp() + s.queue_timeout + s.timeout,
            close_by = coalesce(s.close_by, statement_timestamp() + s.schedule_to_close),
            attempts = s.attempts + 1,
            updated_at = statement_timestamp()
        WHERE s.id = ANY(p_ids) AND s.process_state = 'pending' AND s.not_before <= statement_timestamp()
        RETURNING s.id, s.run_id, s.name, s.operation, s.lease, s.complete_by, s.start_by, s.timeout,
                  s.idempotency_key, s.payload, s.attempts, s.failure_count, s.priority, s.deadline,
                  s.not_before, s.heartbeat_window, s.close_by, s.kind, s.seq
    ), history AS (
        INSERT INTO scheduler_taskexecutionhistory
            (step_id, run_id, kind, status, lease, retry_count, worker, error, detail, started_at)
        SELECT id, run_id, 'attempt', 'started', lease, failure_count, p_instance, '',
               jsonb_build_object('attempt', attempts, 'complete_by', complete_by), statement_timestamp()
        FROM claimed
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object(
                'step_id', id, 'run_id', run_id, 'name', name, 'operation', operation,
                'lease', lease, 'complete_by', complete_by, 'start_by', start_by,
                'timeout', extract(epoch FROM timeout), 'claimed_at', statement_timestamp(),
                'idempotency_key', idempotency_key, 'payload', coalesce(payload, '{}'::jsonb),
                'attempt', attempts, 'failure_count', failure_count,
                'heartbeat', extract(epoch FROM heartbeat_window), 'close_by', close_by)
                ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC), '[]'::jsonb),
           array_agg(run_id) FILTER (WHERE kind = 'forward' AND seq = 0 AND attempts = 1)
    INTO v_claims, v_first_runs
    FROM claimed;

    IF v_first_runs IS NOT NULL THEN
        WITH started AS (
            UPDATE scheduler_run AS r
            SET state = 'running', updated_at = statement_timestamp()
            WHERE r.id = ANY(v_first_runs) AND r.state = 'pending'
            RETURNING r.id
        ), started_events AS (
            INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
            SELECT sas_uuid7(), id, NULL, 'started', '{}'::jsonb, statement_timestamp() FROM started
            RETURNING id
        )
        SELECT array_agg(id) INTO v_events FROM started_events;
    END IF;
    RETURN jsonb_build_object('claims', v_claims, 'events', sas_observed_events(v_events));
END;
$$;


-- bulkhead: the agent queue an operation's messages go to - `agents.<service>.<op>` goes to
-- `agent.<service>` (agents/routing.py's rule; tests/scheduler/test_bulkheads.py pins the two
-- to each other for every registered operation); any other operation is a bulkhead of its own.
CREATE OR REPLACE FUNCTION sas_bulkhead(p_operation text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_operation LIKE 'agents.%.%' THEN 'agent.' || split_part(p_operation, '.', 2)
                ELSE p_operation END
$$;


-- bulkhead_limit: a bulkhead's slots (which = 1) or the most of them one owner may hold
-- (which = 2), from the caller's configuration p_bulkheads = {"slots": {"agent.http": [8, 6],
-- ...}, "default": [50, 38]} (scheduler/bulkheads.py builds it from the settings).
CREATE OR REPLACE FUNCTION sas_bulkhead_limit(p_bulkheads jsonb, p_bulkhead text, p_which integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(p_bulkheads -> 'slots' -> p_bulkhead ->> (p_which - 1),
                    p_bulkheads -> 'default' ->> (p_which - 1))::integer
$$;


-- in_flight: Processing steps per (owner, operation) (`busy`, the fair rank's), per bulkhead
-- (`used`) and per (owner, bulkhead) (`owner_used`, keys "<owner>/<bulkhead>") - of
-- p_operation's bulkhead only when one is given - read once from
-- the partial index of Processing rows, whose size the bulkheads' slots bound.
CREATE OR REPLACE FUNCTION sas_in_flight(
    p_operation text, OUT busy jsonb, OUT used jsonb, OUT owner_used jsonb
)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_bulkhead text;
    v_key text;
    r record;
BEGIN
    busy := '{}'; used := '{}'; owner_used := '{}';
    FOR r IN
        SELECT owner_id, operation, count(*) AS n FROM scheduler_step
        WHERE process_state = 'processing'
          AND (p_operation IS NULL OR sas_bulkhead(operation) = sas_bulkhead(p_operation))
        GROUP BY owner_id, operation
    LOOP
        v_bulkhead := sas_bulkhead(r.operation);
        v_key := r.owner_id::text || '/' || v_bulkhead;
        busy := busy || jsonb_build_object(r.owner_id::text || '/' || r.operation, r.n);
        used := used || jsonb_build_object(v_bulkhead, coalesce((used ->> v_bulkhead)::bigint, 0) + r.n);
        owner_used := owner_used || jsonb_build_object(v_key, coalesce((owner_used ->> v_key)::bigint, 0) + r.n);
    END LOOP;
END;
$$;


-- admit: those of the given steps (in their order) that their bulkhead has a free slot for -
-- fewer steps of its queue Processing than its slots, and fewer of their owner's than the
-- owner's share (issue 26). The claim of a step chosen by id rather than by the pick: a new
-- run's first step in its submit, a run's next step in its predecessor's reply. Not locked:
-- the claim that follows is conditional (Pending and due). NULL p_bulkheads: all of them.
CREATE OR REPLACE FUNCTION sas_step_admit(p_ids bigint[], p_bulkheads jsonb) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_admitted bigint[] := '{}';
    v_id bigint;
    v_step record;
    v_bulkhead text;
    v_total integer;
    v_owner integer;
BEGIN
    IF p_bulkheads IS NULL OR p_ids IS NULL THEN
        RETURN p_ids;
    END IF;
    FOREACH v_id IN ARRAY p_ids LOOP
        SELECT id, owner_id, operation INTO v_step FROM scheduler_step WHERE id = v_id;
        CONTINUE WHEN NOT FOUND;
        v_bulkhead := sas_bulkhead(v_step.operation);
        -- The partial index of Processing rows, whose size the slots bound.
        SELECT count(*), count(*) FILTER (WHERE owner_id = v_step.owner_id) INTO v_total, v_owner
        FROM scheduler_step WHERE process_state = 'processing' AND sas_bulkhead(operation) = v_bulkhead;
        IF v_total < sas_bulkhead_limit(p_bulkheads, v_bulkhead, 1)
           AND v_owner < sas_bulkhead_limit(p_bulkheads, v_bulkhead, 2) THEN
            v_admitted := v_admitted || v_step.id;
        END IF;
    END LOOP;
    RETURN v_admitted;
END;
$$;


-- pick: the fair choice of up to p_limit due Pending steps, locked (FOR UPDATE SKIP LOCKED) for
-- the caller's claim. Priority first, strictly; within a priority, the slots of an operation
-- are shared between owners max-min fairly: each candidate's rank is the number of steps of
-- that operation its owner already has Processing plus its place in its owner's own queue
-- (1, 2, ...), lowest first - so an owner with nothing in flight goes before one with fifty,
-- and a batch interleaves owners until their in-flight counts are level. Ties: earliest run
-- deadline, longest waiting, lowest id (the engine's claim order before issue 18).
-- Bulkheads (issue 26, p_bulkheads; NULL: none): a step is picked only while its agent queue
-- has fewer steps Processing than its slots (its workers' threads) and its owner fewer than
-- its share of them - so a queue is sent no more than its workers can start at once, nothing
-- waits in the broker's first-in-first-out queue, and this order, not the broker's, decides who
-- runs next (docs/operating/fairness.md). A bulkhead with no free slot (or none for the only owner) is
-- left out of the search altogether.
-- The owners that have Pending rows are found by a loose index scan (one descent per owner)
-- of step_pending_owner_idx, or step_pending_op_owner_idx when one operation is asked for;
-- each owner's head is read from the same index. With one owner (the common case, and every
-- single-tenant bench) that owner's head is taken as before, with no sort.
-- Filters: only one operation (a reply claiming one more step for the slot it freed); not the
-- excluded operations; only one run (tests, operators). NULL / empty = none.
-- docs/operating/fairness.md says what this bounds and measures its cost (bench/README.md).
CREATE OR REPLACE FUNCTION sas_step_pick(
    p_limit integer, p_operation text, p_exclude text[], p_run_id uuid, p_bulkheads jsonb
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_exclude text[] := coalesce(p_exclude, '{}');
    v_owners bigint[];
    v_busy jsonb := '{}';
    v_used jsonb := '{}';
    v_owner_used jsonb := '{}';
    v_full text[] := '{}';
    v_picked bigint[] := '{}';
    v_state text;
    v_bulkhead text;
    v_key text;
    r record;
BEGIN
    IF p_bulkheads IS NOT NULL THEN
        SELECT f.busy, f.used, f.owner_used INTO v_busy, v_used, v_owner_used
        FROM sas_in_flight(p_operation) AS f;
    END IF;
    IF p_bulkheads IS NOT NULL THEN
        -- Bulkheads with no free slot are not searched.
        v_full := ARRAY(SELECT key FROM jsonb_each_text(v_used)
                        WHERE value::bigint >= sas_bulkhead_limit(p_bulkheads, key, 1));
        IF p_operation IS NOT NULL AND sas_bulkhead(p_operation) = ANY(v_full) THEN
            RETURN '{}'::bigint[];
        END IF;
    END IF;

    IF p_run_id IS NOT NULL THEN
        IF p_bulkheads IS NULL THEN
            RETURN ARRAY(
                SELECT id FROM scheduler_step
                WHERE run_id = p_run_id AND process_state = 'pending' AND not_before <= statement_timestamp()
                  AND (p_operation IS NULL OR operation = p_operation) AND operation <> ALL(v_exclude)
                ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED);
        END IF;
        v_owners := ARRAY(SELECT DISTINCT owner_id FROM scheduler_step WHERE run_id = p_run_id);
    ELSIF p_operation IS NOT NULL THEN
        v_owners := ARRAY(
            WITH RECURSIVE o(owner_id) AS (
                (SELECT owner_id FROM scheduler_step
                 WHERE process_state = 'pending' AND operation = p_operation
                 ORDER BY owner_id LIMIT 1)
                UNION ALL
                SELECT (SELECT s.owner_id FROM scheduler_step AS s
                        WHERE s.process_state = 'pending' AND s.operation = p_operation AND s.owner_id > o.owner_id
                        ORDER BY s.owner_id LIMIT 1)
                FROM o WHERE o.owner_id IS NOT NULL
            )
            SELECT owner_id FROM o WHERE owner_id IS NOT NULL);
    ELSE
        v_owners := ARRAY(
            WITH RECURSIVE o(owner_id) AS (
                (SELECT owner_id FROM scheduler_step WHERE process_state = 'pending'
                 ORDER BY owner_id LIMIT 1)
                UNION ALL
                SELECT (SELECT s.owner_id FROM scheduler_step AS s
                        WHERE s.process_state = 'pending' AND s.owner_id > o.owner_id
                        ORDER BY s.owner_id LIMIT 1)
                FROM o WHERE o.owner_id IS NOT NULL
            )
            SELECT owner_id FROM o WHERE owner_id IS NOT NULL);
    END IF;

    IF cardinality(v_owners) = 0 THEN
        RETURN '{}'::bigint[];
    END IF;
    IF cardinality(v_owners) = 1 AND p_run_id IS NULL THEN
        -- One owner: nobody to be fair to. Its bulkheads at its share are not searched either.
        IF p_bulkheads IS NOT NULL THEN
            v_full := v_full || ARRAY(
                SELECT substr(key, length(v_owners[1]::text) + 2) FROM jsonb_each_text(v_owner_used)
                WHERE key LIKE v_owners[1]::text || '/%'
                  AND value::bigint >= sas_bulkhead_limit(p_bulkheads, substr(key, length(v_owners[1]::text) + 2), 2));
            IF p_operation IS NOT NULL AND sas_bulkhead(p_operation) = ANY(v_full) THEN
                RETURN '{}'::bigint[];
            END IF;
        END IF;
        IF p_bulkheads IS NULL OR p_limit = 1 THEN
            -- Every bulkhead still searched has a free slot for this owner: its head fits.
            RETURN ARRAY(
                SELECT id FROM scheduler_step
                WHERE process_state = 'pending' AND owner_id = v_owners[1] AND not_before <= statement_timestamp()
                  AND (p_operation IS NULL OR operation = p_operation) AND operation <> ALL(v_exclude)
                  AND (cardinality(v_full) = 0 OR sas_bulkhead(operation) <> ALL(v_full))
                ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED);
        END IF;
        -- The same rows, kept in order while their bulkhead has a slot left for them (a row
        -- left out stays locked until the claim commits: nobody could claim it meanwhile).
        v_key := v_owners[1]::text || '/';
        FOR r IN
            SELECT id, operation FROM scheduler_step
            WHERE process_state = 'pending' AND owner_id = v_owners[1] AND not_before <= statement_timestamp()
              AND (p_operation IS NULL OR operation = p_operation) AND operation <> ALL(v_exclude)
              AND (cardinality(v_full) = 0 OR sas_bulkhead(operation) <> ALL(v_full))
            ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        LOOP
            v_bulkhead := sas_bulkhead(r.operation);
            CONTINUE WHEN coalesce((v_used ->> v_bulkhead)::bigint, 0) >= sas_bulkhead_limit(p_bulkheads, v_bulkhead, 1)
                       OR coalesce((v_owner_used ->> (v_key || v_bulkhead))::bigint, 0)
                          >= sas_bulkhead_limit(p_bulkheads, v_bulkhead, 2);
            v_picked := v_picked || r.id;
            v_used := v_used || jsonb_build_object(v_bulkhead, coalesce((v_used ->> v_bulkhead)::bigint, 0) + 1);
            v_owner_used := v_owner_used || jsonb_build_object(
                v_key || v_bulkhead, coalesce((v_owner_used ->> (v_key || v_bulkhead))::bigint, 0) + 1);
        END LOOP;
        RETURN v_picked;
    END IF;

    IF p_bulkheads IS NULL THEN
        SELECT f.busy INTO v_busy FROM sas_in_flight(p_operation) AS f;
    END IF;

    -- No statement below joins two sets: a join's plan rests on statistics, and a burst leaves
    -- them stale (the tables' as they were before it, until autovacuum's next ANALYZE). With
    -- them the planner took the heads for 10 rows, the Processing counts for 1 and the Pending
    -- rows for 5, and aggregated the counts again for every head (24,000 heads x 3,000
    -- Processing rows: 9 s a claim), or compared every head with every Pending row to lock it
    -- (3,500 x 1,750: 0.5 s). bench/README.md, "Issue 20, fifth session".
    -- Every owner's heads in claim order (nothing locked yet), each ranked by its owner's
    -- in-flight count of its operation (the map above) plus its place in its owner's queue;
    -- then locked in that order, each by its primary key, skipping a row another claim holds,
    -- one no longer Pending, or one whose bulkhead has no slot left for it, until p_limit are
    -- held. The state is read after the lock, not in the WHERE: with it there, the planner may
    -- read a Pending partial index (believed tiny) for the id, which scans that whole index.
    FOR r IN
        WITH heads AS (
            SELECT h.*, row_number() OVER (PARTITION BY h.owner_id, h.operation
                                           ORDER BY h.priority DESC, h.deadline ASC NULLS LAST,
                                                    h.not_before ASC, h.id ASC) AS place
            FROM unnest(v_owners) AS o(owner_id)
            CROSS JOIN LATERAL (
                SELECT s.id, s.owner_id, s.operation, s.priority, s.deadline, s.not_before
                FROM scheduler_step AS s
                WHERE s.process_state = 'pending' AND s.owner_id = o.owner_id
                  AND s.not_before <= statement_timestamp()
                  AND (p_run_id IS NULL OR s.run_id = p_run_id)
                  AND (p_operation IS NULL OR s.operation = p_operation) AND s.operation <> ALL(v_exclude)
                  AND (cardinality(v_full) = 0 OR sas_bulkhead(s.operation) <> ALL(v_full))
                ORDER BY s.priority DESC, s.deadline ASC NULLS LAST, s.not_before ASC, s.id ASC
                LIMIT p_limit
            ) AS h
        )
        SELECT c.id, c.owner_id, c.operation
        FROM heads AS c
        ORDER BY c.priority DESC,
                 coalesce((v_busy ->> (c.owner_id::text || '/' || c.operation))::bigint, 0) + c.place ASC,
                 c.deadline ASC NULLS LAST, c.not_before ASC, c.id ASC
    LOOP
        IF p_bulkheads IS NOT NULL THEN
            v_bulkhead := sas_bulkhead(r.operation);
            v_key := r.owner_id::text || '/' || v_bulkhead;
            CONTINUE WHEN coalesce((v_used ->> v_bulkhead)::bigint, 0) >= sas_bulkhead_limit(p_bulkheads, v_bulkhead, 1)
                       OR coalesce((v_owner_used ->> v_key)::bigint, 0) >= sas_bulkhead_limit(p_bulkheads, v_bulkhead, 2);
        END IF;
        SELECT process_state INTO v_state FROM scheduler_step WHERE id = r.id FOR UPDATE SKIP LOCKED;
        IF FOUND AND v_state = 'pending' THEN
            v_picked := v_picked || r.id;
            EXIT WHEN cardinality(v_picked) >= p_limit;
            IF p_bulkheads IS NOT NULL THEN
                v_used := v_used || jsonb_build_object(v_bulkhead, coalesce((v_used ->> v_bulkhead)::bigint, 0) + 1);
                v_owner_used := v_owner_used || jsonb_build_object(v_key, coalesce((v_owner_used ->> v_key)::bigint, 0) + 1);
            END IF;
        END IF;
    END LOOP;
    RETURN v_picked;
END;
$$;


-- claim_due: the scheduler's claim - up to p_limit due Pending steps in fair order, within each
-- bulkhead's free slots (sas_step_pick), claimed.
CREATE OR REPLACE FUNCTION sas_step_claim_due(
    p_instance text, p_limit integer, p_operation text, p_exclude text[], p_run_id uuid, p_bulkheads jsonb
) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT sas_step_claim(sas_step_pick(p_limit, p_operation, p_exclude, p_run_id, p_bulkheads), p_instance)
$$;


-- skip_unstarted: schedule-to-start (issue 18). A job occurrence's first step still Pending and
-- never claimed past its expires_at: its run Pending -> Cancelled with the reason as its error
-- (nothing ran, nothing to undo; the jobs layer does not retry a cancelled run), its forward
-- steps Pending | Waiting -> Cancelled and a "cancelled" event. The run's error is the sentence
-- "skipped: not started within N s (backlog)"; the jobs dispatcher's settle closes the
-- occurrence's job history row as skipped by it (`job_history_close`: the job history is written
-- by the dispatcher's transitions only).
-- Guard: step pending, attempts = 0, expires_at < now (partial index step_pending_expiry_idx),
-- FOR UPDATE SKIP LOCKED (a claim that holds the row wins: the step starts, late); run pending.
-- Orders and compensations have no expires_at (docs/operating/fairness.md).
CREATE OR REPLACE FUNCTION sas_run_skip_unstarted(p_batch integer) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_result jsonb;
BEGIN
    WITH due AS (
        SELECT id, run_id, expires_at, created_at FROM scheduler_step
        WHERE process_state = 'pending' AND attempts = 0 AND expires_at IS NOT NULL
          AND expires_at < statement_timestamp()
          -- Held by a pause (issue 30): its window is frozen, shifted when the pause ends.
          AND not_before < '9999-12-31 00:00:00+00'::timestamptz  -- sas_held(), holds.sql
        ORDER BY expires_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ), skipped AS (
        UPDATE scheduler_run AS r
        SET state = 'cancelled',
            error = 'skipped: not started within '
                    || round(extract(epoch FROM d.expires_at - d.created_at))::bigint::text || ' s (backlog)',
            finished_at = statement_timestamp(), updated_at = statement_timestamp()
        FROM due AS d
        WHERE r.id = d.run_id AND r.state = 'pending'
        RETURNING r.id, r.job_id, r.error, r.correlation_id
    ), steps AS (
        UPDATE scheduler_step AS s
        SET process_state = 'cancelled', last_error = k.error, finished_at = statement_timestamp(),
            updated_at = statement_timestamp()
        FROM skipped AS k
        WHERE s.run_id = k.id AND s.kind = 'forward' AND s.process_state IN ('pending', 'waiting')
    ), events AS (
        INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
        SELECT sas_uuid7(), id, NULL, 'cancelled',
               jsonb_build_object('correlation_id', correlation_id, 'reason', error), statement_timestamp()
        FROM skipped
        RETURNING id
    )
    SELECT jsonb_build_object(
        'skipped', (SELECT coalesce(jsonb_agg(jsonb_build_object('run_id', id, 'job_id', job_id, 'error', error)),
                                    '[]'::jsonb) FROM skipped),
        'examined', (SELECT count(*) FROM due),
        'event_ids', (SELECT coalesce(jsonb_agg(id), '[]'::jsonb) FROM events))
    INTO v_result;
    RETURN v_result || jsonb_build_object('events', sas_observed_events(ARRAY(
        SELECT jsonb_array_elements_text(v_result -> 'event_ids')::bigint)));
END;
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


-- after_processed: what follows a step's move to Processed (a success reply, or an operator
-- marking a compensation done), in the caller's statement:
--   a compensation's forward step Compensating | Error | Cancelled -> Compensated (it was
--   processed, errored after attempts that may have had an effect, or stopped in flight);
--   the next step of the same kind Waiting -> Pending (when its payload is ready: payloads
--   are built at submit / at compensation start unless the workflow says a step's payload
--   needs earlier results, in which case Python builds it and calls step_advance);
--   or, with no next step, the run Running -> Completed / Compensating -> Compensated|Cancelled
--   with its event;
--   with p_claim_next, the claim of the run's next step (when its bulkhead has a free slot for
--   it: sas_step_admit) and of one more due step of the same operation (the slot the reply
--   freed; sas_step_pick within p_bulkheads).
-- Returns {event_ids, claims, claim_events, needs_payload}.
CREATE OR REPLACE FUNCTION sas_after_processed(
    p_step_id bigint, p_instance text, p_claim_next boolean, p_bulkheads jsonb
)
RETURNS jsonb
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
    SELECT id, run_id, kind, seq, operation, compensates_id INTO s FROM scheduler_step WHERE id = p_step_id;
    SELECT id, cancel_requested, correlation_id INTO v_run FROM scheduler_run WHERE id = s.run_id;

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
                v_claim := sas_step_claim(sas_step_admit(ARRAY[v_next.id], p_bulkheads), p_instance);
            END IF;
        END IF;
    ELSIF s.kind = 'forward' THEN
        UPDATE scheduler_run
        SET state = 'completed', finished_at = statement_timestamp(), updated_at = statement_timestamp()
        WHERE id = s.run_id AND state = 'running';
        IF FOUND THEN
            INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
            VALUES (sas_uuid7(), s.run_id, NULL, 'completed',
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
            VALUES (sas_uuid7(), s.run_id, NULL, v_final,
                    jsonb_build_object('correlation_id', v_run.correlation_id), statement_timestamp())
            RETURNING id INTO v_event;
            v_events := v_events || v_event;
        END IF;
    END IF;

    IF p_claim_next THEN
        -- One more step of the operation whose slot this reply freed (not the run's own: that
        -- one was claimed above), so in-flight work per operation stays level between ticks.
        -- Fair across owners (sas_step_pick): the owner with the fewest of this operation
        -- in flight gets the slot.
        v_more := sas_step_claim(sas_step_pick(1, s.operation, NULL, NULL, p_bulkheads), p_instance);
        v_claim := jsonb_build_object(
            'claims', (v_claim -> 'claims') || (v_more -> 'claims'),
            'events', (v_claim -> 'events') || (v_more -> 'events'));
    END IF;

    RETURN jsonb_build_object('event_ids', to_jsonb(v_events), 'claims', v_claim -> 'claims',
                              'claim_events', v_claim -> 'events', 'needs_payload', v_needs_payload);
END;
$$;


-- succeed: Processing -> Processed (the accept of a success reply), and what follows it
-- (sas_after_processed), in one statement: the hot path of the engine, one round trip. The
-- attempt's history row is closed (succeeded) and the step_completed event recorded.
-- Guard: process_state = 'processing' AND lease = p_lease AND complete_by > now. A refused
-- reply is recorded by sas_reply_ignored and changes nothing.
-- p_observed_ok: the caller is in a transaction of its own and will send the run's events to
-- signal receivers in it. Without it, an observed run raises SQLSTATE SAS01 and nothing is
-- written: the caller redoes the reply inside a transaction, so receivers commit with it.
CREATE OR REPLACE FUNCTION sas_step_succeed(
    p_step_id bigint, p_lease uuid, p_result jsonb, p_instance text, p_claim_next boolean,
    p_observed_ok boolean, p_bulkheads jsonb
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    v_observed boolean;
    v_event bigint;
    v_after jsonb;
BEGIN
    UPDATE scheduler_step
    SET process_state = 'processed', result = p_result, locked_by = NULL, reached = true,
        finished_at = statement_timestamp(), updated_at = statement_timestamp()
    WHERE id = p_step_id AND process_state = 'processing' AND lease = p_lease
      AND complete_by > statement_timestamp()
    RETURNING id, run_id, name, attempts, operation INTO s;
    IF NOT FOUND THEN
        RETURN sas_reply_ignored(p_step_id, p_lease, 'success', p_instance, '', p_result);
    END IF;

    SELECT observed INTO v_observed FROM scheduler_run WHERE id = s.run_id;
    IF v_observed AND NOT p_observed_ok THEN
        RAISE EXCEPTION 'run % is observed', s.run_id USING ERRCODE = 'SAS01';
    END IF;

    UPDATE scheduler_taskexecutionhistory
    SET status = 'succeeded', ended_at = statement_timestamp()
    WHERE lease = p_lease AND kind = 'attempt'
      AND started_at BETWEEN sas_lease_time(p_lease) - interval '1 hour' AND sas_lease_time(p_lease) + interval '1 minute';
    INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
    VALUES (sas_uuid7(), s.run_id, s.id, 'step_completed',
            jsonb_build_object('attempt', s.attempts, 'step', s.name), statement_timestamp())
    RETURNING id INTO v_event;

    v_after := sas_after_processed(s.id, p_instance, p_claim_next, p_bulkheads);
    -- A success after which the run goes on (no event of its end) and that no receiver observes
    -- commits without waiting for its WAL flush: the run's next commit that waits (its end, an
    -- observed event, any other durable commit, or the WAL writer within wal_writer_delay)
    -- makes it durable with everything before it. A PostgreSQL crash in between can only undo
    -- this success: the step is Processing again under its lease, and the sweep retries it at
    -- its deadline under the same idempotency key, which the remote service answers from its
    -- record (docs/decisions.md, "An intermediate step's success commits without waiting for
    -- the WAL flush"). `SET sas.durable_steps = on` (database, role or session) keeps every
    -- success's commit waiting.
    IF NOT v_observed AND jsonb_array_length(v_after -> 'event_ids') = 0
       AND coalesce(current_setting('sas.durable_steps', true), '') NOT IN ('on', 'true', '1') THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN jsonb_build_object(
        'outcome', 'accepted', 'step_id', s.id, 'run_id', s.run_id, 'name', s.name,
        'operation', s.operation, 'needs_payload', v_after -> 'needs_payload',
        'claims', v_after -> 'claims',
        -- The step's and the run's own events go to receivers only when the run is observed
        -- (no lookup otherwise); claim_events are other runs' and were looked up by the claim.
        'events', CASE WHEN v_observed
                       THEN sas_observed_events(v_event || ARRAY(
                                SELECT jsonb_array_elements_text(v_after -> 'event_ids')::bigint))
                       ELSE '[]'::jsonb END
                  || (v_after -> 'claim_events'));
END;
$$;


-- mark_done: an operator marks a compensation step done by hand (the undo was done outside, or
-- is not needed): Waiting | Pending | Processing | Error -> Processed, with the operator and
-- the reason in its result and history; what follows is the same as a success
-- (sas_after_processed). An attempt in flight is closed as cancelled (its reply will be stale).
-- Guard: kind = 'compensation' and one of those states, and its run Compensating or Failed (a
-- Failed run goes back to Compensating first, so it can finish).
CREATE OR REPLACE FUNCTION sas_step_mark_done(p_step_id bigint, p_actor text, p_reason text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    v_after jsonb;
BEGIN
    UPDATE scheduler_run AS r
    SET state = 'compensating', finished_at = NULL, updated_at = statement_timestamp()
    FROM scheduler_step AS st
    WHERE st.id = p_step_id AND r.id = st.run_id AND r.state = 'failed';

    UPDATE scheduler_step AS st
    SET process_state = 'processed', locked_by = NULL, finished_at = statement_timestamp(),
        result = jsonb_build_object('marked_done_by', p_actor, 'reason', p_reason),
        updated_at = statement_timestamp()
    FROM scheduler_run AS r
    WHERE st.id = p_step_id AND st.kind = 'compensation' AND r.id = st.run_id AND r.state = 'compensating'
      AND st.process_state IN ('waiting', 'pending', 'processing', 'error')
    RETURNING st.id, st.run_id, st.name, st.lease INTO s;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('outcome', 'refused');
    END IF;
    UPDATE scheduler_taskexecutionhistory
    SET status = 'cancelled', ended_at = statement_timestamp(), error = 'marked done by ' || p_actor
    WHERE lease = s.lease AND kind = 'attempt' AND status = 'started'
      AND started_at BETWEEN sas_lease_time(s.lease) - interval '1 hour' AND sas_lease_time(s.lease) + interval '1 minute';
    INSERT INTO scheduler_taskexecutionhistory
        (step_id, run_id, kind, status, lease, retry_count, worker, error, detail, started_at, ended_at)
    VALUES (s.id, s.run_id, 'operator', 'action', NULL, 0, p_actor, left(p_reason, 4000),
            jsonb_build_object('action', 'mark_done'), statement_timestamp(), statement_timestamp());
    v_after := sas_after_processed(s.id, p_actor, false, NULL);
    RETURN jsonb_build_object('outcome', 'accepted', 'step_id', s.id, 'run_id', s.run_id, 'name', s.name,
                              'needs_payload', v_after -> 'needs_payload',
                              'events', sas_observed_events(ARRAY(
                                  SELECT jsonb_array_elements_text(v_after -> 'event_ids')::bigint)));
END;
$$;


-- fail: one attempt of each given step did not succeed. The same transition serves a transient
-- reply (the attempt reached the service and failed), the supervisor's sweep (no reply before
-- complete_by), a deferral (the attempt never reached the service: open breaker, connection
-- refused) and a requeue (no agent started it before start_by).
--   p_count: the attempt counts against the failure budget (it reached the service, or may
--   have). Deferrals and requeues do not count - for a forward step. A compensation has no
--   budget to lose (it never gives up): every attempt it makes counts toward its alert
--   threshold, so an undo held up by an open breaker or by missing workers is reported too.
--   Processing -> Pending with not_before = now + delay: counted, exponential backoff with
--   equal jitter (capped by backoff_max), at least p_min_backoff; not counted, p_min_backoff
--   (the breaker's next probe) plus a little jitter.
--   Processing -> Error for a forward step when the count reaches max_failures, or when the
--   next try would start after the step's whole deadline (close_by). A compensation never
--   errors here: an undo keeps trying; when its count reaches max_failures it comes back in
--   'alerting' once, so an operator is told while it goes on.
-- Guard: process_state = 'processing' AND lease = the attempt's lease (and, for a reply,
-- complete_by > now: a reply after the deadline is the supervisor's to judge).
-- The attempt's history row is closed with p_cause; a decision row (p_history_kind) and, for a
-- counted retry, a step_retrying event are written. `reached` remembers that some attempt may
-- have had an effect (compensation skips steps none of whose attempts did).
CREATE OR REPLACE FUNCTION sas_step_fail(
    p_ids bigint[], p_leases uuid[], p_errors text[], p_reached boolean[], p_cause text, p_count boolean,
    p_min_backoff double precision, p_actor text, p_history_kind text, p_require_live boolean
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_result jsonb;
    v_leases uuid[];
    v_errors text[];
BEGIN
    -- Plans that hold whatever the statistics say (issue 29, item 5; bench/stats_after_burst.py):
    -- the steps are locked by primary key alone and the guard is read from the locked rows, the
    -- update names them by primary key, and each attempt's history row is closed by its lease
    -- (below). With the guard in the lock's WHERE, on the statistics from before a burst the
    -- planner read the whole Processing partial index once per id (a sweep batch of 100 at
    -- 4,300 Processing: 430,000 comparisons), and closed the history rows by scanning a whole
    -- partition's lease index once per row: 1 s a sweep batch.
    WITH input AS (
        SELECT * FROM unnest(p_ids, p_leases, p_errors, p_reached) AS t(id, lease, error, reached)
    ), locked AS MATERIALIZED (
        SELECT s.id, s.run_id, s.name, s.kind, s.lease, s.max_failures, s.close_by, s.failure_count,
               s.reached, s.backoff_max, s.backoff_base, s.process_state, s.complete_by
        FROM scheduler_step AS s
        WHERE s.id = ANY(p_ids)
        ORDER BY s.id
        FOR UPDATE
    ), cur AS (
        SELECT s.id, s.run_id, s.name, s.kind, s.lease, s.max_failures, s.close_by,
               s.failure_count + CASE WHEN p_count OR s.kind = 'compensation' THEN 1 ELSE 0 END AS failures,
               s.reached OR coalesce(i.reached, false) AS reached,
               left(i.error, 4000) AS error,
               CASE WHEN p_count
                    THEN greatest(p_min_backoff + random() * 0.1,
                                  least(s.backoff_max, s.backoff_base * power(2, least(s.failure_count, 40)))
                                      * (0.5 + random() / 2))
                    ELSE p_min_backoff + random() * 0.1
               END AS delay
        FROM locked AS s JOIN input AS i ON i.id = s.id
        WHERE s.process_state = 'processing' AND s.lease = i.lease
          AND (NOT p_require_live OR s.complete_by > statement_timestamp())
    ), decided AS (
        SELECT c.*,
               CASE WHEN c.kind = 'forward' AND p_count AND c.failures >= c.max_failures THEN 'failures'
                    WHEN c.kind = 'forward' AND c.close_by IS NOT NULL
                         AND statement_timestamp() + make_interval(secs => c.delay) > c.close_by THEN 'deadline'
               END AS give_up
        FROM cur AS c
    ), changed AS (
        UPDATE scheduler_step AS s
        SET process_state = CASE WHEN d.give_up IS NULL THEN 'pending' ELSE 'error' END,
            failure_count = d.failures,
            reached = d.reached,
            locked_by = NULL,
            lease = CASE WHEN d.give_up IS NULL THEN NULL ELSE s.lease END,
            complete_by = CASE WHEN d.give_up IS NULL THEN NULL ELSE s.complete_by END,
            start_by = NULL,
            not_before = CASE WHEN d.give_up IS NULL
                              THEN statement_timestamp() + make_interval(secs => d.delay)
                              ELSE s.not_before END,
            finished_at = CASE WHEN d.give_up IS NULL THEN NULL ELSE statement_timestamp() END,
            last_error = d.error,
            updated_at = statement_timestamp()
        FROM decided AS d
        -- Locked by `locked`, guarded in `cur`: the row is the one decided on.
        WHERE s.id = d.id AND s.lease = d.lease
        RETURNING s.id, d.run_id, d.name, d.kind, d.lease, d.failures, d.max_failures, d.error,
                  d.delay, d.give_up, d.reached
    ), logged AS (
        INSERT INTO scheduler_taskexecutionhistory
            (step_id, run_id, kind, status, lease, retry_count, worker, error, detail, started_at, ended_at)
        SELECT id, run_id, p_history_kind,
               CASE WHEN give_up IS NULL THEN 'retry_scheduled' ELSE 'errored' END, NULL, failures, p_actor, error,
               jsonb_build_object('cause', p_cause, 'counted', p_count, 'failed_lease', lease::text,
                                  'give_up', give_up,
                                  'backoff_seconds', CASE WHEN give_up IS NULL THEN round(delay::numeric, 3) ELSE 0 END),
               statement_timestamp(), statement_timestamp()
        FROM changed
    ), retry_events AS (
        INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
        SELECT sas_uuid7(), run_id, id, 'step_retrying',
               jsonb_build_object('step', name, 'failure_count', failures, 'error', left(error, 500)),
               statement_timestamp()
        FROM changed WHERE give_up IS NULL AND p_count
        RETURNING id
    )
    SELECT jsonb_build_object(
        'retried', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'step_id', id, 'run_id', run_id, 'name', name, 'kind', kind, 'delay', delay,
                        'failure_count', failures) ORDER BY id), '[]'::jsonb)
                    FROM changed WHERE give_up IS NULL),
        'errored', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'step_id', id, 'run_id', run_id, 'name', name, 'kind', kind,
                        'failure_count', failures, 'max_failures', max_failures, 'error', error,
                        'give_up', give_up) ORDER BY id), '[]'::jsonb)
                    FROM changed WHERE give_up IS NOT NULL),
        'alerting', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'step_id', id, 'run_id', run_id, 'name', name, 'kind', kind,
                        'failure_count', failures, 'max_failures', max_failures, 'error', error)
                        ORDER BY id), '[]'::jsonb)
                    FROM changed WHERE kind = 'compensation' AND failures = max_failures),
        'event_ids', (SELECT coalesce(jsonb_agg(id), '[]'::jsonb) FROM retry_events)),
        (SELECT array_agg(lease ORDER BY id) FROM changed), (SELECT array_agg(error ORDER BY id) FROM changed)
    INTO v_result, v_leases, v_errors;
    -- Each attempt's history row by its lease, in its claim's partitions: the statement
    -- sas_step_succeed runs for a success (an index probe per lease, planned per value).
    FOR i IN 1 .. coalesce(cardinality(v_leases), 0) LOOP
        UPDATE scheduler_taskexecutionhistory
        SET status = p_cause, ended_at = statement_timestamp(), error = v_errors[i]
        WHERE lease = v_leases[i] AND kind = 'attempt'
          AND started_at BETWEEN sas_lease_time(v_leases[i]) - interval '1 hour'
                             AND sas_lease_time(v_leases[i]) + interval '1 minute';
    END LOOP;
    RETURN v_result || jsonb_build_object('events', sas_observed_events(ARRAY(
        SELECT jsonb_array_elements_text(v_result -> 'event_ids')::bigint)));
END;
$$;


-- continue: a page of a paginated step committed (its effect and its checkpoint, in the
-- agent's own fenced transaction); Processing -> Pending at once, no failure counted, and
-- with p_claim claimed again in the same statement for the next page (a new lease and
-- deadline: each page is a short attempt of its own). The failure budget starts again: a
-- committed page is progress, so max_failures bounds the failures of one page, not of the
-- whole input. The attempt's history row is closed as continued.
-- Guard: process_state = 'processing' AND lease = p_lease AND complete_by > now, like any
-- reply; a refused one is recorded by sas_reply_ignored.
CREATE OR REPLACE FUNCTION sas_step_continue(p_step_id bigint, p_lease uuid, p_instance text, p_claim boolean)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    v_claim jsonb := '{"claims": [], "events": []}'::jsonb;
BEGIN
    UPDATE scheduler_step
    SET process_state = 'pending', locked_by = NULL, lease = NULL, complete_by = NULL, start_by = NULL,
        not_before = statement_timestamp(), failure_count = 0, reached = true, last_error = '',
        updated_at = statement_timestamp()
    WHERE id = p_step_id AND process_state = 'processing' AND lease = p_lease
      AND complete_by > statement_timestamp()
    RETURNING id, run_id INTO s;
    IF NOT FOUND THEN
        RETURN sas_reply_ignored(p_step_id, p_lease, 'continue', p_instance, '', NULL);
    END IF;
    UPDATE scheduler_taskexecutionhistory
    SET status = 'continued', ended_at = statement_timestamp()
    WHERE lease = p_lease AND kind = 'attempt'
      AND started_at BETWEEN sas_lease_time(p_lease) - interval '1 hour' AND sas_lease_time(p_lease) + interval '1 minute';
    IF p_claim THEN
        v_claim := sas_step_claim(ARRAY[s.id], p_instance);
    END IF;
    RETURN jsonb_build_object('outcome', 'accepted', 'step_id', s.id, 'run_id', s.run_id,
                              'claims', v_claim -> 'claims', 'events', v_claim -> 'events');
END;
$$;


-- heartbeat: the agent of a heartbeat step is alive. Processing -> Processing with
-- complete_by = greatest(complete_by, now + heartbeat_window) (a heartbeat never shortens it)
-- and start_by cleared (its agent evidently started); its HeartbeatStatus row goes in_progress with
-- the time, counting the heartbeats of this attempt. One statement.
-- Guard: process_state = 'processing' AND lease = p_lease AND complete_by > now (a worker
-- resumed after its deadline finds its lease gone) AND heartbeat_window IS NOT NULL. A refused
-- heartbeat extends nothing and is recorded (sas_reply_ignored, outcome heartbeat).
CREATE OR REPLACE FUNCTION sas_step_heartbeat(p_step_id bigint, p_lease uuid, p_worker text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_complete_by timestamptz;
BEGIN
    WITH s AS (
        UPDATE scheduler_step
        SET complete_by = greatest(complete_by, statement_timestamp() + heartbeat_window),
            start_by = NULL, updated_at = statement_timestamp()
        WHERE id = p_step_id AND process_state = 'processing' AND lease = p_lease
          AND complete_by > statement_timestamp() AND heartbeat_window IS NOT NULL
        RETURNING id, complete_by
    ), status AS (
        UPDATE scheduler_heartbeatstatus AS h
        SET status = 'in_progress', worker = left(p_worker, 200),
            heartbeats = CASE WHEN h.lease = p_lease THEN h.heartbeats + 1 ELSE 1 END,
            lease = p_lease, last_heartbeat_at = statement_timestamp(), updated_at = statement_timestamp()
        FROM s WHERE h.step_id = s.id
    )
    SELECT complete_by INTO v_complete_by FROM s;
    IF v_complete_by IS NULL THEN
        RETURN sas_reply_ignored(p_step_id, p_lease, 'heartbeat', p_worker, 'lease lost', NULL);
    END IF;
    RETURN jsonb_build_object('outcome', 'extended', 'complete_by', v_complete_by);
END;
$$;


-- runs_insert: new runs in one statement - the runs Pending, their forward steps (the first
-- Pending, due now; the rest Waiting) and a "received" event each (a job occurrence's "started"
-- history row is the jobs dispatcher's: `job_history_open`, same transaction). A run whose job
-- occurrence already has a run (unique run_job_occurrence_unique) is not written, nor its steps
-- or event. Every step carries its run's owner (0 for none: the fair claim's key) and priority;
-- a run's first step expires at now + its p_schedule_to_start (NULL: never; issue 18). One row
-- per run written: its id, its first step's id and its "received" event (the event's
-- created_at is the run's: one statement_timestamp()). plpgsql, so that a session plans the
-- statement once (the jobs dispatcher's batches; run_submit's one run). Arrays in: the p_
-- arrays up to p_first_payloads have one element per run; a run's steps are those of its
-- shape (p_shapes: a workflow's steps and their policies, p_shape_* one element per step of
-- each shape in the batch - a jobs batch is hundreds of runs of a few workflows); the first
-- step's payload is the run's p_first_payloads, a later step's built at submit is in p_later_*
-- (none: NULL, built when the step comes due).
CREATE OR REPLACE FUNCTION sas_runs_insert(
    p_run_ids uuid[],
    p_workflows text[],
    p_inputs jsonb[],
    p_owner_ids bigint[],
    p_priorities smallint[],
    p_job_ids bigint[],
    p_correlation_ids text[],
    p_scheduled_for timestamptz[],
    p_job_attempts smallint[],
    p_deadlines timestamptz[],
    p_observed boolean[],
    p_schedule_to_start interval[],
    p_shapes integer[],
    p_first_payloads jsonb[],
    p_shape_ids integer[],
    p_shape_seqs integer[],
    p_shape_names text[],
    p_shape_operations text[],
    p_shape_timeouts interval[],
    p_shape_queue_timeouts interval[],
    p_shape_schedule_to_close interval[],
    p_shape_max_failures integer[],
    p_shape_heartbeat_windows interval[],
    p_shape_backoff_base float8[],
    p_shape_backoff_max float8[],
    p_later_run_ids uuid[],
    p_later_seqs integer[],
    p_later_payloads jsonb[]
) RETURNS TABLE (run_id uuid, first_step_id bigint, event_pk bigint, event_id uuid, data jsonb, created_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
        WITH runs AS (
            INSERT INTO scheduler_run
                (id, workflow, input, owner_id, priority, deadline, state, cancel_requested, observed, job_id,
                 correlation_id, error, created_at, updated_at, finished_at, scheduled_for, job_attempt, job_settled)
            SELECT r.id, r.workflow, r.input, r.owner_id, r.priority, r.deadline, 'pending', false, r.observed, r.job_id,
                   r.correlation_id, '', statement_timestamp(), statement_timestamp(), NULL, r.scheduled_for,
                   r.job_attempt, false
            FROM unnest(p_run_ids, p_workflows, p_inputs, p_owner_ids,
                        p_priorities, p_job_ids, p_correlation_ids,
                        p_scheduled_for, p_job_attempts, p_deadlines,
                        p_observed)
                 AS r(id, workflow, input, owner_id, priority, job_id, correlation_id, scheduled_for, job_attempt,
                      deadline, observed)
            ON CONFLICT (job_id, scheduled_for, job_attempt, owner_key) WHERE job_id IS NOT NULL DO NOTHING
            RETURNING id, workflow, correlation_id, job_id, scheduled_for, job_attempt, created_at, deadline,
                      owner_id, priority
        ), steps AS (
            INSERT INTO scheduler_step
                (run_id, name, kind, seq, operation, compensates_id, process_state, locked_by, complete_by,
                 failure_count, not_before, lease, idempotency_key, start_by, close_by, reached, timeout,
                 queue_timeout, schedule_to_close, max_failures, heartbeat_window, backoff_base, backoff_max, priority,
                 deadline, attempts, payload, result, last_error, error_permanent, created_at, updated_at, finished_at,
                 owner_id, expires_at)
            SELECT runs.id, s.name, 'forward', s.seq, s.operation, NULL,
                   CASE WHEN s.seq = 0 THEN 'pending' ELSE 'waiting' END, NULL, NULL,
                   0, statement_timestamp(), NULL, runs.id::text || ':' || s.name, NULL, NULL, false, s.timeout,
                   s.queue_timeout, s.schedule_to_close, s.max_failures, s.heartbeat_window, s.backoff_base,
                   s.backoff_max, runs.priority, runs.deadline, 0,
                   CASE WHEN s.seq = 0 THEN w.first_payload ELSE l.payload END,
                   NULL, '', false, statement_timestamp(), statement_timestamp(), NULL, coalesce(runs.owner_id, 0),
                   CASE WHEN s.seq = 0 THEN statement_timestamp() + w.schedule_to_start END
            FROM unnest(p_run_ids, p_shapes, p_schedule_to_start, p_first_payloads)
                 AS w(run_id, shape, schedule_to_start, first_payload)
            JOIN runs ON runs.id = w.run_id
            JOIN unnest(p_shape_ids, p_shape_seqs, p_shape_names, p_shape_operations, p_shape_timeouts,
                        p_shape_queue_timeouts, p_shape_schedule_to_close, p_shape_max_failures,
                        p_shape_heartbeat_windows, p_shape_backoff_base, p_shape_backoff_max)
                 AS s(shape, seq, name, operation, timeout, queue_timeout, schedule_to_close, max_failures,
                      heartbeat_window, backoff_base, backoff_max) ON s.shape = w.shape
            LEFT JOIN unnest(p_later_run_ids, p_later_seqs, p_later_payloads) AS l(run_id, seq, payload)
                 ON l.run_id = w.run_id AND l.seq = s.seq
            RETURNING id, run_id, seq
        ), events AS (
            INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
            SELECT sas_uuid7(), id, NULL, 'received',
                   jsonb_build_object('workflow', workflow, 'correlation_id', correlation_id), statement_timestamp()
            FROM runs
            RETURNING id, event_id, run_id, data, created_at
        )
        SELECT e.run_id, first.id, e.id, e.event_id, e.data, e.created_at
        FROM events AS e JOIN steps AS first ON first.run_id = e.run_id AND first.seq = 0;
END;
$$;
