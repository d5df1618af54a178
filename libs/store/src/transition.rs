//! The one door for state (docs/architecture.md §4.2): every node or request state change checks the
//! transition table in `qtg_core`, writes the row with `updated_at`, appends `audit_outbox`,
//! records a `node_events` row (nodes), enqueues the callback (when the movement has a
//! callback URL) and notifies the workers that now have work — in one statement, inside the
//! caller's transaction. Polls (same-state updates) take the same path without the audit.

use qtg_core::{NodeState, RequestState};
use serde_json::{Map, Value};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::{Result, StoreError};

/// Who changes state, and why.
#[derive(Debug, Clone, Copy)]
pub struct Meta<'a> {
    pub actor: &'a str,
    pub reason: Option<&'a str>,
}

impl<'a> Meta<'a> {
    pub fn actor(actor: &'a str) -> Self {
        Meta { actor, reason: None }
    }

    pub fn with_reason(self, reason: &'a str) -> Self {
        Meta { reason: Some(reason), ..self }
    }
}

/// Field changes written with a node's state.
#[derive(Debug, Clone, Default)]
pub struct NodePatch {
    /// Start a submit attempt: `attempt_no + 1`, `started_at`, the `__submit_attempt_*`
    /// markers, and nothing left of the previous attempt (refs, ref id, provider state,
    /// observation schedule, side-effect flag, error).
    pub begin_attempt: bool,
    pub provider_state: Option<String>,
    pub provider_ref_id: Option<String>,
    /// Merged shallowly into `provider_refs`.
    pub merge_refs: Map<String, Value>,
    /// Removed from `provider_refs` after the merge.
    pub remove_refs: Vec<String>,
    /// `Some` sets (`error_code`, `error_detail`), possibly to NULL.
    pub error: Option<(Option<String>, Option<String>)>,
    /// `Some(true)`: the venue may hold a side effect; `Some(false)`: clear (operator retry).
    pub submit_accepted: Option<bool>,
    /// `Some(Some(s))`: next observation in `s` seconds; `Some(None)`: no schedule.
    pub next_observe_in: Option<Option<f64>>,
    /// An observation happened: `last_observed_at`, `observe_count + 1`.
    pub observed: bool,
    /// With `begin_attempt` (the arm): `submit_by = started_at + submit_window` seconds.
    pub submit_window_seconds: f64,
    /// A claim: a fresh `claim_token`, and for dispatch `lease_expires_at`.
    pub lease: Option<Lease>,
    /// The compare-and-set the write is conditional on, beside the `from` state.
    pub guard: Guard,
    /// Executor calls recorded in the same statement, before the transition's own event
    /// (only when the write matches), under `calls_attempt` (else the written attempt).
    pub calls: Vec<crate::events::Call>,
    pub calls_attempt: Option<i32>,
    /// Artifacts stored in the same statement, under the written attempt.
    pub artifacts: Vec<NewArtifact>,
}

/// An artifact written with a node's state.
#[derive(Debug, Clone)]
pub struct NewArtifact {
    pub kind: crate::artifacts::ArtifactKind,
    pub payload: Value,
    pub payload_hash: Option<String>,
}

/// A claim's token and how long it holds (docs/architecture.md §6.1, §6.2). `seconds: None` writes the token
/// only (observe and recover lease through `next_observe_at`).
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub token: Uuid,
    pub seconds: Option<f64>,
}

/// Conditions a write matches beside the node's state; a write that matches nothing fails
/// with `StaleState` and changes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Guard {
    /// `claim_token` is this one.
    pub claim_token: Option<Uuid>,
    /// `attempt_no` is this one.
    pub attempt_no: Option<i32>,
    /// The request is EXECUTING and no pause holds the node (the arm).
    pub dispatchable: bool,
    /// `provider_refs` carries `__submit_attempt_pending` (recording a submit's answer).
    pub submit_pending: bool,
}

