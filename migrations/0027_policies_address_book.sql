-- Approval policy as code and the address book (docs/architecture.md §14). Expand only: old
-- workers never read the new columns; a movement created without a policy has them NULL.

-- Every version of the policy, kept: proposed by one admin, approved by others, in force from
-- its effective_at (never before its approval).
CREATE TABLE IF NOT EXISTS policy_versions (
    version            integer PRIMARY KEY CHECK (version >= 1),
    document           jsonb NOT NULL,
    document_hash      text NOT NULL,
    description        text,
    status             text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected')),
    proposed_by        text NOT NULL,
    approvals_required integer NOT NULL CHECK (approvals_required >= 1),
    effective_at       timestamptz NOT NULL,
    decided_by         text,
    decided_at         timestamptz,
    review_reason      text,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS policy_versions_in_force ON policy_versions (effective_at DESC, version DESC)
    WHERE status = 'approved';

CREATE TABLE IF NOT EXISTS policy_approvals (
    version     integer NOT NULL REFERENCES policy_versions (version),
    approver    text NOT NULL,
    reason      text,
    approved_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (version, approver)
);

-- Named destinations (and sources) per lane and network, with tags. An entry (or a change,
-- which is a new entry replacing the old) is proposed by one admin and activated by another;
-- it can be used from usable_at (its cool-down after activation).
CREATE TABLE IF NOT EXISTS address_book (
    id                uuid PRIMARY KEY,
    name              text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    lane              text NOT NULL,
    network           text NOT NULL DEFAULT '',
    address           text NOT NULL CHECK (length(address) BETWEEN 1 AND 200),
    tags              text[] NOT NULL DEFAULT '{}',
    status            text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'active', 'rejected', 'removed')),
    proposed_by       text NOT NULL,
    decided_by        text,
    decided_at        timestamptz,
    cool_down_seconds double precision NOT NULL DEFAULT 0 CHECK (cool_down_seconds >= 0),
    usable_at         timestamptz,
    replaces          uuid REFERENCES address_book (id),
    reason            text,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS address_book_active_name ON address_book (lower(name)) WHERE status = 'active';
CREATE UNIQUE INDEX IF NOT EXISTS address_book_active_address
    ON address_book (lane, network, lower(address)) WHERE status = 'active';
CREATE INDEX IF NOT EXISTS address_book_address ON address_book (lower(address)) WHERE status = 'active';

-- What decided a movement: the policy version, its rule and the approver groups it needs; the
-- requester's role (rules may name roles); each approver's role.
ALTER TABLE movement_requests ADD COLUMN IF NOT EXISTS policy_version integer;
ALTER TABLE movement_requests ADD COLUMN IF NOT EXISTS policy_rule text;
ALTER TABLE movement_requests ADD COLUMN IF NOT EXISTS policy_groups jsonb;
ALTER TABLE movement_requests ADD COLUMN IF NOT EXISTS created_by_role text;
ALTER TABLE movement_approvals ADD COLUMN IF NOT EXISTS approver_role text;

ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_type_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_type_check CHECK (entity_type IN (
    'movement', 'node', 'template', 'template_proposal', 'api_key', 'signer', 'executor', 'control', 'chain',
    'capital_transfer', 'venue_transfer', 'policy', 'address_book'));
