//! Operator actions (docs/architecture.md §4.4, §6.5, §7.3, §13): cancel, resume, node retry and
//! complete-manual. Each takes the movement's row lock without waiting and its nodes' locks
//! with NOWAIT (a busy worker means 409, never a half-applied change), re-checks state, and
//! writes through the one door with the operator's reason in the audit trail.

use qtg_core::markers::{LATE_EFFECT, MANUAL_REVIEW_REQUIRED, SUBMIT_ATTEMPT_PENDING};
use qtg_core::{codes, derive_request_state, NodeKind, NodeState, RequestState};
use qtg_store::artifacts::{self, ArtifactKind};
use qtg_store::audit::{self, AuditRecord};
use qtg_store::transition::{self, ErrorField, Meta, NodePatch, RequestPatch, Schedule, SubmitAccepted};
use qtg_store::{claims, movements as mq, NodeBrief, PgConnection};
use serde_json::{json, Value};
use uuid::Uuid;

use qtg_core::codes::RunbookCase;

use crate::advance::{advance_after_completion, Completion};
use crate::movements::{finish, OpError};
use crate::Engine;

/// Why a cancel is allowed while a side effect may exist (runbook case C6: submit never
/// reached the venue), with the operator's evidence.
pub struct CancelInput<'a> {
    pub reason: &'a str,
    pub runbook_case: Option<RunbookCase>,
    pub evidence: Option<&'a Value>,
}

fn in_flight(n: &NodeBrief) -> bool {
    matches!(
        n.node_state,
        NodeState::Preparing
            | NodeState::AwaitingSignature
            | NodeState::Submitting
            | NodeState::Submitted
            | NodeState::Observing
            | NodeState::Unknown
    )
}

