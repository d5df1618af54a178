-- `make bench`'s contract floor (docs/benchmarks.md "The contract's floor"): one step of a
-- chained sim node, written with the fewest statements the step's contract allows — each
-- write one statement, as qtg's node write is — run by pgbench (a C client: no application
-- between the statements) on qtg's own schema.
--
-- What each transaction keeps from DESIGN.md §2 and docs/architecture.md §4–§6:
--   the arm        intent before effect: the node PREPARING → SUBMITTING with its audit row,
--                  its events (the prepare call, the transition) and the prepared action, under
--                  the movement's FOR SHARE (no arm of a paused or cancelled movement), committed
--                  before the venue is called;
--   the venue      the sim lane's submit (`sim_submit`, the venue stand-in qtg's load calls);
--   the record     the node SUBMITTING → COMPLETED with its audit row and events; the movement
--                  locked and its nodes read for derivation; the successor claimed (SKIP LOCKED)
--                  and written BLOCKED → READY → PREPARING with an audit row and an event per
--                  hop; the movement's frontier.
-- Left out, so the floor is a floor: the API's approval, the first node's claim, the
-- movement's own transitions, leases' renewal, callbacks, NOTIFY, JSON built in SQL, and every
-- read qtg makes to decide what to do next. A script run is one node's step; it starts by
-- picking a PREPARING node, as the loop that holds the claim knows which one it has.
-- Run with `-M prepared` (each statement parsed and planned once per connection, as qtg's
-- statements are): the variables below are the statements' parameters.
-- Variables: `venue` (1: the venue's statement runs; 0: a venue that is not on this database).

BEGIN;
SELECT id AS node, request_id AS mv FROM movement_request_nodes
  WHERE node_state = 'PREPARING' AND lease_expires_at IS NOT NULL
  ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED \gset
WITH guard AS (SELECT 1 FROM movement_requests WHERE id = :mv AND request_state = 'EXECUTING' FOR SHARE),
  upd AS (
    UPDATE movement_request_nodes SET node_state = 'SUBMITTING', submit_by = now() + interval '1 minute',
      lease_expires_at = NULL, updated_at = now()
    WHERE id = :node AND node_state = 'PREPARING' AND EXISTS (SELECT 1 FROM guard)
    RETURNING id, request_id),
  audit AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT qtg_uuid7(), 'floor', 'node.transition', 'node', upd.id::text, upd.request_id,
      '{"node_key":"s01","from":"PREPARING","to":"SUBMITTING","attempt_no":1}' FROM upd),
  events AS (
    INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome, from_state,
      to_state, duration_ms, actor)
    SELECT upd.request_id, upd.id, 1, e.kind, e.method, e.outcome, e.from_state, e.to_state, e.ms, 'floor'
    FROM upd, (VALUES ('call', 'prepare', 'ok', NULL, NULL, 1),
                      ('transition', NULL, NULL, 'PREPARING', 'SUBMITTING', NULL))
      AS e(kind, method, outcome, from_state, to_state, ms))
INSERT INTO artifacts (id, request_id, request_node_id, attempt_no, kind, payload, payload_hash)
SELECT qtg_uuid7(), upd.request_id, upd.id, 1, 'prepared_action', '{"asset":"USDC","amount":"1","to":"sim"}',
  'sha256:0000000000000000000000000000000000000000000000000000000000000000' FROM upd;
COMMIT;
\if :venue
SELECT sim_submit(:node || '-1', 'exec.sim.transfer', :node, 1, now() + interval '1 minute', false);
\endif
BEGIN;
WITH upd AS (
    UPDATE movement_request_nodes SET node_state = 'COMPLETED', completed_at = now(), submit_by = NULL,
      updated_at = now()
    WHERE id = :node AND node_state = 'SUBMITTING'
    RETURNING id, request_id),
  audit AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT qtg_uuid7(), 'floor', 'node.transition', 'node', upd.id::text, upd.request_id,
      '{"node_key":"s01","from":"SUBMITTING","to":"COMPLETED","attempt_no":1}' FROM upd),
  events AS (
    INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome, from_state,
      to_state, duration_ms, actor)
    SELECT upd.request_id, upd.id, 1, e.kind, e.method, e.outcome, e.from_state, e.to_state, e.ms, 'floor'
    FROM upd, (VALUES ('call', 'submit', 'ok', NULL, NULL, 1),
                      ('transition', NULL, NULL, 'SUBMITTING', 'COMPLETED', NULL))
      AS e(kind, method, outcome, from_state, to_state, ms)),
  locked AS (SELECT 1 FROM movement_requests WHERE id = :mv FOR UPDATE)
SELECT (SELECT count(*) FROM locked), n.node_key, n.node_state FROM movement_request_nodes n
WHERE n.request_id = :mv;
WITH next AS (
    SELECT id, request_id FROM movement_request_nodes WHERE request_id = :mv AND node_state = 'BLOCKED'
    ORDER BY node_key LIMIT 1 FOR UPDATE SKIP LOCKED),
  upd AS (
    UPDATE movement_request_nodes n SET node_state = 'PREPARING', attempt_no = 1, started_at = now(),
      lease_expires_at = now() + interval '1 hour', updated_at = now()
    FROM next WHERE n.id = next.id AND n.node_state = 'BLOCKED'
    RETURNING n.id, n.request_id),
  audit AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT qtg_uuid7(), 'floor', 'node.transition', 'node', upd.id::text, upd.request_id, hop.data::jsonb
    FROM upd, (VALUES ('{"node_key":"s02","from":"BLOCKED","to":"READY","attempt_no":0}'),
                      ('{"node_key":"s02","from":"READY","to":"PREPARING","attempt_no":1}')) AS hop(data)),
  events AS (
    INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, from_state, to_state, actor)
    SELECT upd.request_id, upd.id, hop.attempt_no, 'transition', hop.from_state, hop.to_state, 'floor'
    FROM upd, (VALUES (0, 'BLOCKED', 'READY'), (1, 'READY', 'PREPARING')) AS hop(attempt_no, from_state, to_state))
UPDATE movement_requests SET current_frontier = '["s02"]', updated_at = now()
WHERE id = :mv AND EXISTS (SELECT 1 FROM upd);
COMMIT;
