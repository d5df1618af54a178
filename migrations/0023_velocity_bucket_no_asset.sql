-- A velocity limit counts per bucket: the intent's asset and source, trimmed and case-folded
-- (libs/store/src/movements.rs lock_velocity / velocity_used). Migration 0008's expression is
-- NULL for an intent without an `asset`, so such a movement took no bucket lock and counted
-- nothing against the limit; the bucket now reads a missing asset as the empty string, as the
-- engine's risk check does. The index follows the new expression (expand only: 0008's index
-- is left to a later contract step, so a binary still reading the old expression keeps it).
CREATE INDEX IF NOT EXISTS movement_requests_velocity_bucket_v2 ON movement_requests ((
    COALESCE(lower(btrim(intent ->> 'asset')), '') || '|' || CASE jsonb_typeof(intent -> 'source')
        WHEN 'string' THEN lower(btrim(intent ->> 'source'))
        WHEN 'object' THEN COALESCE(lower(btrim(intent -> 'source' ->> 'address')), (intent -> 'source')::text)
        ELSE '' END));
