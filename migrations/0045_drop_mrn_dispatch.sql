-- no-transaction
-- Issue 36 (session 34): `mrn_dispatch_by_executor` (0043) and `mrn_dispatch_keyless` (0044)
-- serve the readers of READY nodes that are not manual steps — the dispatch listing and the
-- READY ages of `signals` — that `mrn_dispatch` (0040) served. Dropped CONCURRENTLY so that the
-- workers' node writes go on meanwhile. Not expand-only: until the dispatchers are rolled, the
-- previous release's listing reads every READY node again (docs/deployment.md).
DROP INDEX CONCURRENTLY IF EXISTS mrn_dispatch;
