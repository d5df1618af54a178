-- no-transaction
-- Issue 36 (session 34): `mrn_dispatch_by_executor` (0043) serves the readers of READY nodes
-- that are not manual steps — the dispatch listing and the READY ages of `signals` — that
-- `mrn_dispatch` (0040) served. Dropped CONCURRENTLY so that the workers' node writes go on
-- meanwhile.
DROP INDEX CONCURRENTLY IF EXISTS mrn_dispatch;
