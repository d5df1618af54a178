-- qtg-drift (verify_drift): the on-chain facts the lanes rely on, per scope (a chain, or the
-- signers), as an admin recorded them (drift_baselines) and as the last check saw them
-- (drift_checks). A drift alert is a callback with no movement.
CREATE TABLE drift_baselines (
    scope       text NOT NULL,
    fact        text NOT NULL,
    value       text NOT NULL,
    recorded_by text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, fact)
);

CREATE TABLE drift_checks (
    scope          text PRIMARY KEY,
    status         text NOT NULL CHECK (status IN ('ok', 'drift', 'unbaselined', 'error')),
    checked_at     timestamptz NOT NULL DEFAULT now(),
    -- fact -> value, as observed.
    observed       jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- [{fact, baseline, observed}] for every baseline fact the chain no longer shows.
    differences    jsonb NOT NULL DEFAULT '[]'::jsonb,
    executor_keys  jsonb NOT NULL DEFAULT '[]'::jsonb,
    error          text,
    -- When the current differences were last alerted (an alert per new set of differences).
    alerted_at     timestamptz
);

-- Expand only: old workers never write a row without a movement.
ALTER TABLE movement_callback_outbox ALTER COLUMN request_id DROP NOT NULL;
ALTER TABLE movement_callback_outbox DROP CONSTRAINT movement_callback_outbox_event_type_check;
ALTER TABLE movement_callback_outbox ADD CONSTRAINT movement_callback_outbox_event_type_check CHECK (event_type IN (
    'node_state_changed', 'request_state_changed', 'frontier_advanced', 'request_attention', 'request_expired',
    'drift_detected'));
ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_type_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_type_check CHECK (entity_type IN (
    'movement', 'node', 'template', 'template_proposal', 'api_key', 'signer', 'executor', 'control', 'chain'));
