-- Leased dispatch (docs/architecture.md "The lease and the fence"): no lock is held across an
-- executor or signer call. A claim writes a fresh claim_token and lease_expires_at; every
-- write after a call is a compare-and-set on them; an armed attempt carries its absolute
-- submit_by, after which the venue (or the executor's key store) refuses it.
-- Expand-only: a worker of the previous release ignores these columns.

ALTER TABLE movement_request_nodes
    ADD COLUMN claim_token      uuid,
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN submit_by        timestamptz;

-- Expired leases (a dispatcher that died or froze while preparing or signing).
CREATE INDEX mrn_lease ON movement_request_nodes (lease_expires_at)
    WHERE node_state IN ('PREPARING', 'AWAITING_SIGNATURE');

-- The sim venue's fence (DESIGN.md §9, §2.2): one row per idempotency key, recorded before
-- the venue call, voided by Recover when the venue never saw it.
CREATE TABLE sim_keys (
    idempotency_key text PRIMARY KEY,
    request_node_id uuid NOT NULL,
    attempt_no      integer NOT NULL,
    status          text NOT NULL CHECK (status IN ('sent', 'void')),
    submit_by       timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sim_keys_node ON sim_keys (request_node_id, attempt_no);

-- Every submit *call* the sim venue received, refused ones included: a venue that
-- deduplicates by client id would hide a blind re-submit in sim_ledger.
CREATE TABLE sim_submit_calls (
    id              bigserial PRIMARY KEY,
    idempotency_key text NOT NULL,
    request_node_id uuid NOT NULL,
    attempt_no      integer NOT NULL,
    -- executed (a new ledger row), repeat (same key again), refused_void, refused_older,
    -- refused_late
    outcome         text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sim_submit_calls_node ON sim_submit_calls (request_node_id);

-- The sim venue's submit, atomic per node (one statement from the executor): the fence's
-- refusals first (void key, an older attempt than one already seen, past submit_by by the
-- venue's clock), then the key recorded before the ledger row, then the call counted.
CREATE FUNCTION sim_submit(p_key text, p_executor text, p_node uuid, p_attempt integer,
                           p_submit_by timestamptz, p_fail boolean)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_newest integer;
    v_outcome text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_node::text, 7));
    SELECT status INTO v_status FROM sim_keys WHERE idempotency_key = p_key;
    SELECT max(attempt_no) INTO v_newest FROM sim_keys WHERE request_node_id = p_node;
    IF v_status = 'void' THEN
        v_outcome := 'refused_void';
    ELSIF v_newest IS NOT NULL AND v_newest > p_attempt THEN
        v_outcome := 'refused_older';
    ELSIF p_submit_by IS NULL OR clock_timestamp() > p_submit_by THEN
        v_outcome := 'refused_late';
    ELSIF p_fail THEN
        -- The venue refused the order: the key can never execute.
        INSERT INTO sim_keys (idempotency_key, request_node_id, attempt_no, status, submit_by)
        VALUES (p_key, p_node, p_attempt, 'void', p_submit_by)
        ON CONFLICT (idempotency_key) DO UPDATE SET status = 'void', updated_at = now();
        v_outcome := 'failed';
    ELSE
        INSERT INTO sim_keys (idempotency_key, request_node_id, attempt_no, status, submit_by)
        VALUES (p_key, p_node, p_attempt, 'sent', p_submit_by)
        ON CONFLICT (idempotency_key) DO NOTHING;
        IF EXISTS (SELECT 1 FROM sim_ledger WHERE idempotency_key = p_key) THEN
            v_outcome := 'repeat';
        ELSE
            INSERT INTO sim_ledger (idempotency_key, executor_key, request_node_id)
            VALUES (p_key, p_executor, p_node);
            v_outcome := 'executed';
        END IF;
    END IF;
    INSERT INTO sim_submit_calls (idempotency_key, request_node_id, attempt_no, outcome)
    VALUES (p_key, p_node, p_attempt, v_outcome);
    RETURN v_outcome;
END $$;

-- The sim venue's recover: 'found' when the ledger has the key; otherwise (or when
-- p_void_always, a scripted FAILED) the key is voided so that no later Submit executes it,
-- and 'void' is answered.
CREATE FUNCTION sim_recover(p_key text, p_node uuid, p_attempt integer, p_void_always boolean)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_node::text, 7));
    IF NOT p_void_always AND EXISTS (SELECT 1 FROM sim_ledger WHERE idempotency_key = p_key) THEN
        RETURN 'found';
    END IF;
    INSERT INTO sim_keys (idempotency_key, request_node_id, attempt_no, status)
    VALUES (p_key, p_node, p_attempt, 'void')
    ON CONFLICT (idempotency_key) DO UPDATE SET status = 'void', updated_at = now();
    RETURN 'void';
END $$;

-- Node events of the lease itself: a re-claim after an expired lease ('claim') and a
-- compare-and-set that matched nothing ('arm').
ALTER TABLE node_events DROP CONSTRAINT node_events_method_check;
ALTER TABLE node_events ADD CONSTRAINT node_events_method_check CHECK (method IS NULL OR method IN (
    'preflight', 'prepare', 'sign', 'submit', 'observe', 'recover', 'claim', 'arm'));
