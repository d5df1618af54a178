-- The CEX lane's fence (docs/architecture.md §9.4): one row per withdrawal idempotency key,
-- shared by every replica of the lane, written before the lane's first venue call for it.
-- 'recorded': the key passed the fence's checks; 'sent': a withdraw request with it may reach
-- the venue (signed with the venue's time `venue_time`, valid `recv_window_ms`); 'void':
-- the key can never reach the venue again (the venue refused it, it came too late, or
-- recovery concluded it absent). Expand-only.
CREATE TABLE IF NOT EXISTS cex_submit_keys (
    idempotency_key text PRIMARY KEY,
    venue           text NOT NULL,
    request_node_id uuid NOT NULL,
    attempt_no      integer NOT NULL,
    submit_by       timestamptz,
    status          text NOT NULL CHECK (status IN ('recorded', 'sent', 'void')),
    venue_time      timestamptz,
    recv_window_ms  integer,
    void_reason     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS cex_submit_keys_node ON cex_submit_keys (request_node_id, attempt_no);
