-- balance_snapshot (qtg-balance) and capital_transfer_followup (qtg-followup).
-- Balances are append-only snapshots per venue / account / asset (the worker's and `fresh=true`
-- reads alike); retention deletes old rows. A capital transfer is a treasury request that
-- creates its movement and is followed until it is closed or handed to a person.
CREATE TABLE balance_snapshots (
    id         bigserial PRIMARY KEY,
    venue_key  text NOT NULL,
    account    text NOT NULL,
    asset      text NOT NULL,
    free       numeric NOT NULL,
    locked     numeric NOT NULL DEFAULT 0,
    source     text NOT NULL CHECK (source IN ('worker', 'fresh')),
    as_of      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX balance_snapshots_latest ON balance_snapshots (venue_key, asset, account, as_of DESC);
CREATE INDEX balance_snapshots_as_of ON balance_snapshots (as_of);
-- The balance check at creation: one asset's recent rows.
CREATE INDEX balance_snapshots_asset ON balance_snapshots (upper(asset), as_of DESC);

CREATE TABLE capital_transfer_requests (
    id               uuid PRIMARY KEY,
    requested_by     text NOT NULL,
    idempotency_key  text NOT NULL,
    body_hash        text NOT NULL,
    source           text NOT NULL,
    destination      text NOT NULL,
    asset            text NOT NULL,
    amount           numeric NOT NULL CHECK (amount > 0),
    reason           text NOT NULL,
    template_key     text NOT NULL,
    template_version integer,
    callback_url     text,
    state            text NOT NULL CHECK (state IN (
                         'PENDING', 'MOVEMENT_CREATED', 'COMPLETED', 'FAILED', 'NEEDS_ATTENTION')),
    movement_id      uuid REFERENCES movement_requests (id),
    -- Why it is closed or handed to a person.
    outcome          text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    closed_at        timestamptz,
    UNIQUE (requested_by, idempotency_key)
);
CREATE INDEX capital_transfer_open ON capital_transfer_requests (updated_at)
    WHERE state IN ('PENDING', 'MOVEMENT_CREATED', 'NEEDS_ATTENTION');

ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_type_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_type_check CHECK (entity_type IN (
    'movement', 'node', 'template', 'template_proposal', 'api_key', 'signer', 'executor', 'control', 'chain',
    'capital_transfer'));
ALTER TABLE movement_callback_outbox DROP CONSTRAINT movement_callback_outbox_event_type_check;
ALTER TABLE movement_callback_outbox ADD CONSTRAINT movement_callback_outbox_event_type_check CHECK (event_type IN (
    'node_state_changed', 'request_state_changed', 'frontier_advanced', 'request_attention', 'request_expired',
    'drift_detected', 'capital_transfer_attention'));
