-- no-transaction
-- Issue 36 (session 34): the READY nodes without an executor key — written before 0042, then
-- made READY by their predecessor or an operator's retry — in the dispatch listing's order, so
-- that the listing (`claims::candidates`) takes them as it takes the others. Empty once the
-- nodes of that time are finished; a node write evaluates its predicate and adds nothing.
--
-- Built CONCURRENTLY, outside a transaction, one statement to a file (docs/deployment.md,
-- upgrades). If the build fails it leaves an invalid index of this name and the migration
-- unapplied: drop it (`DROP INDEX CONCURRENTLY mrn_dispatch_keyless`) and run the migrations
-- again.
CREATE INDEX CONCURRENTLY mrn_dispatch_keyless ON movement_request_nodes (created_at, id)
    WHERE node_state = 'READY' AND node_kind <> 'manual' AND executor_key IS NULL;
