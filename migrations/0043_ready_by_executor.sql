-- no-transaction
-- Issue 36 (session 34): the READY nodes a dispatcher may take, by executor key and lane, each
-- in the listing's order (a node's `created_at` is its movement's). The dispatch listing
-- (`claims::candidates`) finds the executor keys and lanes that have READY nodes one index
-- probe each, skips those a pause holds or this dispatcher does not serve without reading
-- their nodes, walks the others in order and merges them. A READY node without a key (written
-- before 0042) is listed from `mrn_dispatch_keyless` (0044). Migration 0045 drops the index
-- these replace (`mrn_dispatch`, 0040).
--
-- Built CONCURRENTLY, outside a transaction, one statement to a file: the workers keep writing
-- nodes while it builds (docs/deployment.md, upgrades). If the build fails it leaves an
-- invalid index of this name and the migration unapplied: drop it (`DROP INDEX CONCURRENTLY
-- mrn_dispatch_by_executor`) and run the migrations again.
CREATE INDEX CONCURRENTLY mrn_dispatch_by_executor ON movement_request_nodes (executor_key, lane, created_at, id)
    WHERE node_state = 'READY' AND node_kind <> 'manual';
