-- Standard Webhooks beside v3 (issue 35): a movement may ask for its callbacks to be signed as
-- Standard Webhooks (webhook-id / webhook-timestamp / webhook-signature); NULL = the
-- deployment's MG_CALLBACK_SIGNATURE. Expand only: old workers ignore the column (and sign v3).
ALTER TABLE movement_requests ADD COLUMN callback_signature text
    CHECK (callback_signature IN ('v3', 'standard_webhooks'));
