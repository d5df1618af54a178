//! What follows a node's result: record it (the one door), activate successors when it
//! completed (fan-in waits for every predecessor), and re-derive the request's state.

use std::collections::HashMap;

use qtg_core::markers::SUBMIT_ATTEMPT_PENDING;
use qtg_core::observe::next_observe_delay;
use qtg_core::plan::{activated_successors, successors};
use qtg_core::protocol::Method;
use qtg_core::{derive_request_state, ExecutionResult, NodeKind, NodeState, RequestState};
use qtg_store::artifacts::ArtifactKind;
use qtg_store::transition::{
    self, Cas, ErrorField, Guard, Meta, MovementEvent, NewArtifact, NodePatch, RequestPatch, Schedule, SubmitAccepted,
};
use qtg_store::{context as q, NodeBrief, PgConnection, WorkItem};
use serde_json::json;
use uuid::Uuid;

use crate::Result;

/// Seconds before recovery looks at a node that became (or stayed) UNKNOWN without a hint.
pub const UNKNOWN_RECHECK_SECONDS: f64 = 15.0;

/// An executor's well-formed answer as a worker records it: the result, the method that gave
/// it, the compare-and-set it is recorded under, and the call events to write with it.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub result: &'a ExecutionResult,
    pub method: Method,
    pub guard: Guard,
    pub calls: &'a [qtg_store::events::Call],
    /// The caller claims a successor this answer activates, in the same transaction: one is
    /// left to it and answered in [`Recorded::handed_off`] (see [`advance_after_completion`]).
    pub hand_off: bool,
}

/// What recording an answer did: the node's new state, and the successor activated for the
/// caller to claim (with [`Answer::hand_off`]): still BLOCKED, the caller claims it in this
/// transaction or [`activate`]s it before it commits.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub state: NodeState,
    pub handed_off: Option<HandOff>,
}

/// Records `answer` for `item` (currently `from`) by compare-and-set on its guard (a miss
/// writes nothing and is answered as [`Cas::Stale`]), then locks the request (waiting: node
/// before request) and advances or derives.
pub async fn apply_result(
    conn: &mut PgConnection,
    item: &WorkItem,
    from: NodeState,
    answer: &Answer<'_>,
    actor: &str,
) -> Result<Cas<Recorded>> {
    let Answer { result, method, guard, calls, hand_off } = *answer;
    let to = result.next_state;
    let mut patch = NodePatch {
        provider_state: result.provider_state.clone(),
        provider_ref_id: result.provider_ref_id.clone(),
        merge_refs: result.provider_refs.clone(),
        error: ErrorField::Set { code: result.error_code.clone(), detail: result.error_detail.clone() },
        observed: method == Method::Observe,
        guard,
        calls: calls.to_vec(),
        calls_attempt: Some(item.attempt_no),
        ..Default::default()
    };
    if matches!(method, Method::Submit | Method::Recover) {
        if to != NodeState::Unknown {
            // Evidence decided the attempt: the marker goes.
            patch.remove_refs.push(SUBMIT_ATTEMPT_PENDING.to_string());
        }
        if matches!(to, NodeState::Submitted | NodeState::Observing | NodeState::Completed | NodeState::Unknown) {
            patch.submit_accepted = SubmitAccepted::Mark;
        }
        // A Recover FAILED is the contract's proof of absence (the key is void): the attempt
        // that was UNKNOWN had no effect, so the node fails like one that sent nothing.
        if method == Method::Recover && to == NodeState::Failed {
            patch.submit_accepted = SubmitAccepted::Clear;
        }
    }
    patch.next_observe = match to {
        NodeState::Submitted | NodeState::Observing => {
            Schedule::In(secs(next_observe_delay(&item.action_type, result.retry_after_seconds)))
        }
        // When recovery asks (again): the executor's hint, else a pause, so an answer that
        // keeps coming back UNKNOWN never spins.
        NodeState::Unknown => Schedule::In(secs(
            result
                .retry_after_seconds
                .unwrap_or(UNKNOWN_RECHECK_SECONDS)
                .clamp(0.0, qtg_core::observe::MAX_BACKOFF_SECONDS),
        )),
        _ => Schedule::Keep,
    };
    if to == NodeState::Submitted && result.retry_after_seconds.is_none() {
        // First observation as soon as an observer is free.
        patch.next_observe = Schedule::In(std::time::Duration::ZERO);
    }
    // Generated artifacts and, for a decision from observe/recover, the proof are written in
    // the same statement as the node.
    patch.artifacts = result
        .generated_artifacts
        .iter()
        .map(|a| NewArtifact { kind: ArtifactKind::Generated, payload: a.clone(), payload_hash: None })
        .collect();
    if from != to && matches!(method, Method::Observe | Method::Recover) {
        let proof = serde_json::to_value(result).unwrap_or_else(|_| json!({}));
        patch.artifacts.push(NewArtifact { kind: ArtifactKind::Proof, payload: proof, payload_hash: None });
    }
    let written = if from == to {
        transition::poll_node(conn, item.node_id, from, &patch).await?
    } else {
        transition::transition_node(conn, item.node_id, from, to, &patch, &Meta::actor(actor)).await?
    };
    if let Cas::Stale(stale) = written {
        return Ok(Cas::Stale(stale));
    }
    let handed_off = match to {
        NodeState::Completed => {
            let after = Completion { request_id: item.request_id, plan_version_id: item.plan_version_id, hand_off };
            advance_after_completion(conn, &after, &item.node_key, actor).await?
        }
        NodeState::Observing if from == NodeState::Observing => None,
        _ => {
            apply_request_state(conn, item.request_id, actor).await?;
            None
        }
    };
    Ok(Cas::Applied(Recorded { state: to, handed_off }))
}