impl Engine {
    /// Locks the movement and its nodes without waiting on a lock (request first, nodes
    /// NOWAIT: never a deadlock with a worker, which locks node then request). Workers hold
    /// these rows only for short compare-and-set transactions, never across a call, so a busy
    /// row is retried for up to ~2 s before the action answers 409.
    async fn lock_movement(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        id: Uuid,
    ) -> Result<(RequestState, Vec<NodeBrief>), OpError> {
        let mut tries = 0;
        loop {
            let attempt: Result<_, OpError> = async {
                let mut sp = sqlx::Acquire::begin(&mut **tx).await.map_err(sqlx_op)?;
                let state = claims::lock_request_nowait(&mut sp, id).await?.ok_or(OpError::NotFound("movement"))?;
                let nodes = claims::lock_nodes_nowait(&mut sp, id).await?;
                sp.commit().await.map_err(sqlx_op)?;
                Ok((state, nodes))
            }
            .await;
            match attempt {
                Err(OpError::Store(qtg_store::StoreError::Busy(what))) if tries < 40 => {
                    tries += 1;
                    tracing::debug!(movement_id = %id, %what, tries, "movement busy; retrying the lock");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                other => return other,
            }
        }
    }

    pub async fn cancel_movement(&self, actor: &str, id: Uuid, input: CancelInput<'_>) -> Result<(), OpError> {
        let mut tx = self.pool.begin().await?;
        let res: Result<_, OpError> = async {
            let (state, nodes) = self.lock_movement(&mut tx, id).await?;
            if state.is_terminal() {
                return Err(OpError::InvalidState(format!("movement is {state}")));
            }
            let c6 = input.runbook_case == Some(RunbookCase::C6)
                && input.evidence.is_some_and(|e| !e.is_null() && e != &json!({}) && e != &json!(""));
            // A node being prepared or signed has sent nothing: the cancel wins and its
            // dispatcher's arm then matches nothing. Only an UNKNOWN or SUBMITTING node can be C6
            // ("never reached the venue"), and only once its attempt is fenced; a node the venue
            // accepted (SUBMITTED/OBSERVING) blocks any cancel.
            for n in nodes.iter().filter(|n| in_flight(n)) {
                match n.node_state {
                    NodeState::Preparing | NodeState::AwaitingSignature => {}
                    NodeState::Unknown | NodeState::Submitting if c6 => self.check_fenced(&mut tx, n).await?,
                    _ => {
                        return Err(OpError::Conflict(format!(
                            "node {} is {}: a side effect may be in flight; cancel only with runbook_case C6 and \
                             evidence that it never reached the venue",
                            n.node_key, n.node_state
                        )))
                    }
                }
            }
            let meta = Meta { actor, reason: Some(input.reason) };
            for n in nodes.iter().filter(|n| n.node_state.can_transition_to(NodeState::Cancelled)) {
                transition::transition_node(
                    &mut tx,
                    n.id,
                    n.node_state,
                    NodeState::Cancelled,
                    &NodePatch::default(),
                    &meta,
                )
                .await?
                .or_stale()?;
            }
            transition::transition_request(
                &mut tx,
                id,
                state,
                RequestState::Cancelled,
                &RequestPatch { review_reason: Some(input.reason.to_string()), ..Default::default() },
                &meta,
            )
            .await?
            .or_stale()?;
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor,
                    action: "movement.cancel",
                    entity_type: "movement",
                    entity_id: id.to_string(),
                    movement_id: Some(id),
                    data: json!({"reason": input.reason, "runbook_case": input.runbook_case.map(RunbookCase::as_str),
                             "evidence": input.evidence}),
                },
            )
            .await?;

            Ok(())
        }
        .await;
        finish(tx, res).await
    }

    /// MANUAL_INTERVENTION → EXECUTING, clearing the hand-off marks (observation timeout,
    /// executor review marker) so recovery sweeps again. Refused when nothing would be left
    /// for the workers (retry or cancel instead).
    pub async fn resume_movement(&self, actor: &str, id: Uuid, reason: &str) -> Result<(), OpError> {
        let mut tx = self.pool.begin().await?;
        let res: Result<_, OpError> = async {
            let (state, nodes) = self.lock_movement(&mut tx, id).await?;
            if state != RequestState::ManualIntervention {
                return Err(OpError::InvalidState(format!("movement is {state}, not MANUAL_INTERVENTION")));
            }
            let mut cleared = Vec::new();
            for n in nodes.iter().filter(|n| n.node_state == NodeState::Unknown) {
                let timed_out = n.error_code.as_deref() == Some(codes::OBSERVATION_TIMEOUT);
                let review = n.provider_refs.get(MANUAL_REVIEW_REQUIRED).cloned();
                if timed_out || review.is_some() {
                    let patch = NodePatch {
                        remove_refs: vec![MANUAL_REVIEW_REQUIRED.to_string()],
                        error: if timed_out { ErrorField::CLEAR } else { ErrorField::Keep },
                        next_observe: Schedule::Clear,
                        ..Default::default()
                    };
                    transition::poll_node(&mut tx, n.id, NodeState::Unknown, &patch).await?.or_stale()?;
                    cleared.push(
                        json!({"node_key": n.node_key, "error_code": n.error_code, MANUAL_REVIEW_REQUIRED: review}),
                    );
                }
            }
            let after = qtg_store::context::request_nodes(&mut tx, id).await?;
            let views: Vec<_> = after.iter().map(NodeBrief::view).collect();
            if derive_request_state(&views) != Some(RequestState::Executing) {
                return Err(OpError::InvalidState(
                    "nothing for the workers to resume (a FAILED node needs retry, or cancel the movement)".into(),
                ));
            }
            let meta = Meta { actor, reason: Some(reason) };
            transition::transition_request(
                &mut tx,
                id,
                state,
                RequestState::Executing,
                &RequestPatch::default(),
                &meta,
            )
            .await?
            .or_stale()?;
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor,
                    action: "movement.resume",
                    entity_type: "movement",
                    entity_id: id.to_string(),
                    movement_id: Some(id),
                    data: json!({"reason": reason, "cleared": cleared}),
                },
            )
            .await?;

            Ok(())
        }
        .await;
        finish(tx, res).await
    }

    /// FAILED → READY for a new attempt. Refused on UNKNOWN, and on SUBMITTING with the
    /// pending marker (`SUBMIT_ATTEMPT_PENDING`): only recovery decides those.
    pub async fn retry_node(&self, actor: &str, id: Uuid, node_key: &str, reason: &str) -> Result<(), OpError> {
        let mut tx = self.pool.begin().await?;
        let res: Result<_, OpError> = async {
            let (state, nodes) = self.lock_movement(&mut tx, id).await?;
            let node = nodes.iter().find(|n| n.node_key == node_key).ok_or(OpError::NotFound("node"))?;
            match node.node_state {
                NodeState::Failed => {}
                NodeState::Unknown => {
                    return Err(OpError::SubmitAttemptPending(format!(
                        "node {node_key} is UNKNOWN: its armed attempt is not fenced yet; only recovery decides it \
                         (a Recover FAILED voids its key), then retry"
                    )))
                }
                NodeState::Submitting if node.provider_refs.get(SUBMIT_ATTEMPT_PENDING).is_some() => {
                    return Err(OpError::SubmitAttemptPending(format!(
                        "node {node_key} has a submit attempt pending: wait for its fence (the executor's answer, \
                         or recovery voiding its key after submit_by), then retry"
                    )))
                }
                other => {
                    return Err(OpError::InvalidState(format!(
                        "node {node_key} is {other}; only a FAILED node is retried"
                    )))
                }
            }
            if node.provider_refs.get(LATE_EFFECT).is_some() {
                return Err(OpError::InvalidState(format!(
                    "node {node_key} has a late effect (an executor reported money moved after it ended): \
                     reconcile with the venue and cancel the movement instead of retrying"
                )));
            }
            if !matches!(state, RequestState::Failed | RequestState::ManualIntervention | RequestState::Executing) {
                return Err(OpError::InvalidState(format!("movement is {state}")));
            }
            let meta = Meta { actor, reason: Some(reason) };
            let patch =
                NodePatch { submit_accepted: SubmitAccepted::Clear, error: ErrorField::CLEAR, ..Default::default() };
            transition::transition_node(&mut tx, node.id, NodeState::Failed, NodeState::Ready, &patch, &meta)
                .await?
                .or_stale()?;
            if state != RequestState::Executing {
                transition::transition_request(
                    &mut tx,
                    id,
                    state,
                    RequestState::Executing,
                    &RequestPatch::default(),
                    &meta,
                )
                .await?
                .or_stale()?;
            }
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor,
                    action: "node.retry",
                    entity_type: "node",
                    entity_id: node.id.to_string(),
                    movement_id: Some(id),
                    data: json!({"node_key": node_key, "reason": reason, "previous_error": node.error_code}),
                },
            )
            .await?;

            Ok(())
        }
        .await;
        finish(tx, res).await
    }

    /// A person did a `manual_*` node's work: READY → COMPLETED with their evidence stored as
    /// an artifact, then the plan advances.
    pub async fn complete_manual(
        &self,
        actor: &str,
        id: Uuid,
        node_key: &str,
        evidence: &Value,
    ) -> Result<(), OpError> {
        let mut tx = self.pool.begin().await?;
        let res: Result<_, OpError> = async {
            let (_, nodes) = self.lock_movement(&mut tx, id).await?;
            let node = nodes.iter().find(|n| n.node_key == node_key).ok_or(OpError::NotFound("node"))?;
            if node.node_kind != NodeKind::Manual {
                return Err(OpError::InvalidState(format!(
                    "node {node_key} is not a manual node; COMPLETED comes only from executor evidence"
                )));
            }
            if node.node_state != NodeState::Ready {
                return Err(OpError::InvalidState(format!("node {node_key} is {}, not READY", node.node_state)));
            }
            let row = mq::get(&mut tx, id).await?.ok_or(OpError::NotFound("movement"))?;
            let meta = Meta { actor, reason: Some("complete-manual") };
            let attempt = transition::transition_node(
                &mut tx,
                node.id,
                NodeState::Ready,
                NodeState::Completed,
                &NodePatch::default(),
                &meta,
            )
            .await?
            .or_stale()?;
            artifacts::insert(
                &mut tx,
                id,
                node.id,
                attempt,
                ArtifactKind::ManualEvidence,
                &json!({"evidence": evidence, "by": actor}),
                None,
            )
            .await?;
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor,
                    action: "node.complete_manual",
                    entity_type: "node",
                    entity_id: node.id.to_string(),
                    movement_id: Some(id),
                    data: json!({"node_key": node_key, "evidence": evidence}),
                },
            )
            .await?;
            // Activates successors and re-derives the request (COMPLETED, EXECUTING, …).
            let after = Completion { request_id: id, plan_version_id: row.plan_version_id, hand_off: false };
            advance_after_completion(&mut tx, &after, node_key, actor).await?;

            Ok(())
        }
        .await;
        finish(tx, res).await
    }
}

