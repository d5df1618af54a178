//! The one door for state (docs/architecture.md §4.2): every node or request state change checks the
//! transition table in `qtg_core`, writes the row with `updated_at`, appends `audit_outbox`,
//! records a `node_events` row (nodes), enqueues the callback (when the movement has a
//! callback URL) and notifies the workers that now have work — in one statement, inside the
//! caller's transaction. Polls (same-state updates) take the same path without the audit.

use qtg_core::{NodeState, RequestState};
use serde_json::{Map, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use std::time::Duration;

use crate::params::Params;
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
    pub error: ErrorField,
    pub submit_accepted: SubmitAccepted,
    pub next_observe: Schedule,
    /// An observation happened: `last_observed_at`, `observe_count + 1`.
    pub observed: bool,
    /// With `begin_attempt` (the arm): `submit_by = started_at + submit_window`.
    pub submit_window: Duration,
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
    /// No wake-up on the node's worker channel: the writer holds the node back in this same
    /// transaction (a dispatcher whose claim of the successor it handed on failed); if it
    /// cannot, it calls [`wake`] before it commits.
    pub quiet: bool,
    /// A movement event written in the same statement, after the (first hop of the)
    /// transition: a completion's `frontier_advanced` with the activation of its successors.
    pub movement_event: Option<MovementEvent>,
}

/// A movement event that is not a state change (its callback when the movement has a callback
/// URL), with the frontier it records when there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct MovementEvent {
    pub event_type: &'static str,
    pub data: Value,
    pub frontier: Option<Vec<String>>,
    /// The trace of the step that produced the event (`qtg_telemetry::traceparent()` where it
    /// was made): its callback's, and that of the first hop of a write moving through a state.
    pub traceparent: Option<String>,
}

/// `error_code` / `error_detail`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ErrorField {
    /// Unchanged (cleared by `begin_attempt`).
    #[default]
    Keep,
    /// Both columns written, NULL included.
    Set { code: Option<String>, detail: Option<String> },
}

impl ErrorField {
    pub const CLEAR: ErrorField = ErrorField::Set { code: None, detail: None };
}

/// `submit_accepted_at`: whether the venue may hold a side effect of the attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SubmitAccepted {
    /// Unchanged (cleared by `begin_attempt`).
    #[default]
    Keep,
    /// The venue may hold a side effect (kept at its first time).
    Mark,
    /// Proven without effect (an operator's retry, a recovery's proof of absence).
    Clear,
}

impl SubmitAccepted {
    fn as_sql(self) -> &'static str {
        match self {
            SubmitAccepted::Keep => "keep",
            SubmitAccepted::Mark => "mark",
            SubmitAccepted::Clear => "clear",
        }
    }
}

/// `next_observe_at`: when observe or recover takes the node next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Schedule {
    /// Unchanged (cleared by `begin_attempt`).
    #[default]
    Keep,
    /// Due this long after the write.
    In(Duration),
    /// Not scheduled.
    Clear,
}

/// An artifact written with a node's state.
#[derive(Debug, Clone)]
pub struct NewArtifact {
    pub kind: crate::artifacts::ArtifactKind,
    pub payload: Value,
    pub payload_hash: Option<String>,
}

/// A claim's token and how long it holds (docs/architecture.md §6.1, §6.2). `expires_in:
/// None` writes the token only (observe and recover lease through `next_observe_at`).
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub token: Uuid,
    pub expires_in: Option<Duration>,
}

/// Conditions a write matches beside the node's state; a write that matches nothing is
/// [`Cas::Stale`] and changes nothing.
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
        let code = crate::events::storable_text(code);
        NodePatch { error: ErrorField::Set { code: Some(code), detail: Some(detail) }, ..Default::default() }
    }
}

/// What a compare-and-set write did: it matched and wrote, or the row had moved on and
/// nothing was written. A miss is an answer the caller must decide on (the type is
/// `must_use`), not an error that travels up until someone picks it out.
#[must_use = "a write that matched nothing changed nothing: decide what that means here"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cas<T> {
    Applied(T),
    Stale(Stale),
}