impl NodePatch {
    /// The node's error; texts from outside are made storable.
    pub fn error(code: &str, detail: impl Into<String>) -> Self {
        let detail = crate::events::storable_text(&detail.into());
        NodePatch { error: Some((Some(crate::events::storable_text(code)), Some(detail))), ..Default::default() }
    }
}

/// The worker channel woken when a node enters `state`.
pub fn wake_channel(state: NodeState) -> Option<&'static str> {
    match state {
        NodeState::Ready => Some(CHANNEL_DISPATCH),
        NodeState::Submitted | NodeState::Observing => Some(CHANNEL_OBSERVE),
        NodeState::Unknown => Some(CHANNEL_RECOVER),
        _ => None,
    }
}

pub const CHANNEL_DISPATCH: &str = "qtg_dispatch";
pub const CHANNEL_OBSERVE: &str = "qtg_observe";
pub const CHANNEL_RECOVER: &str = "qtg_recover";
pub const CHANNEL_CALLBACK: &str = "qtg_callback";

static NODE_WRITE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| NODE_WRITE_TEMPLATE.replace("{PAUSED}", crate::controls::PAUSED));

const NODE_WRITE_TEMPLATE: &str = r#"
WITH clk AS (SELECT clock_timestamp() AS ts), upd AS (
    UPDATE movement_request_nodes n SET
        node_state = $3,
        attempt_no = attempt_no + CASE WHEN $4 THEN 1 ELSE 0 END,
        -- clock_timestamp(), not now(): recovery's grace and the submit window count from
        -- the moment the attempt was recorded, whenever the transaction began.
        started_at = CASE WHEN $4 THEN clk.ts ELSE started_at END,
        submit_by = CASE WHEN $4 THEN clk.ts + make_interval(secs => $21) ELSE submit_by END,
        claim_token = COALESCE($22::uuid, claim_token),
        lease_expires_at = CASE WHEN $23::float8 IS NOT NULL THEN clk.ts + make_interval(secs => $23)
                                WHEN $4 OR $3 NOT IN ('PREPARING', 'AWAITING_SIGNATURE') THEN NULL
                                ELSE lease_expires_at END,
        completed_at = CASE WHEN $3 = 'COMPLETED' THEN now() ELSE completed_at END,
        -- A new attempt starts clean: nothing of the previous attempt's venue references
        -- may steer observe or recover (the history keeps them).
        provider_state = CASE WHEN $4 THEN $5 ELSE COALESCE($5, provider_state) END,
        provider_ref_id = CASE WHEN $4 THEN $6 ELSE COALESCE($6, provider_ref_id) END,
        provider_refs = CASE WHEN $4 THEN
            jsonb_build_object(
                '__submit_attempt_pending', true,
                '__submit_attempt_started_at',
                to_char(clk.ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
            ELSE (provider_refs || $7::jsonb) - $8::text[] END,
        error_code = CASE WHEN $9 THEN $10 WHEN $4 THEN NULL ELSE error_code END,
        error_detail = CASE WHEN $9 THEN $11 WHEN $4 THEN NULL ELSE error_detail END,
        submit_accepted_at = CASE
            WHEN $12 = 1 THEN COALESCE(submit_accepted_at, now())
            WHEN $12 = -1 OR $4 THEN NULL
            ELSE submit_accepted_at END,
        next_observe_at = CASE WHEN $13 THEN clk.ts + make_interval(secs => $14)
                               WHEN $4 THEN NULL ELSE next_observe_at END,
        last_observed_at = CASE WHEN $15 THEN now() WHEN $4 THEN NULL ELSE last_observed_at END,
        observe_count = CASE WHEN $4 THEN 0 ELSE observe_count END + CASE WHEN $15 THEN 1 ELSE 0 END,
        updated_at = now()
    FROM clk
    WHERE n.id = $1 AND n.node_state = $2
      AND ($24::uuid IS NULL OR n.claim_token = $24)
      AND ($25::int IS NULL OR n.attempt_no = $25)
      AND (NOT $26 OR n.provider_refs ? '__submit_attempt_pending')
      AND (NOT $27 OR (
          EXISTS (SELECT 1 FROM movement_requests r WHERE r.id = n.request_id AND r.request_state = 'EXECUTING' FOR SHARE)
          AND NOT EXISTS (SELECT 1 FROM plan_nodes p WHERE p.id = n.plan_node_id AND {PAUSED})))
    RETURNING n.id, n.request_id, n.node_key, n.node_state, n.attempt_no, n.provider_state, n.error_code,
        n.error_detail, n.submit_by
), req AS (
    UPDATE movement_requests r SET callback_sequence = r.callback_sequence + 1
    FROM upd
    WHERE $16 AND r.id = upd.request_id AND r.callback_url IS NOT NULL
    RETURNING r.id, r.callback_sequence, r.callback_url, r.request_state
), cb AS (
    INSERT INTO movement_callback_outbox
        (id, request_id, event_id, event_type, sequence, payload, callback_url,
         callback_timestamp, callback_nonce, traceparent)
    SELECT gen_random_uuid(), req.id, ev.event_id, 'node_state_changed', req.callback_sequence,
        qtg_callback_envelope(ev.event_id, 'node_state_changed', req.id,
            jsonb_build_object('sequence', req.callback_sequence, 'request_state', req.request_state,
                'node_key', upd.node_key, 'node_state', upd.node_state),
            jsonb_build_object('from', $2::text, 'to', upd.node_state,
                'attempt_no', upd.attempt_no, 'provider_state', upd.provider_state,
                'error_code', upd.error_code)),
        req.callback_url, extract(epoch FROM now())::bigint, gen_random_uuid()::text, $20::text
    FROM req CROSS JOIN upd CROSS JOIN (SELECT gen_random_uuid() AS event_id) ev
), aud AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT gen_random_uuid(), $17, 'node.transition', 'node', upd.id::text, upd.request_id,
        jsonb_build_object('node_key', upd.node_key, 'from', $2::text, 'to', upd.node_state,
            'attempt_no', upd.attempt_no, 'error_code', upd.error_code, 'reason', $18::text)
    FROM upd WHERE $16
), hist AS (
    -- The calls first, then the transition: one INSERT, so ids follow this order.
    INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome,
        from_state, to_state, error_code, error_detail, duration_ms, actor)
    SELECT upd.request_id, upd.id, ev.attempt_no, ev.kind, ev.method, ev.outcome, ev.from_state,
        ev.to_state, ev.error_code, left(ev.error_detail, 2000), ev.duration_ms, $17
    FROM upd CROSS JOIN LATERAL (
        SELECT c.i AS ord, COALESCE($33::int, upd.attempt_no) AS attempt_no, 'call' AS kind, c.m AS method,
            c.o AS outcome, NULL::text AS from_state, NULL::text AS to_state, c.cd AS error_code,
            c.d AS error_detail, c.ms AS duration_ms
        FROM unnest($28::text[], $29::text[], $30::text[], $31::text[], $32::int[]) WITH ORDINALITY
            AS c(m, o, cd, d, ms, i)
        UNION ALL
        SELECT 2147483647, upd.attempt_no, 'transition', NULL, NULL, $2, upd.node_state,
            upd.error_code, upd.error_detail, NULL
        WHERE $16
    ) ev
    ORDER BY ev.ord
), art AS (
    INSERT INTO artifacts (id, request_id, request_node_id, attempt_no, kind, payload, payload_hash)
    SELECT gen_random_uuid(), upd.request_id, upd.id, COALESCE($33::int, upd.attempt_no), a->>'kind', a->'payload', a->>'payload_hash'
    FROM upd CROSS JOIN jsonb_array_elements($34::jsonb) AS a
), ntf AS (
    -- The wake-ups (the node's worker channel, the callback worker). A CTE runs only when the
    -- statement reads it: `notified` below exists so that it does. Removing that "unused"
    -- column silently stops the NOTIFYs (the interval poll would hide it; tests/tests/engine.rs
    -- `transitions_wake_the_workers` LISTENs and fails).
    SELECT pg_notify($19::text, '') FROM upd WHERE $19::text IS NOT NULL
    UNION ALL
    SELECT pg_notify('qtg_callback', '') FROM req
)
SELECT upd.attempt_no, upd.submit_by, (SELECT count(*) FROM ntf) AS notified FROM upd
"#;

/// What a node write left: the attempt, and the armed attempt's `submit_by`.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub attempt_no: i32,
    pub submit_by: Option<chrono::DateTime<chrono::Utc>>,
}

