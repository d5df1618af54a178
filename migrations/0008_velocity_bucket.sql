-- Velocity limits count per bucket: the intent's asset and source, trimmed and case-folded
-- (libs/store/src/movements.rs velocity_bucket). An index on that expression, so the sum over
-- a bucket's in-flight and recent movements does not scan the table. Expand-only.
CREATE INDEX IF NOT EXISTS movement_requests_velocity_bucket ON movement_requests ((
    lower(btrim(intent ->> 'asset')) || '|' || CASE jsonb_typeof(intent -> 'source')
        WHEN 'string' THEN lower(btrim(intent ->> 'source'))
        WHEN 'object' THEN COALESCE(lower(btrim(intent -> 'source' ->> 'address')), (intent -> 'source')::text)
        ELSE '' END));