/// `sqlx::Error` into the operation's error.
fn sqlx_op(e: sqlx::Error) -> OpError {
    OpError::Store(e.into())
}

impl Engine {
    /// A C6 cancel of an armed node is accepted only once its attempt is fenced: the
    /// executor's venue refuses the key after `submit_by`, and `submit_by` plus the skew
    /// margin has passed. Otherwise 409, saying what to wait for.
    async fn check_fenced(&self, conn: &mut PgConnection, n: &NodeBrief) -> Result<(), OpError> {
        let (executor_key, past) = claims::past_submit_by(conn, n.id, self.settings.clock_skew.as_secs_f64()).await?;
        let fence = self.registry.executor(&executor_key).map(|e| e.fence);
        if past && fence == Some(qtg_executor::Fence::VenueDeadline) {
            return Ok(());
        }
        let why = match fence {
            Some(qtg_executor::Fence::VenueDeadline) => {
                "its submit_by (plus the clock-skew margin) has not passed yet".to_string()
            }
            Some(f) => format!("executor {executor_key:?} has fence = {}", f.as_str()),
            None => format!("executor {executor_key:?} is not in this process's registry"),
        };
        Err(OpError::SubmitAttemptPending(format!(
            "node {} is {} with an armed attempt that is not fenced ({why}): wait for recovery to decide it \
             (a Recover FAILED voids its key), then cancel",
            n.node_key, n.node_state
        )))
    }

