-- The EVM lane's fence (docs/architecture.md §9.5): one nonce per (chain, address), reserved by
-- prepare in its own short transaction and owned by the *node* — a re-claim and an operator
-- retry reuse the same from-address and nonce until it is consumed, so at most one of a node's
-- transactions can ever be mined. 'reserved': taken, nothing broadcast; 'broadcast': at least
-- one transaction with it was sent (every hash in tx_hashes, recorded before the send);
-- 'consumed': a transaction with it is final on chain (the node's or another's); 'released':
-- given back (the reaper, for a reservation no attempt ever armed or broadcast), free for the
-- next prepare on that address. Expand-only.
CREATE TABLE IF NOT EXISTS evm_nonce_reservation (
    id              bigserial PRIMARY KEY,
    chain_id        bigint NOT NULL,
    address         text NOT NULL CHECK (address = lower(address)),
    nonce           bigint NOT NULL CHECK (nonce >= 0),
    request_node_id uuid,
    status          text NOT NULL CHECK (status IN ('reserved', 'broadcast', 'consumed', 'released')),
    tx_hashes       jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- Zero-value self-sends recovery broadcast to force the nonce (never the node's transfer).
    cancel_hashes   jsonb NOT NULL DEFAULT '[]'::jsonb,
    consumed_by     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
-- A nonce is live for one node at a time; a node holds one live nonce per chain.
CREATE UNIQUE INDEX IF NOT EXISTS evm_nonce_reservation_live
    ON evm_nonce_reservation (chain_id, address, nonce) WHERE status <> 'released';
CREATE UNIQUE INDEX IF NOT EXISTS evm_nonce_reservation_node
    ON evm_nonce_reservation (request_node_id, chain_id) WHERE status IN ('reserved', 'broadcast');
CREATE INDEX IF NOT EXISTS evm_nonce_reservation_age
    ON evm_nonce_reservation (updated_at) WHERE status = 'reserved';
