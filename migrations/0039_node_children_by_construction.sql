-- Issue 36 (docs/benchmarks.md, session 32): the node events' and artifacts' foreign key to
-- their node. Every INSERT into them checked it after the statement — a nested
-- `SELECT … FOR KEY SHARE` on the node, with its own executor start-up: 6,400 a load round,
-- one per event and artifact row, about 4 % of the server's CPU under load (session 31's
-- profile). Dropping it took the load from 1926 to 2041 audited transitions/s (medians of
-- twelve alternating runs, ahead in ten of the twelve pairs).
--
-- What the key enforced — no row names a node that does not exist — every writer now holds
-- by construction, in its own statement, and more strictly (the row's movement is the node's
-- movement, which the key never checked; 0033 dropped the request_id key the same way):
-- - the one door (`qtg_node_written`, called by the node write for the row its UPDATE has
--   just written and locked) and `claims::hold_back` write from the node row they updated;
-- - `events::record_call`, `events::record_calls` and `artifacts::insert` insert from the
--   node row (`FROM movement_request_nodes n WHERE n.id = … AND n.request_id = …`) and fail
--   with `StoreError::NoNode` when it is not there, writing nothing.
-- Nodes and movements are never deleted (libs/store/src/retention.rs prunes only the two
-- outboxes), so a row cannot lose its node afterwards either.
ALTER TABLE node_events DROP CONSTRAINT IF EXISTS node_events_request_node_id_fkey;
ALTER TABLE artifacts DROP CONSTRAINT IF EXISTS artifacts_request_node_id_fkey;