/// The row a compare-and-set missed, and the state the write expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub entity: &'static str,
    pub id: Uuid,
    pub expected: String,
}

impl<T> Cas<T> {
    pub fn applied(self) -> Option<T> {
        match self {
            Cas::Applied(t) => Some(t),
            Cas::Stale(_) => None,
        }
    }

    pub fn is_stale(&self) -> bool {
        matches!(self, Cas::Stale(_))
    }

    /// Where a miss leaves nothing sensible to do but stop (the caller's transaction rolls
    /// back; the API answers 409): the miss as [`StoreError::StaleState`].
    pub fn or_stale(self) -> Result<T> {
        match self {
            Cas::Applied(t) => Ok(t),
            Cas::Stale(Stale { entity, id, expected }) => {
                Err(StoreError::StaleState { entity, id: id.to_string(), expected })
            }
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Cas<U> {
        match self {
            Cas::Applied(t) => Cas::Applied(f(t)),
            Cas::Stale(s) => Cas::Stale(s),
        }
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

/// The node write after the `arg` CTE of [`Params`] (every `arg.<name>` is declared in
/// [`write_node`]).
const NODE_WRITE: &str = r#"clk AS (SELECT clock_timestamp() AS ts), upd AS (
    UPDATE movement_request_nodes n SET
        node_state = arg.to_state,
        attempt_no = n.attempt_no + CASE WHEN arg.begin_attempt THEN 1 ELSE 0 END,
        -- clock_timestamp(), not now(): recovery's grace and the submit window count from
        -- the moment the attempt was recorded, whenever the transaction began.
        started_at = CASE WHEN arg.begin_attempt THEN clk.ts ELSE n.started_at END,
        submit_by = CASE WHEN arg.begin_attempt THEN clk.ts + make_interval(secs => arg.submit_window_secs)
                         ELSE n.submit_by END,
        claim_token = COALESCE(arg.lease_token, n.claim_token),
        lease_expires_at = CASE
            WHEN arg.lease_secs IS NOT NULL THEN clk.ts + make_interval(secs => arg.lease_secs)
            WHEN arg.begin_attempt OR arg.to_state NOT IN ('PREPARING', 'AWAITING_SIGNATURE') THEN NULL
            ELSE n.lease_expires_at END,
        completed_at = CASE WHEN arg.to_state = 'COMPLETED' THEN now() ELSE n.completed_at END,
        -- A new attempt starts clean: nothing of the previous attempt's venue references
        -- may steer observe or recover (the history keeps them).
        provider_state = CASE WHEN arg.begin_attempt THEN arg.provider_state
                              ELSE COALESCE(arg.provider_state, n.provider_state) END,
        provider_ref_id = CASE WHEN arg.begin_attempt THEN arg.provider_ref_id
                               ELSE COALESCE(arg.provider_ref_id, n.provider_ref_id) END,
        provider_refs = CASE WHEN arg.begin_attempt THEN
            jsonb_build_object(
                '__submit_attempt_pending', true,
                '__submit_attempt_started_at',
                to_char(clk.ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
            ELSE (n.provider_refs || arg.merge_refs) - arg.remove_refs END,
        error_code = CASE WHEN arg.set_error THEN arg.error_code
                          WHEN arg.begin_attempt THEN NULL ELSE n.error_code END,
        error_detail = CASE WHEN arg.set_error THEN arg.error_detail
                            WHEN arg.begin_attempt THEN NULL ELSE n.error_detail END,
        submit_accepted_at = CASE
            WHEN arg.accepted = 'mark' THEN COALESCE(n.submit_accepted_at, now())
            WHEN arg.accepted = 'clear' OR arg.begin_attempt THEN NULL
            ELSE n.submit_accepted_at END,
        next_observe_at = CASE WHEN arg.schedule = 'in' THEN clk.ts + make_interval(secs => arg.observe_in_secs)
                               WHEN arg.schedule = 'clear' OR arg.begin_attempt THEN NULL
                               ELSE n.next_observe_at END,
        last_observed_at = CASE WHEN arg.observed THEN now()
                                WHEN arg.begin_attempt THEN NULL ELSE n.last_observed_at END,
        observe_count = CASE WHEN arg.begin_attempt THEN 0 ELSE n.observe_count END
            + CASE WHEN arg.observed THEN 1 ELSE 0 END,
        updated_at = now()
    FROM clk, arg
    WHERE n.id = {$node_id} AND n.node_state = arg.from_state
      AND (arg.guard_token IS NULL OR n.claim_token = arg.guard_token)
      AND (arg.guard_attempt IS NULL OR n.attempt_no = arg.guard_attempt)
      AND (NOT arg.guard_submit_pending OR n.provider_refs ? '__submit_attempt_pending')
      AND {DISPATCHABLE}
    RETURNING n.id, n.request_id, n.node_key, n.node_state, n.attempt_no, n.provider_state, n.error_code,
        n.error_detail, n.submit_by
)
SELECT upd.attempt_no, upd.submit_by,
    -- The callback, the audit row, the events, the artifacts and the wake-ups, for the row
    -- written (migration 0036), and a begun attempt's prepared hash as stored.
    qtg_node_written(upd.id, upd.request_id, upd.node_key, arg.from_state, upd.node_state, upd.attempt_no,
        upd.provider_state, upd.error_code, upd.error_detail, arg.transition, arg.begin_attempt, arg.actor,
        arg.reason, arg.call_methods, arg.call_outcomes, arg.call_codes, arg.call_details, arg.call_ms,
        arg.calls_attempt, arg.artifacts, arg.channel, arg.traceparent, arg.via_state, arg.event_type,
        arg.event_data, arg.frontier, arg.event_traceparent) AS prepared_hash
FROM upd, arg
"#;

/// The arm's guard ([`Guard::dispatchable`]): the request is EXECUTING (held by `FOR SHARE`
/// until the arm commits) and no pause holds the node.
const DISPATCHABLE: &str = "arg.guard_dispatchable
          AND EXISTS (SELECT 1 FROM movement_requests r
                      WHERE r.id = n.request_id AND r.request_state = 'EXECUTING' FOR SHARE)
          AND NOT EXISTS (SELECT 1 FROM plan_nodes p WHERE p.id = n.plan_node_id AND {PAUSED})";

/// The node write with the arm's guard, and without it: a statement sets up every subquery it
/// holds on every call, run or not, so a write that is not an arm does not carry the guard's.
static NODE_WRITE_ARM: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    NODE_WRITE.replace("{DISPATCHABLE}", &DISPATCHABLE.replace("{PAUSED}", crate::controls::PAUSED))
});
static NODE_WRITE_PLAIN: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| NODE_WRITE.replace("{DISPATCHABLE}", "NOT arg.guard_dispatchable"));

/// What a node write left: the attempt, and the armed attempt's `submit_by` and the hash of
/// its prepared action as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Written {
    pub attempt_no: i32,
    pub submit_by: Option<chrono::DateTime<chrono::Utc>>,
    pub prepared_hash: Option<String>,
}

/// The states a node write moves through: `from` → (`via` →) `to`.
#[derive(Debug, Clone, Copy)]
struct Hops {
    from: NodeState,
    via: Option<NodeState>,
    to: NodeState,
}

async fn write_node(
    conn: &mut PgConnection,
    node_id: Uuid,
    hops: Hops,
    patch: &NodePatch,
    transition: bool,
    meta: &Meta<'_>,
) -> Result<Cas<Written>> {
    let Hops { from, via, to } = hops;
    let event = patch.movement_event.as_ref();
    let (set_error, error_code, error_detail) = match &patch.error {
        ErrorField::Set { code, detail } => (true, code.clone(), detail.clone()),
        ErrorField::Keep => (false, None, None),
    };
    let (schedule, observe_in) = match patch.next_observe {
        Schedule::Keep => ("keep", None),
        Schedule::In(d) => ("in", Some(d.as_secs_f64())),
        Schedule::Clear => ("clear", None),
    };
    let calls = &patch.calls;
    let artifacts: Vec<Value> = patch
        .artifacts
        .iter()
        .map(|a| serde_json::json!({"kind": a.kind.as_str(), "payload": a.payload, "payload_hash": a.payload_hash}))
        .collect();
    let params = Params::default()
        .with("node_id", "uuid", node_id)
        .with("from_state", "text", from.as_str())
        .with("to_state", "text", to.as_str())
        .with("transition", "bool", transition)
        .with("begin_attempt", "bool", patch.begin_attempt)
        .with("submit_window_secs", "float8", patch.submit_window.as_secs_f64())
        .with("provider_state", "text", patch.provider_state.clone())
        .with("provider_ref_id", "text", patch.provider_ref_id.clone())
        .with("merge_refs", "jsonb", Value::Object(patch.merge_refs.clone()))
        .with("remove_refs", "text[]", patch.remove_refs.clone())
        .with("set_error", "bool", set_error)
        .with("error_code", "text", error_code)
        .with("error_detail", "text", error_detail)
        .with("accepted", "text", patch.submit_accepted.as_sql())
        .with("schedule", "text", schedule)
        .with("observe_in_secs", "float8", observe_in)
        .with("observed", "bool", patch.observed)
        .with("lease_token", "uuid", patch.lease.map(|l| l.token))
        .with("lease_secs", "float8", patch.lease.and_then(|l| l.expires_in).map(|d| d.as_secs_f64()))
        .with("guard_token", "uuid", patch.guard.claim_token)
        .with("guard_attempt", "int4", patch.guard.attempt_no)
        .with("guard_submit_pending", "bool", patch.guard.submit_pending)
        .with("guard_dispatchable", "bool", patch.guard.dispatchable)
        .with("call_methods", "text[]", calls.iter().map(|c| c.method).collect::<Vec<_>>())
        .with("call_outcomes", "text[]", calls.iter().map(|c| c.outcome.clone()).collect::<Vec<_>>())
        .with("call_codes", "text[]", calls.iter().map(|c| c.error_code.clone()).collect::<Vec<_>>())
        .with("call_details", "text[]", calls.iter().map(|c| c.error_detail.clone()).collect::<Vec<_>>())
        .with("call_ms", "int4[]", calls.iter().map(|c| c.duration_ms).collect::<Vec<_>>())
        .with("calls_attempt", "int4", patch.calls_attempt)
        .with("artifacts", "jsonb", Value::Array(artifacts))
        .with("actor", "text", meta.actor.to_string())
        .with("reason", "text", meta.reason.map(str::to_string))
        .with("channel", "text", if transition && !patch.quiet { wake_channel(to) } else { None })
        // Only a transition enqueues a callback that could carry it.
        .with("traceparent", "text", if transition { qtg_telemetry::traceparent() } else { None })
        .with("via_state", "text", via.map(NodeState::as_str))
        .with("event_type", "text", event.map(|e| e.event_type))
        .with("event_data", "jsonb", event.map(|e| e.data.clone()))
        .with("frontier", "jsonb", event.and_then(|e| e.frontier.as_ref()).map(|f| serde_json::json!(f)))
        .with("event_traceparent", "text", event.and_then(|e| e.traceparent.clone()));
    static ARM: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static PLAIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = if patch.guard.dispatchable {
        params.statement_once(&ARM, &NODE_WRITE_ARM)
    } else {
        params.statement_once(&PLAIN, &NODE_WRITE_PLAIN)
    };
    let written: Option<Written> =
        sqlx::query_as_with(sql, params.into_arguments()?).fetch_optional(&mut *conn).await?;
    let Some(written) = written else {
        return Ok(Cas::Stale(Stale { entity: "node", id: node_id, expected: from.to_string() }));
    };
    if transition {
        match via {
            Some(via) => {
                qtg_telemetry::sink().node_transition(from.as_str(), via.as_str());
                qtg_telemetry::sink().node_transition(via.as_str(), to.as_str());
            }
            None => qtg_telemetry::sink().node_transition(from.as_str(), to.as_str()),
        }
    }
    Ok(Cas::Applied(written))
}

/// Moves a node `from` → `to` (checked against the table) with `patch`. Answers the node's
/// `attempt_no` after the write, or [`Cas::Stale`] if the node is no longer in `from` (or
/// the guard no longer holds).
pub async fn transition_node(
    conn: &mut PgConnection,
    node_id: Uuid,
    from: NodeState,
    to: NodeState,
    patch: &NodePatch,
    meta: &Meta<'_>,
) -> Result<Cas<i32>> {
    Ok(write_transition(conn, node_id, from, to, patch, meta).await?.map(|w| w.attempt_no))
}

/// [`transition_node`], answering what was written (the arm needs its `submit_by`).
pub async fn write_transition(
    conn: &mut PgConnection,
    node_id: Uuid,
    from: NodeState,
    to: NodeState,
    patch: &NodePatch,
    meta: &Meta<'_>,
) -> Result<Cas<Written>> {
    from.check_transition(to)?;
    write_node(conn, node_id, Hops { from, via: None, to }, patch, true, meta).await
}

/// Moves a node `from` → `via` → `to` in one write that records both transitions (each checked
/// against the table, each with its audit row, event and callback, in that order): a
/// dispatcher activating the successor it claims at once (BLOCKED → READY → PREPARING).
/// [`Cas::Stale`] if the node is no longer in `from` (or the guard no longer holds).
pub async fn transition_node_via(
    conn: &mut PgConnection,
    node_id: Uuid,
    (from, via, to): (NodeState, NodeState, NodeState),
    patch: &NodePatch,
    meta: &Meta<'_>,
) -> Result<Cas<i32>> {
    from.check_transition(via)?;
    via.check_transition(to)?;
    let hops = Hops { from, via: Some(via), to };
    Ok(write_node(conn, node_id, hops, patch, true, meta).await?.map(|w| w.attempt_no))
}

/// Updates a node's fields without changing its state (an OBSERVING poll, a recovery that
/// stays UNKNOWN, a backoff). No audit row, no callback.
pub async fn poll_node(
    conn: &mut PgConnection,
    node_id: Uuid,
    state: NodeState,
    patch: &NodePatch,
) -> Result<Cas<i32>> {
    let hops = Hops { from: state, via: None, to: state };
    Ok(write_node(conn, node_id, hops, patch, false, &Meta::actor("-")).await?.map(|w| w.attempt_no))
}

/// Field changes written with a request's state.
#[derive(Debug, Clone, Default)]
pub struct RequestPatch {
    pub approval_status: Option<&'static str>,
    /// Records the approver and the intent and plan hashes they approved.
    pub approved_by: Option<String>,
    pub review_reason: Option<String>,
}

/// The request write after the `arg` CTE (declared in [`transition_request`]).
const REQUEST_WRITE: &str = r#"upd AS (
    UPDATE movement_requests r SET
        request_state = arg.to_state,
        approval_status = COALESCE(arg.approval_status, r.approval_status),
        approved_by = COALESCE(arg.approved_by, r.approved_by),
        approved_at = CASE WHEN arg.approved_by IS NOT NULL THEN now() ELSE r.approved_at END,
        approved_intent_hash = CASE WHEN arg.approved_by IS NOT NULL THEN r.intent_hash
                                    ELSE r.approved_intent_hash END,
        approved_plan_hash = CASE WHEN arg.approved_by IS NOT NULL THEN r.compiled_plan_hash
                                  ELSE r.approved_plan_hash END,
        review_reason = COALESCE(arg.review_reason, r.review_reason),
        completed_at = CASE WHEN arg.to_state IN ('COMPLETED', 'FAILED', 'EXPIRED', 'REJECTED', 'CANCELLED')
                            THEN now() ELSE NULL END,
        callback_sequence = r.callback_sequence
            + CASE WHEN r.callback_url IS NULL THEN 0 WHEN arg.attention THEN 2 ELSE 1 END,
        updated_at = now()
    FROM arg
    WHERE r.id = {$request_id} AND r.request_state = arg.from_state
    RETURNING r.id, r.callback_url, r.callback_sequence, r.request_state
), events AS (
    SELECT upd.*, e.event_type, upd.callback_sequence - e.back AS seq, qtg_uuid7() AS event_id
    FROM upd CROSS JOIN arg
    CROSS JOIN LATERAL (VALUES (arg.event_type, CASE WHEN arg.attention THEN 1 ELSE 0 END),
                               ('request_attention', 0)) AS e(event_type, back)
    WHERE upd.callback_url IS NOT NULL AND (e.event_type <> 'request_attention' OR arg.attention)
), cb AS (
    INSERT INTO movement_callback_outbox
        (id, request_id, event_id, event_type, sequence, payload, callback_url,
         callback_timestamp, callback_nonce, traceparent)
    SELECT qtg_uuid7(), ev.id, ev.event_id, ev.event_type, ev.seq,
        qtg_callback_envelope(ev.event_id, ev.event_type, ev.id,
            jsonb_build_object('sequence', ev.seq, 'request_state', ev.request_state),
            jsonb_build_object('from', arg.from_state, 'to', ev.request_state, 'reason', arg.reason)),
        ev.callback_url, extract(epoch FROM now())::bigint, gen_random_uuid()::text, arg.traceparent
    FROM events ev CROSS JOIN arg
), aud AS (
    INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
    SELECT qtg_uuid7(), arg.actor, 'movement.transition', 'movement', upd.id::text, upd.id,
        jsonb_build_object('from', arg.from_state, 'to', upd.request_state, 'reason', arg.reason)
    FROM upd CROSS JOIN arg
), ntf AS (
    -- The wake-ups. A CTE runs only when the statement reads it: `notified` below exists so
    -- that it does. Removing that "unused" column silently stops the NOTIFYs (the interval poll
    -- would hide it; tests/tests/engine.rs `transitions_wake_the_workers` LISTENs and fails).
    SELECT pg_notify('qtg_callback', '') FROM upd WHERE upd.callback_url IS NOT NULL
    UNION ALL
    SELECT pg_notify('qtg_dispatch', '') FROM upd, arg WHERE arg.to_state = 'EXECUTING'
)
SELECT upd.id, (SELECT count(*) FROM ntf) AS notified FROM upd
"#;