/// Seconds as a `Duration` (negative or non-finite is zero).
fn secs(s: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(s.max(0.0)).unwrap_or_default()
}

/// The movement a node of which completed, and whether the caller claims a successor.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub request_id: Uuid,
    pub plan_version_id: Uuid,
    /// See [`Answer::hand_off`].
    pub hand_off: bool,
}

/// A successor a completion activated and left to its caller to claim: still BLOCKED in the
/// caller's transaction, with the movement event its activation carries. The caller writes it
/// BLOCKED → READY → PREPARING with its claim ([`qtg_store::transition::transition_node_via`]),
/// or READY with [`activate`] — before it commits, either way.
#[must_use = "a successor handed on is still BLOCKED: claim it or activate it before the commit"]
#[derive(Debug, Clone, PartialEq)]
pub struct HandOff {
    pub node_id: Uuid,
    pub frontier: MovementEvent,
}

/// After `completed_key` reached COMPLETED: successors whose predecessors are all done become
/// READY, the frontier moves (`frontier_advanced`, after the activations), and the request
/// state is re-derived. With `hand_off`, the last successor activated — when it is not a manual
/// node and the derivation moves nothing — is not written here but answered, with the frontier
/// (see [`HandOff`]): its claim writes it last, so every callback keeps the order it had when
/// each write was its own. The others wake the dispatchers and are offered as this process's
/// hints.
pub async fn advance_after_completion(
    conn: &mut PgConnection,
    at: &Completion,
    completed_key: &str,
    actor: &str,
) -> Result<Option<HandOff>> {
    let request_id = at.request_id;
    let (state, mut nodes) = q::request_snapshot_for_update(conn, request_id).await?;
    let edges = crate::plans::edges(conn, at.plan_version_id).await?;
    let activated: Vec<String> = if successors(&edges, completed_key).is_empty() {
        Vec::new()
    } else {
        let states: HashMap<&str, NodeState> = nodes.iter().map(|n| (n.node_key.as_str(), n.node_state)).collect();
        activated_successors(&edges, completed_key, &states).into_iter().map(String::from).collect()
    };
    for node in nodes.iter_mut().filter(|n| activated.contains(&n.node_key)) {
        // READY for the derivation: so it is when this transaction commits.
        node.node_state = NodeState::Ready;
    }
    let derived = derived_move(state, &nodes);
    let mut handed_off = None;
    if !activated.is_empty() {
        // The one handed on: the last activated, if a dispatcher may claim it at all, and only
        // when nothing is derived after it (the movement's callbacks stay in order).
        let handed = nodes
            .iter()
            .rfind(|n| activated.contains(&n.node_key))
            .filter(|n| at.hand_off && n.node_kind != NodeKind::Manual && derived.is_none())
            .map(|n| n.id);
        let frontier = MovementEvent {
            event_type: "frontier_advanced",
            data: json!({"completed": completed_key, "frontier": activated}),
            frontier: Some(activated.clone()),
            // The completing step's trace, wherever the event is written.
            traceparent: qtg_telemetry::traceparent(),
        };
        let written: Vec<Uuid> =
            nodes.iter().filter(|n| activated.contains(&n.node_key) && Some(n.id) != handed).map(|n| n.id).collect();
        for (i, &node) in written.iter().enumerate() {
            // The last write carries the frontier, unless the node handed on does.
            let last = i + 1 == written.len() && handed.is_none();
            let patch = NodePatch { movement_event: last.then(|| frontier.clone()), ..Default::default() };
            write_ready(conn, node, &patch, actor).await?;
        }
        crate::hints::offer(written);
        handed_off = handed.map(|node_id| HandOff { node_id, frontier });
    }
    apply_derived(conn, request_id, state, derived, actor).await?;
    Ok(handed_off)
}

/// Writes a successor answered as [`HandOff`] READY, with its frontier event, when its caller
/// does not claim it after all — `quiet` when the caller holds it back (no wake-up).
pub async fn activate(conn: &mut PgConnection, handed: &HandOff, quiet: bool, actor: &str) -> Result<()> {
    let patch = NodePatch { quiet, movement_event: Some(handed.frontier.clone()), ..Default::default() };
    write_ready(conn, handed.node_id, &patch, actor).await
}

/// BLOCKED → READY, under the request lock its caller holds.
async fn write_ready(conn: &mut PgConnection, node: Uuid, patch: &NodePatch, actor: &str) -> Result<()> {
    transition::transition_node(conn, node, NodeState::Blocked, NodeState::Ready, patch, &Meta::actor(actor))
        .await?
        // The request is locked: no other writer activates its nodes.
        .or_stale()?;
    Ok(())
}

