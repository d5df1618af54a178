-- With MG_API_KEY_CREATION_APPROVALS=2 a new API key is first a request, which a second admin
-- (not the requester) approves; only then is the key (and its secret) created. Expand-only.
CREATE TABLE IF NOT EXISTS api_key_requests (
    id           uuid PRIMARY KEY,
    principal    text NOT NULL CHECK (length(principal) BETWEEN 1 AND 128),
    roles        text[] NOT NULL CHECK (roles <@ ARRAY['viewer', 'requester', 'approver', 'operator', 'admin']
                                        AND cardinality(roles) >= 1),
    requested_by text NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected')),
    decided_by   text,
    key_id       uuid REFERENCES api_keys (id),
    created_at   timestamptz NOT NULL DEFAULT now(),
    decided_at   timestamptz
);
