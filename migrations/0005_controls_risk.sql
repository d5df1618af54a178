-- Issue 5: the kill switch (dispatch pauses), m-of-n approvals, and what velocity limits read.
-- Expand-only: running workers of the previous release keep working — but they do not know
-- these controls. Finish the rollout (no API or dispatcher replica of the previous release
-- left) before relying on pauses, risk limits or m-of-n approvals.

-- A row = new submits paused for that scope. `target` is '' for global, the lane for a lane
-- pause, the executor key for an executor pause. Resume deletes the row (the audit log keeps
-- the history).
CREATE TABLE dispatch_pauses (
    scope     text NOT NULL CHECK (scope IN ('global', 'lane', 'executor')),
    target    text NOT NULL DEFAULT '',
    reason    text NOT NULL CHECK (length(reason) BETWEEN 1 AND 2000),
    paused_by text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, target),
    CHECK ((scope = 'global') = (target = ''))
);

-- One row per distinct approver of a movement, bound to the hashes they saw.
CREATE TABLE movement_approvals (
    request_id  uuid NOT NULL REFERENCES movement_requests (id),
    approver    text NOT NULL,
    intent_hash text NOT NULL,
    plan_hash   text NOT NULL,
    reason      text,
    approved_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (request_id, approver)
);

-- Distinct approvers this movement needs (risk_controls / MG_RISK_* at creation; approval
-- re-evaluates and takes the larger).
ALTER TABLE movement_requests ADD COLUMN approvals_required integer NOT NULL DEFAULT 1
    CHECK (approvals_required BETWEEN 1 AND 10);

-- Velocity limits sum live movements per (case-folded) asset in a window.
CREATE INDEX movement_requests_velocity ON movement_requests (lower(intent ->> 'asset'), created_at);
