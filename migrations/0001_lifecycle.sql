-- The movement lifecycle: templates, movements, nodes, history, outboxes, roster,
-- heartbeats, api keys and the sim lane's ledger. Every state column has a CHECK; every
-- worker query has an index behind it (partial indexes on node_state).

CREATE TABLE templates (
    id           uuid PRIMARY KEY,
    template_key text NOT NULL UNIQUE CHECK (length(template_key) BETWEEN 1 AND 128),
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE template_proposals (
    id              uuid PRIMARY KEY,
    template_key    text NOT NULL,
    description     text,
    definition      jsonb NOT NULL,
    compiled_plan_hash text NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
    proposed_by     text NOT NULL,
    reviewed_by     text,
    review_reason   text,
    plan_version_id uuid,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX template_proposals_pending_expiry
    ON template_proposals (expires_at) WHERE status = 'pending';

CREATE TABLE plan_versions (
    id                 uuid PRIMARY KEY,
    template_id        uuid NOT NULL REFERENCES templates (id),
    version            integer NOT NULL CHECK (version >= 1),
    compiled_plan_hash text NOT NULL CHECK (compiled_plan_hash ~ '^[0-9a-f]{64}$'),
    description        text,
    risk_controls      jsonb NOT NULL DEFAULT '{}'::jsonb,
    proposal_id        uuid REFERENCES template_proposals (id),
    created_by         text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (template_id, version)
);
ALTER TABLE template_proposals
    ADD CONSTRAINT template_proposals_plan_version_fk
    FOREIGN KEY (plan_version_id) REFERENCES plan_versions (id);

CREATE TABLE plan_nodes (
    id               uuid PRIMARY KEY,
    plan_version_id  uuid NOT NULL REFERENCES plan_versions (id),
    node_key         text NOT NULL,
    node_kind        text NOT NULL CHECK (node_kind IN ('action', 'observe', 'manual')),
    action_type      text NOT NULL,
    executor_key     text NOT NULL,
    signer_key       text,
    signing_required boolean NOT NULL DEFAULT false,
    config           jsonb NOT NULL DEFAULT '{}'::jsonb,
    timeout_policy   jsonb NOT NULL DEFAULT '{}'::jsonb,
    UNIQUE (plan_version_id, node_key),
    CHECK ((node_kind = 'manual') = (action_type LIKE 'manual\_%'))
);

CREATE TABLE plan_edges (
    plan_version_id uuid NOT NULL REFERENCES plan_versions (id),
    from_node_key   text NOT NULL,
    to_node_key     text NOT NULL,
    PRIMARY KEY (plan_version_id, from_node_key, to_node_key),
    FOREIGN KEY (plan_version_id, from_node_key) REFERENCES plan_nodes (plan_version_id, node_key),
    FOREIGN KEY (plan_version_id, to_node_key) REFERENCES plan_nodes (plan_version_id, node_key),
    CHECK (from_node_key <> to_node_key)
);

CREATE TABLE movement_requests (
    id                   uuid PRIMARY KEY,
    template_id          uuid NOT NULL REFERENCES templates (id),
    plan_version_id      uuid NOT NULL REFERENCES plan_versions (id),
    template_key         text NOT NULL,
    template_version     integer NOT NULL,
    compiled_plan_hash   text NOT NULL,
    intent               jsonb NOT NULL,
    intent_hash          text NOT NULL,
    input_params         jsonb NOT NULL DEFAULT '{}'::jsonb,
    request_state        text NOT NULL CHECK (request_state IN (
                             'PENDING_APPROVAL', 'APPROVED', 'EXECUTING',
                             'WAITING_MANUAL_ACTION', 'MANUAL_INTERVENTION', 'COMPLETED',
                             'FAILED', 'EXPIRED', 'REJECTED', 'CANCELLED')),
    approval_status      text NOT NULL DEFAULT 'pending'
                         CHECK (approval_status IN ('pending', 'approved', 'rejected')),
    approved_by          text,
    approved_at          timestamptz,
    approved_intent_hash text,
    approved_plan_hash   text,
    review_reason        text,
    created_by           text NOT NULL,
    idempotency_key      text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    body_hash            text NOT NULL,
    callback_url         text,
    callback_sequence    bigint NOT NULL DEFAULT 0,
    current_frontier     jsonb NOT NULL DEFAULT '[]'::jsonb,
    expires_at           timestamptz,
    completed_at         timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (created_by, idempotency_key)
);
CREATE INDEX movement_requests_state_created ON movement_requests (request_state, created_at, id);
CREATE INDEX movement_requests_created ON movement_requests (created_at DESC, id DESC);
CREATE INDEX movement_requests_pending_expiry
    ON movement_requests (expires_at) WHERE request_state = 'PENDING_APPROVAL';

CREATE TABLE movement_request_nodes (
    id                 uuid PRIMARY KEY,
    request_id         uuid NOT NULL REFERENCES movement_requests (id),
    plan_node_id       uuid NOT NULL REFERENCES plan_nodes (id),
    node_key           text NOT NULL,
    node_kind          text NOT NULL CHECK (node_kind IN ('action', 'observe', 'manual')),
    lane               text NOT NULL CHECK (lane IN ('ccip', 'stargate', 'cex', 'other')),
    node_state         text NOT NULL CHECK (node_state IN (
                           'BLOCKED', 'READY', 'PREPARING', 'AWAITING_SIGNATURE', 'SUBMITTING',
                           'SUBMITTED', 'OBSERVING', 'COMPLETED', 'FAILED', 'UNKNOWN',
                           'SKIPPED', 'CANCELLED')),
    attempt_no         integer NOT NULL DEFAULT 0 CHECK (attempt_no >= 0),
    provider_state     text,
    provider_refs      jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(provider_refs) = 'object'),
    provider_ref_id    text,
    error_code         text,
    error_detail       text,
    -- set when the venue accepted (or may have accepted) a submit of the current attempt:
    -- the node's side effect may exist. Cleared only by an operator retry.
    submit_accepted_at timestamptz,
    started_at         timestamptz,
    completed_at       timestamptz,
    last_observed_at   timestamptz,
    observe_count      integer NOT NULL DEFAULT 0,
    next_observe_at    timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (request_id, node_key)
);
CREATE INDEX mrn_request ON movement_request_nodes (request_id);
CREATE INDEX mrn_ready ON movement_request_nodes (request_id) WHERE node_state = 'READY';
CREATE INDEX mrn_observe ON movement_request_nodes (next_observe_at)
    WHERE node_state IN ('SUBMITTED', 'OBSERVING');
CREATE INDEX mrn_recover ON movement_request_nodes (lane, updated_at)
    WHERE node_state IN ('UNKNOWN', 'SUBMITTING');

CREATE TABLE artifacts (
    id              uuid PRIMARY KEY,
    request_id      uuid NOT NULL REFERENCES movement_requests (id),
    request_node_id uuid NOT NULL REFERENCES movement_request_nodes (id),
    attempt_no      integer NOT NULL,
    kind            text NOT NULL CHECK (kind IN (
                        'prepared_action', 'sign_result', 'proof', 'generated', 'manual_evidence')),
    payload         jsonb NOT NULL,
    payload_hash    text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX artifacts_node ON artifacts (request_node_id, attempt_no, kind);
CREATE INDEX artifacts_request ON artifacts (request_id);

CREATE TABLE node_events (
    id              bigserial PRIMARY KEY,
    request_id      uuid NOT NULL REFERENCES movement_requests (id),
    request_node_id uuid NOT NULL REFERENCES movement_request_nodes (id),
    attempt_no      integer NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('call', 'transition')),
    method          text CHECK (method IS NULL OR method IN (
                        'preflight', 'prepare', 'sign', 'submit', 'observe', 'recover')),
    outcome         text,
    from_state      text,
    to_state        text,
    error_code      text,
    error_detail    text,
    duration_ms     integer,
    actor           text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX node_events_node ON node_events (request_node_id, id);

CREATE TABLE movement_callback_outbox (
    id                 uuid PRIMARY KEY,
    request_id         uuid NOT NULL REFERENCES movement_requests (id),
    event_id           uuid NOT NULL,
    event_type         text NOT NULL CHECK (event_type IN (
                           'node_state_changed', 'request_state_changed', 'frontier_advanced',
                           'request_attention', 'request_expired')),
    sequence           bigint NOT NULL,
    payload            jsonb NOT NULL,
    callback_url       text NOT NULL,
    status             text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'dlq')),
    attempts           integer NOT NULL DEFAULT 0,
    max_attempts       integer NOT NULL DEFAULT 5,
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    last_error         text,
    callback_timestamp bigint NOT NULL,
    callback_nonce     text NOT NULL,
    replay_of          uuid REFERENCES movement_callback_outbox (id),
    sent_at            timestamptz,
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX callback_outbox_pending ON movement_callback_outbox (created_at) WHERE status = 'pending';
CREATE INDEX callback_outbox_request ON movement_callback_outbox (request_id, sequence);

CREATE TABLE executors (
    executor_key           text PRIMARY KEY,
    transport              text NOT NULL CHECK (transport IN ('local', 'grpc', 'http')),
    lane                   text NOT NULL CHECK (lane IN ('ccip', 'stargate', 'cex', 'other')),
    health_state           text NOT NULL DEFAULT 'unknown'
                           CHECK (health_state IN ('up', 'down', 'unknown', 'orphan')),
    last_health_checked_at timestamptz,
    last_error             text,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE signers (
    signer_key              text PRIMARY KEY,
    transport               text NOT NULL CHECK (transport IN ('local', 'grpc', 'http')),
    health_state            text NOT NULL DEFAULT 'unknown'
                            CHECK (health_state IN ('up', 'down', 'unknown', 'orphan')),
    observed_signer_address text CHECK (observed_signer_address IS NULL
                                        OR observed_signer_address ~ '^0x[0-9a-f]{40}$'),
    expected_signer_address text CHECK (expected_signer_address IS NULL
                                        OR expected_signer_address ~ '^0x[0-9a-f]{40}$'),
    last_health_checked_at  timestamptz,
    last_error              text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit_outbox (
    id          bigserial PRIMARY KEY,
    event_id    uuid NOT NULL UNIQUE,
    actor       text NOT NULL,
    action      text NOT NULL,
    entity_type text NOT NULL CHECK (entity_type IN (
                    'movement', 'node', 'template', 'template_proposal', 'api_key',
                    'signer', 'executor', 'control')),
    entity_id   text NOT NULL,
    movement_id uuid,
    data        jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX audit_outbox_movement ON audit_outbox (movement_id, id);

CREATE TABLE audit_events (
    id          bigserial PRIMARY KEY,
    outbox_id   bigint NOT NULL UNIQUE,
    event_id    uuid NOT NULL UNIQUE,
    actor       text NOT NULL,
    action      text NOT NULL,
    entity_type text NOT NULL,
    entity_id   text NOT NULL,
    movement_id uuid,
    data        jsonb NOT NULL,
    occurred_at timestamptz NOT NULL,
    promoted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_events_movement ON audit_events (movement_id, id);
CREATE INDEX audit_events_actor ON audit_events (actor, id);
CREATE INDEX audit_events_action ON audit_events (action, id);

CREATE TABLE worker_heartbeats (
    worker        text NOT NULL,
    network_class text NOT NULL,
    instance_id   text NOT NULL,
    hostname      text,
    pid           integer,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_beat_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker, network_class, instance_id)
);

CREATE TABLE api_keys (
    id         uuid PRIMARY KEY,
    principal  text NOT NULL CHECK (length(principal) BETWEEN 1 AND 128),
    roles      text[] NOT NULL CHECK (roles <@ ARRAY['viewer', 'requester', 'approver', 'operator', 'admin']
                                      AND cardinality(roles) >= 1),
    key_hash   text NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    created_by text,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

CREATE TABLE sim_ledger (
    id              bigserial PRIMARY KEY,
    idempotency_key text NOT NULL,
    executor_key    text NOT NULL,
    request_node_id uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sim_ledger_idem ON sim_ledger (idempotency_key);
CREATE INDEX sim_ledger_node ON sim_ledger (request_node_id);
