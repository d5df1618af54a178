-- Issue 36 (docs/benchmarks.md, session 33): the dispatch listing read every READY node. It
-- joined each one to its movement, tested its pauses and sorted them all by the movement's
-- creation time to return the first few (16 a listing): its cost grew with the backlog of
-- READY nodes — a burst of approvals, a paused lane — though it returns the same few rows.
-- The READY nodes' index now holds them in the listing's order (the node's `created_at` is its
-- movement's: both are inserted in one transaction), so the listing walks it and stops once it
-- has its rows (`claims::candidates`). `mrn_ready` served no lookup by movement (those use the
-- unique `(request_id, node_key)` index); every other reader of READY nodes reads them all.
CREATE INDEX mrn_ready_fifo ON movement_request_nodes (created_at, id) WHERE node_state = 'READY';
DROP INDEX mrn_ready;
ALTER INDEX mrn_ready_fifo RENAME TO mrn_ready;
