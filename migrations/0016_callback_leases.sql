-- Callbacks follow §2.2 too: a row is claimed with a lease (no transaction or row lock is held
-- while it is sent), the claim counts the attempt (a send that never records an outcome still
-- reaches the dead-letter queue on schedule), and one receiver host's rows are bounded in
-- flight so a slow receiver delays no other.
ALTER TABLE movement_callback_outbox ADD COLUMN claim_token uuid;
ALTER TABLE movement_callback_outbox ADD COLUMN lease_expires_at timestamptz;
-- The receiver host (lower-case, without scheme, credentials or port): the unit of fairness.
ALTER TABLE movement_callback_outbox ADD COLUMN receiver text GENERATED ALWAYS AS (
    lower(substring(callback_url FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?(\[[^]]*\]|[^:/?#]*)'))
) STORED;
CREATE INDEX callback_outbox_in_flight ON movement_callback_outbox (receiver)
    WHERE status = 'pending' AND lease_expires_at IS NOT NULL;
CREATE INDEX callback_outbox_due ON movement_callback_outbox (next_attempt_at) WHERE status = 'pending';