/// Moves a request `from` → `to` (checked against the table) with `patch`; [`Cas::Stale`]
/// if the request is no longer in `from`.
pub async fn transition_request(
    conn: &mut PgConnection,
    request_id: Uuid,
    from: RequestState,
    to: RequestState,
    patch: &RequestPatch,
    meta: &Meta<'_>,
) -> Result<Cas<()>> {
    from.check_transition(to)?;
    let attention = matches!(to, RequestState::ManualIntervention | RequestState::WaitingManualAction);
    let event_type = if to == RequestState::Expired { "request_expired" } else { "request_state_changed" };
    let params = Params::default()
        .with("request_id", "uuid", request_id)
        .with("from_state", "text", from.as_str())
        .with("to_state", "text", to.as_str())
        .with("approval_status", "text", patch.approval_status)
        .with("approved_by", "text", patch.approved_by.clone())
        .with("review_reason", "text", patch.review_reason.clone())
        .with("attention", "bool", attention)
        .with("event_type", "text", event_type)
        .with("actor", "text", meta.actor.to_string())
        .with("reason", "text", meta.reason.map(str::to_string))
        .with("traceparent", "text", qtg_telemetry::traceparent());
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = params.statement_once(&SQL, REQUEST_WRITE);
    let row = sqlx::query_with(sql, params.into_arguments()?).fetch_optional(&mut *conn).await?;
    Ok(match row {
        Some(_) => Cas::Applied(()),
        None => Cas::Stale(Stale { entity: "movement", id: request_id, expected: from.to_string() }),
    })
}

/// Wakes the workers of `channel` when this transaction commits (e.g. a node written
/// [`NodePatch::quiet`] that its writer did not claim after all, a pause lifted, a callback
/// enqueued outside the one door).
pub async fn wake(conn: &mut PgConnection, channel: &str) -> Result<()> {
    sqlx::query!("SELECT pg_notify($1, '')", channel).execute(&mut *conn).await?;
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
