-- Audit promotion marks outbox rows instead of deleting them (the outbox stays the
-- transactional record; audit_events is the read-side projection). Expand-only.
ALTER TABLE audit_outbox ADD COLUMN promoted_at timestamptz;
CREATE INDEX audit_outbox_unpromoted ON audit_outbox (id) WHERE promoted_at IS NULL;
