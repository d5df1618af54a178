-- no-transaction
-- Issue 36 (docs/benchmarks.md, session 33): the dispatch listing read every READY node. It
-- joined each one to its movement, tested its pauses and sorted them all by the movement's
-- creation time to return the first few (16 a listing), so its cost grew with the number of
-- READY nodes — 200 roots made READY by a burst of approvals — though it returns the same few
-- rows. This index holds the READY nodes a dispatcher may take in the listing's order (a
-- node's `created_at` is its movement's: `movements::insert` copies it), so the listing
-- (`claims::candidates`) walks it and stops once it has its rows. Migration 0041 drops the
-- index it replaces (`mrn_ready`, by movement, which no lookup used).
--
-- Built CONCURRENTLY, outside a transaction, one statement to a file: the previous release's
-- workers keep writing nodes while it builds (docs/deployment.md, upgrades). If the build
-- fails it leaves an invalid index of this name and the migration unapplied: drop it
-- (`DROP INDEX CONCURRENTLY mrn_dispatch`) and run the migrations again.
CREATE INDEX CONCURRENTLY mrn_dispatch ON movement_request_nodes (created_at, id)
    WHERE node_state = 'READY' AND node_kind <> 'manual';
