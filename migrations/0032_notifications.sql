-- notification_dispatcher (issue 35): telling people. Channels (Slack- / Teams-compatible
-- incoming webhooks, signed generic webhooks, e-mail over SMTP) and routing rules are set by an
-- admin through the API. `notifications` is the outbox: a row per event, written by the
-- triggers below in the same transaction as the state change it reports (or, for conditions
-- that are a matter of time — a node UNKNOWN past its grace, a stale worker — by the
-- dispatcher's scan), deduplicated by `dedupe_key`. Routing fans a notification out to one
-- delivery per channel (unique: one per event and channel); deliveries are claimed under a
-- channel lease (one message in flight per channel), within the channel's rate, retried with
-- backoff; what is due for a channel at once goes as one message (a digest).
-- Expand-only: nothing existing changes shape.
CREATE TABLE notification_channels (
    id              uuid PRIMARY KEY,
    name            text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 128),
    kind            text NOT NULL CHECK (kind IN ('slack', 'teams', 'webhook', 'email')),
    -- What may be shown: the webhook's URL (credentials masked when shown), the signature
    -- scheme, the SMTP host, port, TLS mode, sender, recipients and user name.
    config          jsonb NOT NULL,
    -- Never shown again after creation: a chat webhook's URL (its path is the credential), a
    -- generic webhook's signing secret, the SMTP password.
    secret          text,
    rate_per_minute integer NOT NULL DEFAULT 30 CHECK (rate_per_minute BETWEEN 1 AND 6000),
    enabled         boolean NOT NULL DEFAULT true,
    -- The channel's one message in flight: a replica leases the channel, sends, releases it.
    lease_token     uuid,
    lease_expires_at timestamptz,
    created_by      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notification_routes (
    id             uuid PRIMARY KEY,
    channel_id     uuid NOT NULL REFERENCES notification_channels (id) ON DELETE CASCADE,
    -- Empty: every kind / every template.
    event_kinds    text[] NOT NULL DEFAULT '{}',
    templates      text[] NOT NULL DEFAULT '{}',
    min_severity   text NOT NULL DEFAULT 'info' CHECK (min_severity IN ('info', 'warning', 'critical')),
    -- approval_needed only when this principal may give the approval (not its creator, an
    -- approver's key, a seat in the policy's groups when the movement has them).
    approver       text,
    -- approval_needed only when a holder of this role may give the approval (the policy's
    -- groups admit the role, or no policy decided it): e.g. a channel every approver reads.
    approver_role  text CHECK (approver_role IN ('approver', 'operator', 'admin')),
    -- Quiet hours, minutes of the UTC day [start, end) (may wrap midnight): deliveries below
    -- critical wait for the end.
    quiet_start    integer CHECK (quiet_start BETWEEN 0 AND 1439),
    quiet_end      integer CHECK (quiet_end BETWEEN 0 AND 1439),
    -- Digest: deliveries wait for the next multiple of this many minutes (UTC) and what is due
    -- for a channel then goes as one message.
    digest_minutes integer CHECK (digest_minutes BETWEEN 1 AND 1440),
    created_by     text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((quiet_start IS NULL) = (quiet_end IS NULL))
);
CREATE INDEX notification_routes_channel ON notification_routes (channel_id);

CREATE TABLE notifications (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    dedupe_key   text NOT NULL UNIQUE,
    kind         text NOT NULL,
    severity     text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    movement_id  uuid,
    template_key text,
    subject      text NOT NULL,
    data         jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    routed_at    timestamptz
);
CREATE INDEX notifications_unrouted ON notifications (created_at) WHERE routed_at IS NULL;
CREATE INDEX notifications_recent ON notifications (created_at DESC, id DESC);

CREATE TABLE notification_deliveries (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    notification_id  uuid NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    channel_id       uuid NOT NULL REFERENCES notification_channels (id) ON DELETE CASCADE,
    route_id         uuid,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'dlq')),
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    claim_token      uuid,
    lease_expires_at timestamptz,
    -- The message this delivery went in (a digest carries several deliveries).
    batch_id         uuid,
    last_attempt_at  timestamptz,
    last_error       text,
    sent_at          timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (notification_id, channel_id)
);
CREATE INDEX notification_deliveries_due ON notification_deliveries (channel_id, next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX notification_deliveries_recent ON notification_deliveries (channel_id, last_attempt_at)
    WHERE last_attempt_at IS NOT NULL;

-- One notification per event: kind, severity, subject, data; the movement and template when
-- there is one. A second write of the same event (the same dedupe key) is a no-op. Nothing is
-- written while no route exists (a deployment that tells nobody keeps no outbox).
CREATE OR REPLACE FUNCTION qtg_notify(
    p_key text, p_kind text, p_severity text, p_movement uuid, p_template text, p_subject text, p_data jsonb
) RETURNS void LANGUAGE sql AS $$
    INSERT INTO notifications (dedupe_key, kind, severity, movement_id, template_key, subject, data)
    SELECT p_key, p_kind, p_severity, p_movement, p_template, left(p_subject, 500), p_data
     WHERE EXISTS (SELECT 1 FROM notification_routes)
    ON CONFLICT (dedupe_key) DO NOTHING
$$;

-- A movement waiting for approval, or for a person.
CREATE OR REPLACE FUNCTION qtg_notify_movement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.request_state IS NOT DISTINCT FROM NEW.request_state THEN
        RETURN NULL;
    END IF;
    IF NEW.request_state = 'PENDING_APPROVAL' THEN
        PERFORM qtg_notify('approval_needed:' || NEW.id, 'approval_needed', 'info', NEW.id, NEW.template_key,
            'Approval needed: ' || NEW.template_key || ' ' || coalesce(NEW.intent ->> 'amount', '') || ' '
                || coalesce(NEW.intent ->> 'asset', ''),
            jsonb_build_object('movement_id', NEW.id, 'template_key', NEW.template_key, 'intent', NEW.intent,
                'created_by', NEW.created_by, 'approvals_required', NEW.approvals_required,
                'expires_at', NEW.expires_at));
    ELSIF NEW.request_state IN ('MANUAL_INTERVENTION', 'WAITING_MANUAL_ACTION') THEN
        PERFORM qtg_notify(lower(NEW.request_state) || ':' || NEW.id || ':' || txid_current(),
            CASE NEW.request_state WHEN 'MANUAL_INTERVENTION' THEN 'movement_manual_intervention'
                                   ELSE 'movement_waiting_manual_action' END,
            CASE NEW.request_state WHEN 'MANUAL_INTERVENTION' THEN 'critical' ELSE 'warning' END,
            NEW.id, NEW.template_key,
            NEW.request_state || ': ' || NEW.template_key || ' movement ' || NEW.id,
            jsonb_build_object('movement_id', NEW.id, 'template_key', NEW.template_key,
                'request_state', NEW.request_state, 'intent', NEW.intent));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER movement_requests_notify AFTER INSERT OR UPDATE OF request_state ON movement_requests
    FOR EACH ROW EXECUTE FUNCTION qtg_notify_movement();

CREATE OR REPLACE FUNCTION qtg_notify_capital_transfer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'NEEDS_ATTENTION' AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state) THEN
        PERFORM qtg_notify('capital_transfer_attention:' || NEW.id || ':' || txid_current(),
            'capital_transfer_attention', 'warning', NEW.movement_id, NEW.template_key,
            'Capital transfer needs attention: ' || NEW.amount || ' ' || NEW.asset || ' ' || NEW.source || ' -> '
                || NEW.destination,
            jsonb_build_object('capital_transfer_id', NEW.id, 'movement_id', NEW.movement_id,
                'outcome', NEW.outcome, 'asset', NEW.asset, 'amount', NEW.amount::text));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER capital_transfer_requests_notify AFTER INSERT OR UPDATE OF state ON capital_transfer_requests
    FOR EACH ROW EXECUTE FUNCTION qtg_notify_capital_transfer();

