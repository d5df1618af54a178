-- cex_transfer_ingest (issue 28): what moved on a treasury's exchange accounts, whoever did it.
-- One row per venue account, direction and venue id (re-ingesting is an upsert: the status and
-- tx id follow the venue). `request_node_id` / `movement_id` link a row to the qtg node that
-- explains it; a withdrawal no node explains past the grace is alerted once (`alerted_at`, a
-- compare-and-set, so replicas alert once between them). Expand-only.
CREATE TABLE IF NOT EXISTS venue_transfers (
    id              bigserial PRIMARY KEY,
    venue_key       text NOT NULL,
    account         text NOT NULL,
    direction       text NOT NULL CHECK (direction IN ('withdrawal', 'deposit')),
    venue_ref       text NOT NULL,
    asset           text NOT NULL,
    network         text,
    amount          numeric NOT NULL CHECK (amount >= 0 AND amount <> 'NaN'::numeric),
    fee             numeric CHECK (fee >= 0 AND fee <> 'NaN'::numeric),
    address         text NOT NULL,
    address_tag     text,
    tx_id           text,
    client_id       text,
    status          text NOT NULL,
    occurred_at     timestamptz,
    request_node_id uuid,
    movement_id     uuid,
    linked_by       text,
    alerted_at      timestamptz,
    first_seen_at   timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (venue_key, direction, venue_ref)
);
CREATE INDEX IF NOT EXISTS venue_transfers_unlinked ON venue_transfers (first_seen_at) WHERE movement_id IS NULL;
CREATE INDEX IF NOT EXISTS venue_transfers_recent ON venue_transfers (first_seen_at DESC, id DESC);

-- Where each venue's ingestion stands: its history is complete up to `ingested_until` (the
-- venue's time, less the overlap each read repeats).
CREATE TABLE IF NOT EXISTS venue_transfer_cursors (
    venue_key      text PRIMARY KEY,
    ingested_until timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- Linking reads the nodes by the venue ids and tx ids their refs recorded.
CREATE INDEX IF NOT EXISTS mrn_exchange_withdrawal_id ON movement_request_nodes ((provider_refs->>'exchange_withdrawal_id'));
CREATE INDEX IF NOT EXISTS mrn_deposit_id ON movement_request_nodes ((provider_refs->>'deposit_id'));
CREATE INDEX IF NOT EXISTS mrn_txid ON movement_request_nodes ((provider_refs->>'txid'));

-- The alert of an unexplained withdrawal: its audit rows and its callback.
ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_type_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_type_check CHECK (entity_type IN (
    'movement', 'node', 'template', 'template_proposal', 'api_key', 'signer', 'executor', 'control', 'chain',
    'capital_transfer', 'venue_transfer'));
ALTER TABLE movement_callback_outbox DROP CONSTRAINT movement_callback_outbox_event_type_check;
ALTER TABLE movement_callback_outbox ADD CONSTRAINT movement_callback_outbox_event_type_check CHECK (event_type IN (
    'node_state_changed', 'request_state_changed', 'frontier_advanced', 'request_attention', 'request_expired',
    'drift_detected', 'capital_transfer_attention', 'venue_transfer_unexplained'));
