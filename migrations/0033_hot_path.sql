-- Issue 36 (docs/benchmarks.md "What the measurement pointed at"): a node write is an UPDATE
-- that is never HOT (its state sits in partial index predicates), so every index of
-- movement_request_nodes gets an entry per write, and an INSERT into an append-only table
-- checks each foreign key with a row lock on the parent.

-- The unique (request_id, node_key) serves every lookup by request.
DROP INDEX IF EXISTS mrn_request;

-- The venue-reference lookups (libs/store/src/venue_transfers.rs, `provider_refs->>'k' = $1`,
-- which implies the predicate): only a node that carries the reference is indexed, so the
-- writes of every other node add nothing to them.
DROP INDEX IF EXISTS mrn_exchange_withdrawal_id;
CREATE INDEX mrn_exchange_withdrawal_id ON movement_request_nodes ((provider_refs->>'exchange_withdrawal_id'))
    WHERE (provider_refs->>'exchange_withdrawal_id') IS NOT NULL;
DROP INDEX IF EXISTS mrn_deposit_id;
CREATE INDEX mrn_deposit_id ON movement_request_nodes ((provider_refs->>'deposit_id'))
    WHERE (provider_refs->>'deposit_id') IS NOT NULL;
DROP INDEX IF EXISTS mrn_txid;
CREATE INDEX mrn_txid ON movement_request_nodes ((provider_refs->>'txid'))
    WHERE (provider_refs->>'txid') IS NOT NULL;

-- Migration 0023's bucket index replaced this one; nothing reads it, every non-HOT movement
-- write computed it.
DROP INDEX IF EXISTS movement_requests_velocity_bucket;

-- node_events and artifacts name their node, whose own key names the movement: the door
-- (libs/store/src/transition.rs) writes both from the node row it has just updated. The
-- request_id foreign key locked the movement row (FOR KEY SHARE) on every insert.
ALTER TABLE node_events DROP CONSTRAINT IF EXISTS node_events_request_id_fkey;
ALTER TABLE artifacts DROP CONSTRAINT IF EXISTS artifacts_request_id_fkey;

-- Room on each page for HOT updates of the movement row (frontier, callback sequence,
-- updated_at: none of them indexed).
ALTER TABLE movement_requests SET (fillfactor = 85);

-- The hot tables are vacuumed and analysed at 2 % of their rows changed rather than 20 %:
-- their live set is small beside their history (docs/deployment.md "PostgreSQL maintenance").
ALTER TABLE movement_request_nodes SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02);
ALTER TABLE movement_requests SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE movement_callback_outbox SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE audit_outbox SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02);

-- "Is this dead letter replayed?" (the DLQ view, attention, signals) looked for a replay by
-- scanning every callback ever sent; only replays are indexed.
CREATE INDEX IF NOT EXISTS callback_outbox_replay_of ON movement_callback_outbox (replay_of)
    WHERE replay_of IS NOT NULL;

-- outbox_retention (libs/store/src/retention.rs) finds the callbacks sent before its cut-off,
-- oldest first, without reading the rest.
CREATE INDEX IF NOT EXISTS callback_outbox_sent ON movement_callback_outbox (sent_at) WHERE status = 'sent';