-- Drift: once per new set of differences (as its alert).
CREATE OR REPLACE FUNCTION qtg_notify_drift() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'drift' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM NEW.status
                                 OR OLD.differences IS DISTINCT FROM NEW.differences) THEN
        PERFORM qtg_notify('drift:' || NEW.scope || ':' || md5(NEW.differences::text) || ':' || txid_current(),
            'drift', 'critical', NULL, NULL, 'Drift in ' || NEW.scope,
            jsonb_build_object('scope', NEW.scope, 'differences', NEW.differences,
                'executor_keys', NEW.executor_keys));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER drift_checks_notify AFTER INSERT OR UPDATE OF status, differences ON drift_checks
    FOR EACH ROW EXECUTE FUNCTION qtg_notify_drift();

CREATE OR REPLACE FUNCTION qtg_notify_dlq() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'dlq' AND OLD.status IS DISTINCT FROM 'dlq' THEN
        PERFORM qtg_notify('callback_dlq:' || NEW.id, 'callback_dlq', 'warning', NEW.request_id,
            (SELECT template_key FROM movement_requests WHERE id = NEW.request_id),
            'Callback dead-lettered: ' || NEW.event_type || ' after ' || NEW.attempts || ' attempts',
            jsonb_build_object('callback_id', NEW.id, 'movement_id', NEW.request_id, 'event_type', NEW.event_type,
                'attempts', NEW.attempts, 'last_error', NEW.last_error));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER movement_callback_outbox_notify AFTER UPDATE OF status ON movement_callback_outbox
    FOR EACH ROW EXECUTE FUNCTION qtg_notify_dlq();

CREATE OR REPLACE FUNCTION qtg_notify_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM qtg_notify('paused:' || NEW.scope || ':' || NEW.target || ':' || txid_current(),
        'executor_paused', 'warning', NULL, NULL,
        'Dispatch paused: ' || NEW.scope || CASE WHEN NEW.target <> '' THEN ' ' || NEW.target ELSE '' END,
        jsonb_build_object('scope', NEW.scope, 'target', NEW.target, 'reason', NEW.reason,
            'paused_by', NEW.paused_by));
    RETURN NULL;
END
$$;
CREATE TRIGGER dispatch_pauses_notify AFTER INSERT ON dispatch_pauses
    FOR EACH ROW EXECUTE FUNCTION qtg_notify_pause();

CREATE OR REPLACE FUNCTION qtg_notify_unexplained() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.alerted_at IS NOT NULL AND OLD.alerted_at IS NULL THEN
        PERFORM qtg_notify('venue_withdrawal_unexplained:' || NEW.id, 'venue_withdrawal_unexplained', 'critical',
            NULL, NULL,
            'Unexplained withdrawal: ' || NEW.amount || ' ' || NEW.asset || ' from ' || NEW.venue_key || '/'
                || NEW.account,
            jsonb_build_object('venue_key', NEW.venue_key, 'account', NEW.account, 'venue_ref', NEW.venue_ref,
                'asset', NEW.asset, 'amount', NEW.amount::text, 'address', NEW.address));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER venue_transfers_notify AFTER UPDATE OF alerted_at ON venue_transfers
    FOR EACH ROW EXECUTE FUNCTION qtg_notify_unexplained();

ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_type_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_type_check CHECK (entity_type IN (
    'movement', 'node', 'template', 'template_proposal', 'api_key', 'signer', 'executor', 'control', 'chain',
    'capital_transfer', 'venue_transfer', 'policy', 'address_book', 'notification_channel', 'notification'));
