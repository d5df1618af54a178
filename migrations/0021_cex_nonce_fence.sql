-- The nonce fence of a venue without a deadline on its requests (Kraken, issue 28): the nonce a
-- withdraw request was signed with (written before it is sent, only while no fence was asked
-- for), when recovery asked for the fence (after which nothing with this key is signed), and
-- when a call with a higher nonce was accepted (after which the request can no longer act).
-- Expand-only.
ALTER TABLE cex_submit_keys ADD COLUMN IF NOT EXISTS nonce bigint;
ALTER TABLE cex_submit_keys ADD COLUMN IF NOT EXISTS fence_requested_at timestamptz;
ALTER TABLE cex_submit_keys ADD COLUMN IF NOT EXISTS fenced_at timestamptz;
