-- Fee models (issue 28). `cex_submit_keys.request`: the withdraw request exactly as it may
-- reach the venue, written when the key is marked sent — recovery matches the venue's history
-- against what was sent (an amount grossed up by the fee at prepare is not the intent's).
-- `capital_transfer_requests.settlement`: what the completed movement debited, the fee it was
-- charged and what arrived, by the venue's fee model. Expand-only.
ALTER TABLE cex_submit_keys ADD COLUMN IF NOT EXISTS request jsonb;
ALTER TABLE capital_transfer_requests ADD COLUMN IF NOT EXISTS settlement jsonb;
