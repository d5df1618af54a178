-- `make bench`'s contract floor (docs/benchmarks.md "The contract's floor"): one step of a
-- chained sim node, written with the fewest statements the step's contract allows — each
-- write one statement, as qtg's node write is — run by pgbench (a C client: no application
-- between the statements) on qtg's own schema.
--
-- What each transaction keeps from DESIGN.md §2 and docs/architecture.md §4–§6:
--   the arm        intent before effect, one statement committed before the venue is called:
--                  the node PREPARING → SUBMITTING fenced by its claim token and attempt (the
--                  attempt begun: number, start, submit window, the submit-pending marker),
--                  under the movement's FOR SHARE and no pause holding it, with its audit row,
--                  its events (the preflight and prepare calls, the transition) and the
--                  prepared action;
--   the venue      the sim lane's submit (`sim_submit`, the venue stand-in qtg's load calls);
--   the record     the node SUBMITTING → COMPLETED fenced by its attempt and marker (the marker
--                  cleared, the submit accepted) with its audit row and events; the movement
--                  locked and its nodes read for derivation; the successor claimed (SKIP LOCKED,
--                  a new claim token and lease) and written BLOCKED → READY → PREPARING with an
--                  audit row and an event per hop; the movement's frontier.
-- Left out, so the floor is a floor: the API's approval, the first node's claim, the
-- movement's own transitions, leases' renewal, callbacks, NOTIFY, and every read qtg makes to
-- decide what to do next. A script run is one node's step; its arm finds
-- a claimed (PREPARING) node in its own statement, where qtg's loop knows the node it holds.
-- Run with `-M prepared` (each statement parsed and planned once per connection, as qtg's
-- statements are): the variables below are the statements' parameters.
-- Variables: `venue` (1: the venue's statement runs; 0: a venue that is not on this database).

WITH held AS (
    SELECT n.id, n.claim_token, n.attempt_no FROM movement_request_nodes n
    WHERE n.node_state = 'PREPARING' AND n.lease_expires_at IS NOT NULL
    ORDER BY n.lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED),
  upd AS (
    UPDATE movement_request_nodes n SET node_state = 'SUBMITTING', attempt_no = n.attempt_no + 1,
      started_at = clock_timestamp(), submit_by = clock_timestamp() + interval '1 minute',
      lease_expires_at = NULL, updated_at = now(), error_code = NULL, error_detail = NULL,
      provider_refs = jsonb_build_object('__submit_attempt_pending', true,
        '__submit_attempt_started_at', to_jsonb(clock_timestamp() AT TIME ZONE 'UTC'))
    FROM held
    WHERE n.id = held.id AND n.node_state = 'PREPARING' AND n.claim_token = held.claim_token
      AND n.attempt_no = held.attempt_no
      AND EXISTS (SELECT 1 FROM movement_requests r
                  WHERE r.id = n.request_id AND r.request_state = 'EXECUTING' FOR SHARE)
      AND NOT EXISTS (SELECT 1 FROM plan_nodes p WHERE p.id = n.plan_node_id AND EXISTS (
        SELECT 1 FROM dispatch_pauses c
        WHERE c.scope = 'global' OR (c.scope = 'lane' AND c.target = n.lane)
          OR (c.scope = 'executor' AND c.target = p.executor_key)))
    RETURNING n.id, n.request_id, n.attempt_no),
  audit AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT qtg_uuid7(), 'floor', 'node.transition', 'node', upd.id::text, upd.request_id,
      jsonb_build_object('node_key', 's01', 'from', 'PREPARING', 'to', 'SUBMITTING', 'attempt_no', upd.attempt_no)
    FROM upd),
  events AS (
    INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome, from_state,
      to_state, duration_ms, actor)
    SELECT upd.request_id, upd.id, upd.attempt_no, e.kind, e.method, e.outcome, e.from_state, e.to_state, e.ms,
      'floor'
    FROM upd, (VALUES (1, 'call', 'preflight', 'pass', NULL, NULL, 1), (2, 'call', 'prepare', 'ok', NULL, NULL, 1),
                      (3, 'transition', NULL, NULL, 'PREPARING', 'SUBMITTING', NULL))
      AS e(ord, kind, method, outcome, from_state, to_state, ms)
    ORDER BY e.ord)