async fn write_node(
    conn: &mut PgConnection,
    node_id: Uuid,
    from: NodeState,
    to: NodeState,
    patch: &NodePatch,
    transition: bool,
    meta: &Meta<'_>,
) -> Result<Written> {
    let (set_error, error_code, error_detail) = match &patch.error {
        Some((c, d)) => (true, c.clone(), d.clone()),
        None => (false, None, None),
    };
    let accepted: i16 = match patch.submit_accepted {
        Some(true) => 1,
        Some(false) => -1,
        None => 0,
    };
    let (set_next, next_secs) = match patch.next_observe_in {
        Some(s) => (true, s),
        None => (false, None),
    };
    let channel = if transition { wake_channel(to) } else { None };
    let row = sqlx::query(sqlx::AssertSqlSafe(NODE_WRITE.as_str()))
        .bind(node_id)
        .bind(from.as_str())
        .bind(to.as_str())
        .bind(patch.begin_attempt)
        .bind(&patch.provider_state)
        .bind(&patch.provider_ref_id)
        .bind(Value::Object(patch.merge_refs.clone()))
        .bind(&patch.remove_refs)
        .bind(set_error)
        .bind(error_code)
        .bind(error_detail)
        .bind(accepted)
        .bind(set_next)
        .bind(next_secs)
        .bind(patch.observed)
        .bind(transition)
        .bind(meta.actor)
        .bind(meta.reason)
        .bind(channel)
        // Only a transition enqueues a callback that could carry it.
        .bind(if transition { qtg_telemetry::traceparent() } else { None })
        .bind(patch.submit_window_seconds)
        .bind(patch.lease.map(|l| l.token))
        .bind(patch.lease.and_then(|l| l.seconds))
        .bind(patch.guard.claim_token)
        .bind(patch.guard.attempt_no)
        .bind(patch.guard.submit_pending)
        .bind(patch.guard.dispatchable)
        .bind(patch.calls.iter().map(|c| c.method).collect::<Vec<_>>())
        .bind(patch.calls.iter().map(|c| c.outcome.as_str()).collect::<Vec<_>>())
        .bind(patch.calls.iter().map(|c| c.error_code.as_deref()).collect::<Vec<_>>())
        .bind(patch.calls.iter().map(|c| c.error_detail.as_deref()).collect::<Vec<_>>())
        .bind(patch.calls.iter().map(|c| c.duration_ms).collect::<Vec<_>>())
        .bind(patch.calls_attempt)
        .bind(Value::Array(
            patch
                .artifacts
                .iter()
                .map(|a| {
                    serde_json::json!({"kind": a.kind.as_str(), "payload": a.payload, "payload_hash": a.payload_hash})
                })
                .collect(),
        ))
        .fetch_optional(&mut *conn)
        .await?;
    match row {
        Some(row) => {
            if transition {
                qtg_telemetry::sink().node_transition(from.as_str(), to.as_str());
            }
            Ok(Written { attempt_no: row.try_get("attempt_no")?, submit_by: row.try_get("submit_by")? })
        }
        None => Err(StoreError::StaleState { entity: "node", id: node_id.to_string(), expected: from.to_string() }),
    }
}

