-- API keys can expire (the bootstrap key, given MG_API_BOOTSTRAP_ADMIN_KEY_TTL_SECONDS) and the
-- bootstrap key says it is one. Expand-only; the existing bootstrap key is marked.
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS expires_at timestamptz;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS bootstrap boolean NOT NULL DEFAULT false;
UPDATE api_keys SET bootstrap = true WHERE principal = 'bootstrap-admin' AND created_by IS NULL;