    /// Classifies a node into the stuck-node runbook's cases, with the evidence. Never
    /// changes anything.
    pub async fn diagnose_node(&self, id: Uuid, node_key: &str) -> Result<Value, OpError> {
        let mut conn = self.pool.acquire().await?;
        let ev =
            qtg_store::diagnosis::node_evidence(&mut conn, id, node_key).await?.ok_or(OpError::NotFound("node"))?;
        let grace =
            qtg_core::Lane::parse(&ev.lane).map(|l| self.settings.grace.of(l)).unwrap_or(self.settings.grace.other);
        let facts = qtg_core::diagnosis::NodeFacts {
            node_state: ev.facts_state,
            request_state: ev.request_state,
            provider_refs: ev.provider_refs.clone(),
            provider_ref_id: ev.provider_ref_id.clone(),
            seconds_since_started: ev.seconds_since_started,
            grace_seconds: grace.as_secs_f64(),
            observe_count: ev.observe_count,
            submit_transport_failures: ev.submit_transport_failures,
        };
        let d = qtg_core::diagnosis::diagnose(&facts);
        let markers: serde_json::Map<String, Value> = ev
            .provider_refs
            .as_object()
            .map(|m| {
                m.iter().filter(|(k, _)| qtg_core::markers::is_marker(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
            })
            .unwrap_or_default();
        Ok(json!({
            "movement_id": id,
            "node_key": node_key,
            // null when the node is not stuck, as documented (core's "none").
            "case": (d.case != "none").then_some(d.case),
            "title": d.title,
            "required_action": d.required_action,
            "also_consider": d.also_consider,
            "automatic_resolution": false,
            "evidence": {
                "request_state": ev.request_state,
                "node": ev.node,
                "reconciliation":
                    ev.provider_refs.get(qtg_core::markers::RECONCILIATION).cloned().unwrap_or(Value::Null),
                "markers": markers,
                "seconds_since_started": ev.seconds_since_started,
                "lane": ev.lane,
                "grace_seconds": grace.as_secs_f64(),
                "submit_transport_failures": ev.submit_transport_failures,
                "recent_events": ev.recent_events,
            },
        }))
    }
}