/// Moves a node `from` → `to` (checked against the table) with `patch`. Returns the node's
/// `attempt_no` after the write. Fails with `StaleState` if the node is no longer in `from`.
pub async fn transition_node(
    conn: &mut PgConnection,
    node_id: Uuid,
    from: NodeState,
    to: NodeState,
    patch: &NodePatch,
    meta: &Meta<'_>,
) -> Result<i32> {
    Ok(write_transition(conn, node_id, from, to, patch, meta).await?.attempt_no)
}

/// [`transition_node`], answering what was written (the arm needs its `submit_by`).
pub async fn write_transition(
    conn: &mut PgConnection,
    node_id: Uuid,
    from: NodeState,
    to: NodeState,
    patch: &NodePatch,
    meta: &Meta<'_>,
) -> Result<Written> {
    from.check_transition(to)?;
    write_node(conn, node_id, from, to, patch, true, meta).await
}

/// Updates a node's fields without changing its state (an OBSERVING poll, a recovery that
/// stays UNKNOWN, a backoff). No audit row, no callback.
pub async fn poll_node(conn: &mut PgConnection, node_id: Uuid, state: NodeState, patch: &NodePatch) -> Result<i32> {
    Ok(write_node(conn, node_id, state, state, patch, false, &Meta::actor("-")).await?.attempt_no)
}

