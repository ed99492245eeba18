-- Named statements of the alert transitions, loaded once by alerting/transitions.py (as
-- scheduler/sql/queries.sql is by scheduler/transitions.py: scheduler.sqlfiles.named_statements).
-- Each block starts with `-- name: <name>`; the text up to the next such line is the statement.
-- Parameters are psycopg's named style, %(name)s. Every state literal here is one of
-- AlertState's values (tests/alerting/test_transitions_sql.py).

-- name: alert_open
-- Insert a new incident, or count on the open one of the key. Conflict target: the partial
-- unique index alert_open_key_unique. An open alert's message is the latest finding's.
INSERT INTO alerting_alert (rule_id, run_id, step_id, kind, severity, subject, message, state, key,
                            count, created_at, fired_at, last_seen_at, announced_state)
VALUES (%(rule_id)s, %(run_id)s, %(step_id)s, %(kind)s, %(severity)s, %(subject)s, %(message)s,
        %(state)s, %(key)s, 1, statement_timestamp(),
        CASE WHEN %(state)s = 'firing' THEN statement_timestamp() END, statement_timestamp(), '')
ON CONFLICT (key) WHERE state <> 'resolved'
DO UPDATE SET last_seen_at = statement_timestamp(), message = EXCLUDED.message,
              count = alerting_alert.count + %(increment)s,
              state = CASE WHEN alerting_alert.state = 'pending'
                            AND alerting_alert.created_at <= statement_timestamp() - %(for_duration)s
                           THEN 'firing' ELSE alerting_alert.state END,
              fired_at = CASE WHEN alerting_alert.state = 'pending'
                               AND alerting_alert.created_at <= statement_timestamp() - %(for_duration)s
                              THEN statement_timestamp() ELSE alerting_alert.fired_at END
RETURNING id, count

-- name: alert_link
-- Link the runs (each once) and count the runs linked as the occurrences.
WITH linked AS (
    INSERT INTO alerting_alertrun (alert_id, run_id, linked_at)
    SELECT %(alert_id)s, r.id, statement_timestamp()
      FROM scheduler_run r WHERE r.id = ANY(%(run_ids)s::uuid[])
    ON CONFLICT (alert_id, run_id) DO NOTHING
    RETURNING 1
)
UPDATE alerting_alert
   -- The CTE's rows are not visible to the subquery (one snapshot): add them.
   SET count = GREATEST(count, (SELECT count(*) FROM alerting_alertrun WHERE alert_id = %(alert_id)s)
                               + (SELECT count(*) FROM linked)),
       run_id = COALESCE(run_id, (%(run_ids)s::uuid[])[1])
 WHERE id = %(alert_id)s

-- name: alert_link_many
-- The evaluator's links, every finding of one tick in one statement: the runs not yet linked to
-- the open alert of their key are linked, and only alerts that gained runs are counted again.
WITH pairs AS (
    SELECT a.id AS alert_id, p.run_id
      FROM unnest(%(keys)s::text[], %(runs)s::uuid[]) AS p(key, run_id)
      JOIN alerting_alert a ON a.key = p.key AND a.state <> 'resolved'
      JOIN scheduler_run r ON r.id = p.run_id
), linked AS (
    INSERT INTO alerting_alertrun (alert_id, run_id, linked_at)
    SELECT alert_id, run_id, statement_timestamp() FROM pairs
    ON CONFLICT (alert_id, run_id) DO NOTHING
    RETURNING alert_id, run_id
), gained AS (
    SELECT alert_id, count(*) AS n, (array_agg(run_id))[1] AS first_run FROM linked GROUP BY alert_id
)
UPDATE alerting_alert a
   SET count = GREATEST(a.count, (SELECT count(*) FROM alerting_alertrun l WHERE l.alert_id = a.id) + g.n),
       run_id = COALESCE(a.run_id, g.first_run)
  FROM gained g
 WHERE a.id = g.alert_id