INSERT INTO artifacts (id, request_id, request_node_id, attempt_no, kind, payload, payload_hash)
SELECT qtg_uuid7(), upd.request_id, upd.id, upd.attempt_no, 'prepared_action',
  '{"asset": "USDC", "amount": "1", "to": "sim"}',
  'sha256-0000000000000000000000000000000000000000000000000000000000000000'
FROM upd
RETURNING request_node_id AS node, request_id AS mv, attempt_no AS attempt \gset
\if :venue
SELECT sim_submit(:node || ':' || :attempt, 'exec.sim.transfer', :node, :attempt, now() + interval '1 minute',
  false);
\endif
BEGIN;
WITH upd AS (
    UPDATE movement_request_nodes SET node_state = 'COMPLETED', completed_at = now(),
      provider_refs = (provider_refs || '{"sim_ref": "floor"}') - '__submit_attempt_pending'
        - '__submit_attempt_started_at',
      submit_accepted_at = COALESCE(submit_accepted_at, now()), updated_at = now()
    WHERE id = :node AND node_state = 'SUBMITTING' AND attempt_no = :attempt
      AND provider_refs ? '__submit_attempt_pending'
    RETURNING id, request_id, attempt_no),
  audit AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT qtg_uuid7(), 'floor', 'node.transition', 'node', upd.id::text, upd.request_id,
      jsonb_build_object('node_key', 's01', 'from', 'SUBMITTING', 'to', 'COMPLETED', 'attempt_no', upd.attempt_no)
    FROM upd),
  events AS (
    INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome, from_state,
      to_state, duration_ms, actor)
    SELECT upd.request_id, upd.id, upd.attempt_no, e.kind, e.method, e.outcome, e.from_state, e.to_state, e.ms,
      'floor'
    FROM upd, (VALUES (1, 'call', 'submit', 'ok', NULL, NULL, 1),
                      (2, 'transition', NULL, NULL, 'SUBMITTING', 'COMPLETED', NULL))
      AS e(ord, kind, method, outcome, from_state, to_state, ms)
    ORDER BY e.ord)
SELECT count(*) FROM upd;
SELECT r.request_state, n.node_key, n.node_state FROM movement_requests r
  JOIN movement_request_nodes n ON n.request_id = r.id
WHERE r.id = :mv FOR UPDATE OF r;
WITH next AS (
    SELECT id, request_id FROM movement_request_nodes WHERE request_id = :mv AND node_state = 'BLOCKED'
    ORDER BY node_key LIMIT 1 FOR UPDATE SKIP LOCKED),
  upd AS (
    UPDATE movement_request_nodes n SET node_state = 'PREPARING', claim_token = gen_random_uuid(),
      lease_expires_at = clock_timestamp() + interval '1 hour', updated_at = now()
    FROM next WHERE n.id = next.id AND n.node_state = 'BLOCKED'
    RETURNING n.id, n.request_id, n.attempt_no),
  audit AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT qtg_uuid7(), 'floor', 'node.transition', 'node', upd.id::text, upd.request_id,
      jsonb_build_object('node_key', 's02', 'from', hop.from_state, 'to', hop.to_state, 'attempt_no', upd.attempt_no)
    FROM upd, (VALUES (1, 'BLOCKED', 'READY'), (2, 'READY', 'PREPARING')) AS hop(ord, from_state, to_state)
    ORDER BY hop.ord),
  events AS (
    INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, from_state, to_state, actor)
    SELECT upd.request_id, upd.id, upd.attempt_no, 'transition', hop.from_state, hop.to_state, 'floor'
    FROM upd, (VALUES (1, 'BLOCKED', 'READY'), (2, 'READY', 'PREPARING')) AS hop(ord, from_state, to_state)
    ORDER BY hop.ord)
UPDATE movement_requests SET current_frontier = '["s02"]', updated_at = now()
WHERE id = :mv AND EXISTS (SELECT 1 FROM upd);
COMMIT;