/// Field changes written with a request's state.
#[derive(Debug, Clone, Default)]
pub struct RequestPatch {
    pub approval_status: Option<&'static str>,
    /// Records the approver and the intent and plan hashes they approved.
    pub approved_by: Option<String>,
    pub review_reason: Option<String>,
}

const REQUEST_WRITE: &str = r#"
WITH upd AS (
    UPDATE movement_requests SET
        request_state = $3,
        approval_status = COALESCE($4, approval_status),
        approved_by = COALESCE($5, approved_by),
        approved_at = CASE WHEN $5 IS NOT NULL THEN now() ELSE approved_at END,
        approved_intent_hash = CASE WHEN $5 IS NOT NULL THEN intent_hash ELSE approved_intent_hash END,
        approved_plan_hash = CASE WHEN $5 IS NOT NULL THEN compiled_plan_hash ELSE approved_plan_hash END,
        review_reason = COALESCE($6, review_reason),
        completed_at = CASE WHEN $3 IN ('COMPLETED', 'FAILED', 'EXPIRED', 'REJECTED', 'CANCELLED')
                            THEN now() ELSE NULL END,
        callback_sequence = callback_sequence
            + CASE WHEN callback_url IS NULL THEN 0 WHEN $7 THEN 2 ELSE 1 END,
        updated_at = now()
    WHERE id = $1 AND request_state = $2
    RETURNING id, callback_url, callback_sequence, request_state
), events AS (
    SELECT upd.*, e.event_type, upd.callback_sequence - e.back AS seq, gen_random_uuid() AS event_id
    FROM upd CROSS JOIN (VALUES ($8::text, CASE WHEN $7 THEN 1 ELSE 0 END),
                                ('request_attention', 0)) AS e(event_type, back)
    WHERE upd.callback_url IS NOT NULL AND (e.event_type <> 'request_attention' OR $7)
), cb AS (
    INSERT INTO movement_callback_outbox
        (id, request_id, event_id, event_type, sequence, payload, callback_url,
         callback_timestamp, callback_nonce, traceparent)
    SELECT gen_random_uuid(), ev.id, ev.event_id, ev.event_type, ev.seq,
        qtg_callback_envelope(ev.event_id, ev.event_type, ev.id,
            jsonb_build_object('sequence', ev.seq, 'request_state', ev.request_state),
            jsonb_build_object('from', $2::text, 'to', ev.request_state, 'reason', $10::text)),
        ev.callback_url, extract(epoch FROM now())::bigint, gen_random_uuid()::text, $11::text
    FROM events ev
), aud AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT gen_random_uuid(), $9, 'movement.transition', 'movement', upd.id::text, upd.id,
        jsonb_build_object('from', $2::text, 'to', upd.request_state, 'reason', $10::text)
    FROM upd
), ntf AS (
    -- Read by `notified` below, or the NOTIFYs never run (see the node write above).
    SELECT pg_notify('qtg_callback', '') FROM upd WHERE upd.callback_url IS NOT NULL
    UNION ALL
    SELECT pg_notify('qtg_dispatch', '') FROM upd WHERE $3 = 'EXECUTING'
)
SELECT upd.id, (SELECT count(*) FROM ntf) AS notified FROM upd
"#;

