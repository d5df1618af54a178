-- CCTP V2: the attested nonce of a burn belongs to one movement (libs/store/src/cctp.rs). In V2
-- the message two identical burns emit is byte-for-byte the same (the attester fills the
-- nonce), so binding an attested message to its burn by the fields the source wrote cannot tell
-- them apart: an attestation service answering one burn with an earlier identical movement's
-- message (its nonce already used on the destination) would let the mint complete, by the
-- transmitter's usedNonces, a burn that was never minted. The first movement to claim a
-- (source domain, nonce) keeps it; any other is refused.
CREATE TABLE IF NOT EXISTS cctp_attested_nonces (
    source_domain bigint NOT NULL,
    nonce text NOT NULL,
    request_id uuid NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_domain, nonce)
);