/// Derives the request's state from its nodes and moves it there if that is a change the
/// table allows (the request row must be locked by the caller).
pub async fn apply_request_state(conn: &mut PgConnection, request_id: Uuid, actor: &str) -> Result<()> {
    let (state, nodes) = q::request_snapshot_for_update(conn, request_id).await?;
    derive_and_apply(conn, request_id, state, &nodes, actor).await
}

async fn derive_and_apply(
    conn: &mut PgConnection,
    request_id: Uuid,
    current: RequestState,
    nodes: &[NodeBrief],
    actor: &str,
) -> Result<()> {
    apply_derived(conn, request_id, current, derived_move(current, nodes), actor).await
}

/// Moves the movement from `current` to `derived` ([`derived_move`]), if anywhere.
async fn apply_derived(
    conn: &mut PgConnection,
    request_id: Uuid,
    current: RequestState,
    derived: Option<RequestState>,
    actor: &str,
) -> Result<()> {
    if let Some(derived) = derived {
        transition::transition_request(
            conn,
            request_id,
            current,
            derived,
            &RequestPatch::default(),
            &Meta::actor(actor),
        )
        .await?
        // Read under the row's lock: a miss would be a lost lock, not a race to settle.
        .or_stale()?;
    }
    Ok(())
}

/// The state the movement moves to from `current`, derived from its nodes: `None` when the
/// derivation leaves it where it is or the table does not allow the change.
fn derived_move(current: RequestState, nodes: &[NodeBrief]) -> Option<RequestState> {
    let views: Vec<_> = nodes.iter().map(NodeBrief::view).collect();
    let derived = derive_request_state(&views)?;
    // APPROVED becomes EXECUTING on the first dispatch, not by derivation.
    let first_dispatch_pending = current == RequestState::Approved && derived == RequestState::Executing;
    // A terminal movement moves only for a late effect (CANCELLED → MANUAL_INTERVENTION).
    let late_effect = views.iter().any(|v| v.late_effect);
    let allowed = !current.is_terminal() || late_effect;
    (derived != current && !first_dispatch_pending && allowed && current.can_transition_to(derived)).then_some(derived)
}

/// An answer whose compare-and-set matched nothing (the node moved on: re-claimed, decided by
/// another worker, cancelled). A node event only — except that an answer other than FAILED
/// for a node already FAILED or CANCELLED means money may have moved after qtg gave up on
/// it: the node gets `__late_effect` and the movement goes to MANUAL_INTERVENTION (with
/// `request_attention`).
pub async fn stale_answer(
    conn: &mut PgConnection,
    item: &WorkItem,
    method: &'static str,
    result: &ExecutionResult,
    from_executor: bool,
    actor: &str,
) -> Result<()> {
    let Some(now) = qtg_store::claims::node_now(conn, item.node_id).await? else {
        return Ok(());
    };
    // Only an executor's own answer reports an effect; a timeout or transport error is no news.
    let late = from_executor
        && result.next_state != NodeState::Failed
        && matches!(now.node_state, NodeState::Failed | NodeState::Cancelled);
    if !late {
        let detail = format!(
            "answer {} for attempt {} not applied: the node is {} at attempt {}",
            result.next_state, item.attempt_no, now.node_state, now.attempt_no
        );
        tracing::info!(node_id = %item.node_id, method, %detail, "stale answer");
        let call = qtg_store::events::Call::failed(method, "stale", qtg_core::codes::STALE_ANSWER, &detail, 0);
        qtg_store::events::record_calls(conn, item.request_id, item.node_id, item.attempt_no, &[call], actor).await?;
        return Ok(());
    }
    tracing::error!(
        node_id = %item.node_id, node_key = %item.node_key, method, answer = %result.next_state,
        node_state = %now.node_state,
        "late effect: an executor reports an effect for a node qtg already ended; a person must decide"
    );
    let mut refs = serde_json::Map::new();
    refs.insert(
        qtg_core::markers::LATE_EFFECT.into(),
        json!({"method": method, "attempt_no": item.attempt_no, "next_state": result.next_state.as_str(),
               "provider_ref_id": result.provider_ref_id, "node_state": now.node_state.as_str()}),
    );
    let call = qtg_store::events::Call::failed(
        method,
        &format!("late:{}", result.next_state),
        qtg_core::codes::LATE_EFFECT,
        &format!("{} answered {} after the node was {}", method, result.next_state, now.node_state),
        0,
    );
    qtg_store::events::record_calls(conn, item.request_id, item.node_id, item.attempt_no, &[call], actor).await?;
    let patch = NodePatch { merge_refs: refs, submit_accepted: SubmitAccepted::Mark, ..Default::default() };
    // A node that moves again meanwhile rolls the whole answer back (the worker tries again).
    transition::poll_node(conn, item.node_id, now.node_state, &patch).await?.or_stale()?;
    apply_request_state(conn, item.request_id, actor).await
}