/// Moves a request `from` → `to` (checked against the table) with `patch`.
pub async fn transition_request(
    conn: &mut PgConnection,
    request_id: Uuid,
    from: RequestState,
    to: RequestState,
    patch: &RequestPatch,
    meta: &Meta<'_>,
) -> Result<()> {
    from.check_transition(to)?;
    let attention = matches!(to, RequestState::ManualIntervention | RequestState::WaitingManualAction);
    let event_type = if to == RequestState::Expired { "request_expired" } else { "request_state_changed" };
    let row = sqlx::query(REQUEST_WRITE)
        .bind(request_id)
        .bind(from.as_str())
        .bind(to.as_str())
        .bind(patch.approval_status)
        .bind(&patch.approved_by)
        .bind(&patch.review_reason)
        .bind(attention)
        .bind(event_type)
        .bind(meta.actor)
        .bind(meta.reason)
        .bind(qtg_telemetry::traceparent())
        .fetch_optional(&mut *conn)
        .await?;
    match row {
        Some(_) => Ok(()),
        None => {
            Err(StoreError::StaleState { entity: "movement", id: request_id.to_string(), expected: from.to_string() })
        }
    }
}

/// Enqueues one callback event that is not a state change (e.g. `frontier_advanced`), and
/// records the movement's new frontier when one is given — one statement.
pub async fn enqueue_event(
    conn: &mut PgConnection,
    request_id: Uuid,
    event_type: &str,
    data: &Value,
    frontier: Option<&[String]>,
) -> Result<()> {
    sqlx::query(
        r#"
WITH req AS (
    UPDATE movement_requests SET
        callback_sequence = callback_sequence + CASE WHEN callback_url IS NULL THEN 0 ELSE 1 END,
        current_frontier = COALESCE($4, current_frontier),
        updated_at = now()
    WHERE id = $1
    RETURNING id, callback_sequence, callback_url, request_state
), ev AS (SELECT gen_random_uuid() AS event_id), cb AS (
    INSERT INTO movement_callback_outbox
        (id, request_id, event_id, event_type, sequence, payload, callback_url,
         callback_timestamp, callback_nonce, traceparent)
    SELECT gen_random_uuid(), req.id, ev.event_id, $2, req.callback_sequence,
        qtg_callback_envelope(ev.event_id, $2::text, req.id,
            jsonb_build_object('sequence', req.callback_sequence, 'request_state', req.request_state),
            $3::jsonb),
        req.callback_url, extract(epoch FROM now())::bigint, gen_random_uuid()::text, $5::text
    FROM req CROSS JOIN ev WHERE req.callback_url IS NOT NULL
)
SELECT count(*) FROM (SELECT pg_notify('qtg_callback', '') FROM req WHERE req.callback_url IS NOT NULL) n
"#,
    )
    .bind(request_id)
    .bind(event_type)
    .bind(data)
    .bind(frontier.map(|f| serde_json::json!(f)))
    .bind(qtg_telemetry::traceparent())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records the keys the movement is now waiting on.
pub async fn set_frontier(conn: &mut PgConnection, request_id: Uuid, keys: &[String]) -> Result<()> {
    sqlx::query("UPDATE movement_requests SET current_frontier = $2, updated_at = now() WHERE id = $1")
        .bind(request_id)
        .bind(serde_json::json!(keys))
        .execute(&mut *conn)
        .await?;
    Ok(())
}
