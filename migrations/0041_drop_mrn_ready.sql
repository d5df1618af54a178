-- no-transaction
-- Issue 36 (session 33): `mrn_dispatch` (0040) serves the readers of READY nodes — the
-- dispatch listing and the READY ages of `signals`, both of nodes that are not manual steps —
-- and no reader looked READY nodes up by movement (those use the unique `(request_id,
-- node_key)` index). Dropped CONCURRENTLY so that the workers' node writes go on meanwhile.
DROP INDEX CONCURRENTLY IF EXISTS mrn_ready;
