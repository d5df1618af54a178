-- A movement may carry its own callback signing secret (else MG_CALLBACK_SECRET signs).
-- Never returned by the API, never logged. Expand-only.
ALTER TABLE movement_requests ADD COLUMN callback_secret text
    CHECK (callback_secret IS NULL OR length(callback_secret) BETWEEN 16 AND 256);
