-- CCIP sends (docs/architecture.md §9.7): what a send was about to do, recorded when its
-- transaction is built (the nonce just reserved, before anything is signed), marked with every
-- hash before that hash is broadcast, and resolved as the message's fate becomes known:
-- 'prepared' → 'broadcast' → 'sent' (the message id, from the OnRamp's CCIPMessageSent) →
-- 'executed' | 'failed' (the OffRamp's execution state; FAILURE is not final). The stranded
-- reaper ends what nothing else will: 'released' (never broadcast, no signature can exist, the
-- node not in flight; its nonce given back by the EVM rules) or 'escalated' (a message with no
-- execution past the age threshold, handed to a person). Expand-only.
CREATE TABLE IF NOT EXISTS ccip_send_intent (
    id bigserial PRIMARY KEY,
    request_node_id uuid NOT NULL,
    request_id uuid,
    attempt_no int NOT NULL,
    chain_id bigint NOT NULL,
    from_address text NOT NULL,
    nonce bigint NOT NULL,
    reservation_id bigint,
    router text NOT NULL,
    destination_chain_selector text NOT NULL,
    receiver text NOT NULL,
    token text NOT NULL,
    amount text NOT NULL,
    fee_token text NOT NULL,
    max_fee text NOT NULL,
    status text NOT NULL DEFAULT 'prepared'
        CHECK (status IN ('prepared', 'broadcast', 'sent', 'executed', 'failed', 'released', 'escalated')),
    tx_hashes jsonb NOT NULL DEFAULT '[]'::jsonb,
    message_id text,
    sequence_number bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    -- Re-claims, operator retries on the same nonce and replacements are the same intent.
    UNIQUE (request_node_id, nonce)
);
CREATE INDEX IF NOT EXISTS ccip_send_intent_open ON ccip_send_intent (updated_at) WHERE status IN ('prepared', 'sent');
CREATE INDEX IF NOT EXISTS ccip_send_intent_message ON ccip_send_intent (message_id) WHERE message_id IS NOT NULL;