-- name: alert_open_many
-- The evaluator's opens, every new or pending finding of a tick in one statement: the set-based
-- form of alert_open (insert a new incident, else - open already - advance pending -> firing after
-- the finding's for-duration). Keys are unique in the batch (ON CONFLICT may not touch a row twice).
WITH f AS (
    SELECT * FROM unnest(%(keys)s::text[], %(rule_ids)s::bigint[], %(kinds)s::text[], %(severities)s::text[],
                         %(subjects)s::text[], %(messages)s::text[], %(states)s::text[], %(run_ids)s::uuid[],
                         %(holds)s::interval[])
           AS f(key, rule_id, kind, severity, subject, message, state, run_id, hold)
)
INSERT INTO alerting_alert (rule_id, run_id, step_id, kind, severity, subject, message, state, key,
                            count, created_at, fired_at, last_seen_at, announced_state)
SELECT f.rule_id, f.run_id, NULL, f.kind, f.severity, f.subject, f.message, f.state, f.key, 1,
       statement_timestamp(), CASE WHEN f.state = 'firing' THEN statement_timestamp() END,
       statement_timestamp(), ''
  FROM f
ON CONFLICT (key) WHERE state <> 'resolved'
DO UPDATE SET last_seen_at = statement_timestamp(), message = EXCLUDED.message,
              state = CASE WHEN alerting_alert.state = 'pending' AND alerting_alert.created_at
                                <= statement_timestamp() - (SELECT hold FROM f WHERE f.key = EXCLUDED.key)
                           THEN 'firing' ELSE alerting_alert.state END,
              fired_at = CASE WHEN alerting_alert.state = 'pending' AND alerting_alert.created_at
                                   <= statement_timestamp() - (SELECT hold FROM f WHERE f.key = EXCLUDED.key)
                              THEN statement_timestamp() ELSE alerting_alert.fired_at END

-- name: alert_message_update
-- A firing alert whose finding now reads differently (a failure rate "2 of 2 runs failed" that
-- became "3 of 5"): the open alert says the current figure (issue 27, item 5), so the admin, the
-- customer's page and any later e-mail read it. Only rows whose message changed are written.
UPDATE alerting_alert a
   SET message = u.message, last_seen_at = statement_timestamp()
  FROM unnest(%(keys)s::text[], %(messages)s::text[]) AS u(key, message)
 WHERE a.key = u.key AND a.state = 'firing' AND a.message IS DISTINCT FROM u.message

-- name: alert_resolve
-- Open alerts of the given rules no longer found: resolved. One never announced (pending, or
-- firing but its first page held by the cooldown) is marked announced as resolved: nobody was
-- told it began, nobody is told it ended.
UPDATE alerting_alert
   SET resolved_at = statement_timestamp(),
       announced_state = CASE WHEN state = 'pending' OR announced_state = '' THEN 'resolved'
                              ELSE announced_state END,
       state = 'resolved'
 WHERE rule_id = ANY(%(rule_ids)s::bigint[]) AND state <> 'resolved' AND NOT (key = ANY(%(keys)s::text[]))
RETURNING id, rule_id

-- name: alert_announce
-- The announcement outbox: alerts whose state has not been announced; an incident's firing only
-- when no alert of its key (this one or an earlier incident's) was announced within the rule's
-- cooldown (alert_key_resolved_idx: by key); resolutions at once. Claimed by the UPDATE itself,
-- so two evaluators never announce one change twice. The inner SELECT is alert_announcements_due's
-- condition (tests/alerting/test_transitions_sql.py keeps the two the same).
UPDATE alerting_alert a
   SET announced_state = a.state, announced_at = statement_timestamp()
  FROM alerting_alertrule r
 WHERE a.id IN (
SELECT u.id FROM alerting_alert u
  JOIN alerting_alertrule ur ON ur.id = u.rule_id
 WHERE u.state <> u.announced_state AND u.state <> 'pending'
   AND (u.state = 'resolved'
        OR NOT EXISTS (SELECT 1 FROM alerting_alert p
                        WHERE p.key = u.key AND p.announced_at > statement_timestamp() - ur.cooldown))
         ORDER BY u.id LIMIT %(limit)s
         FOR UPDATE OF u SKIP LOCKED)
   AND r.id = a.rule_id
RETURNING a.id, a.state

-- name: alert_announcements_due
-- An expression for the evaluator's rules query (RawSQL): whether any announcement is due (one
-- probe of alert_unannounced_idx, evaluated once) - so a tick with nothing to announce claims nothing.
EXISTS (
SELECT u.id FROM alerting_alert u
  JOIN alerting_alertrule ur ON ur.id = u.rule_id
 WHERE u.state <> u.announced_state AND u.state <> 'pending'
   AND (u.state = 'resolved'
        OR NOT EXISTS (SELECT 1 FROM alerting_alert p
                        WHERE p.key = u.key AND p.announced_at > statement_timestamp() - ur.cooldown))
)

-- name: alert_open_of_rule
-- An expression for the evaluator's rules query (RawSQL): each rule's open alerts,
-- subject -> [state, message] (alert_open_rule_idx; the message: is the finding's different).
SELECT COALESCE(jsonb_object_agg(a.subject, jsonb_build_array(a.state, a.message)), '{}'::jsonb)
  FROM alerting_alert a
 WHERE a.rule_id = alerting_alertrule.id AND a.state <> 'resolved'
