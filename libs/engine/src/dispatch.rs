//! node_dispatcher: READY → PREPARING → (AWAITING_SIGNATURE) → SUBMITTING → submit → result,
//! in the two transactions of DESIGN.md §2.2 (intent before effect).
//!
//! Transaction 1 claims the node and its request, runs preflight, prepare and sign, and
//! commits SUBMITTING with `attempt_no + 1`, `started_at` and the `__submit_attempt_*`
//! markers together with the prepared artifact. Transaction 2 re-locks the node only
//! (NOWAIT), checks the payload hash, calls submit, then locks the request and records the
//! result. A crash before commit 1 leaves the node READY; after it, recovery finds the marker.

use qtg_core::codes;
use qtg_core::protocol::{idempotency_key, Method};
use qtg_core::{ExecutionContext, ExecutionResult, NodeState, PreparedAction, RequestState, SignRequest, SignResult};
use std::sync::Arc;

use qtg_executor::{Executor, ExecutorError, Prepared, SignError};
use qtg_store::artifacts::{self, ArtifactKind};
use qtg_store::claims::{self, Pickup};
use qtg_store::transition::{self, Meta, NodePatch, RequestPatch};
use qtg_store::{PgConnection, WorkItem};
use serde_json::json;

use crate::advance::{apply_request_state, apply_result};
use crate::calls::{self, with_deadline};
use crate::context::{build_execution_context, ContextError};
use crate::{Engine, Result};
use tracing::Instrument;

/// How many READY candidates one claim pass lists.
const CANDIDATE_SCAN: i64 = 16;

/// Everything transaction 2 needs, fixed by transaction 1.
struct Submission {
    item: WorkItem,
    executor: Arc<dyn Executor>,
    ctx: ExecutionContext,
    prepared: PreparedAction,
    signed: Option<SignResult>,
}

impl Engine {
    /// Dispatches at most one READY node. Returns 1 if it claimed one.
    pub async fn dispatch_tick(&self) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let Some(item) = claims::claim_next(&mut tx, Pickup::Dispatch, &self.served_keys(), CANDIDATE_SCAN).await?
        else {
            tx.commit().await?;
            return Ok(0);
        };
        // One trace per node step: transaction 1, the submit, transaction 2.
        let span = crate::step_span("dispatch", &item, item.attempt_no + 1);
        async move {
            let staged = self.prepare_submission(&mut tx, item).await?;
            tx.commit().await?;
            if let Some(submission) = staged {
                self.submit(submission).await?;
            }
            Ok(1)
        }
        .instrument(span)
        .await
    }

    /// Transaction 1. `None` when the node ended here (FAILED) instead of reaching SUBMITTING.
    async fn prepare_submission(&self, conn: &mut PgConnection, item: WorkItem) -> Result<Option<Submission>> {
        let meta = Meta::actor(&self.actor);
        transition::transition_node(
            conn,
            item.node_id,
            NodeState::Ready,
            NodeState::Preparing,
            &NodePatch::default(),
            &meta,
        )
        .await?;
        if item.request_state == RequestState::Approved {
            transition::transition_request(
                conn,
                item.request_id,
                RequestState::Approved,
                RequestState::Executing,
                &RequestPatch::default(),
                &meta,
            )
            .await?;
        }
        let attempt_no = item.attempt_no + 1;
        let mut state = NodeState::Preparing;

        // Dispatch refuses drift from what was compiled and approved.
        if item.compiled_plan_hash != item.current_plan_hash
            || item.approved_plan_hash.as_deref().is_some_and(|h| h != item.compiled_plan_hash)
        {
            return self
                .fail(
                    conn,
                    &item,
                    state,
                    codes::PLAN_HASH_DRIFT,
                    "the plan changed since the movement was compiled or approved",
                )
                .await;
        }
        if item.approved_intent_hash.as_deref().is_some_and(|h| h != item.intent_hash) {
            return self
                .fail(conn, &item, state, codes::INTENT_HASH_DRIFT, "the intent changed since it was approved")
                .await;
        }
        let Some(entry) = self.registry.executor(&item.executor_key) else {
            let detail = format!("executor {:?} is not in this worker's registry", item.executor_key);
            return self.fail(conn, &item, state, codes::EXECUTOR_NOT_REGISTERED, &detail).await;
        };
        let executor = entry.executor.clone();
        let ctx = match build_execution_context(conn, &item, attempt_no).await {
            Ok(ctx) => ctx,
            Err(ContextError::Ref(e)) => {
                return self.fail(conn, &item, state, codes::CONFIG_REF_UNRESOLVED, &e.to_string()).await
            }
            Err(ContextError::Store(e)) => return Err(e.into()),
        };
        let deadline = self.settings.executor_timeout;

        // Preflight: nothing has been sent, so every failure is a plain FAILED.
        let (res, ms) = with_deadline("preflight", deadline, executor.preflight(&ctx, conn)).await;
        // A pass is recorded together with prepare's answer below (one round trip).
        let preflight_ms = match res {
            Ok(None) => ms,
            Ok(Some(result)) => {
                let (code, detail) = match result.validate(Method::Preflight) {
                    Ok(()) => (
                        result.error_code.clone().unwrap_or_else(|| "PREFLIGHT_FAILED".into()),
                        result.error_detail.clone().unwrap_or_default(),
                    ),
                    Err(v) => (codes::EXECUTOR_PROTOCOL_ERROR.to_string(), v.to_string()),
                };
                calls::record(conn, &item, attempt_no, "preflight", "refused", Some((&code, &detail)), ms, &self.actor)
                    .await?;
                return self.fail(conn, &item, state, &code, &detail).await;
            }
            Err(e) => return self.call_failed(conn, &item, attempt_no, state, "preflight", &e, ms).await,
        };

        // Prepare.
        let (res, ms) = with_deadline("prepare", deadline, executor.prepare(&ctx, conn)).await;
        let mut prepared = match res {
            Ok(Prepared::Action(p)) => p,
            Ok(Prepared::Refused(result)) => {
                calls::record(conn, &item, attempt_no, "preflight", "pass", None, preflight_ms, &self.actor).await?;
                let code = result.error_code.clone().unwrap_or_else(|| "PREPARE_FAILED".into());
                let detail = result.error_detail.clone().unwrap_or_default();
                calls::record(conn, &item, attempt_no, "prepare", "refused", Some((&code, &detail)), ms, &self.actor)
                    .await?;
                return self.fail(conn, &item, state, &code, &detail).await;
            }
            Ok(Prepared::Empty) => {
                calls::record(conn, &item, attempt_no, "preflight", "pass", None, preflight_ms, &self.actor).await?;
                calls::record(conn, &item, attempt_no, "prepare", "empty", None, ms, &self.actor).await?;
                return self.fail(conn, &item, state, codes::PREPARE_EMPTY, "prepare returned no action").await;
            }
            Err(e) => {
                calls::record(conn, &item, attempt_no, "preflight", "pass", None, preflight_ms, &self.actor).await?;
                return self.call_failed(conn, &item, attempt_no, state, "prepare", &e, ms).await;
            }
        };
        if let Err(v) = prepared.seal() {
            calls::record(conn, &item, attempt_no, "preflight", "pass", None, preflight_ms, &self.actor).await?;
            calls::record(
                conn,
                &item,
                attempt_no,
                "prepare",
                "protocol_error",
                Some((codes::EXECUTOR_PROTOCOL_ERROR, &v.to_string())),
                ms,
                &self.actor,
            )
            .await?;
            return self.fail(conn, &item, state, codes::EXECUTOR_PROTOCOL_ERROR, &v.to_string()).await;
        }
        calls::record_ok(
            conn,
            &item,
            attempt_no,
            &[("preflight", "pass", preflight_ms), ("prepare", "ok", ms)],
            &self.actor,
        )
        .await?;
        let prepared_json = serde_json::to_value(&prepared).unwrap_or_else(|_| json!({}));
        artifacts::insert(
            conn,
            item.request_id,
            item.node_id,
            attempt_no,
            ArtifactKind::PreparedAction,
            &prepared_json,
            Some(&prepared.payload_hash),
        )
        .await?;

        // Sign, when the plan or the prepared action asks for it.
        let mut signed = None;
        if item.signing_required || prepared.signing_required {
            transition::transition_node(
                conn,
                item.node_id,
                state,
                NodeState::AwaitingSignature,
                &NodePatch::default(),
                &meta,
            )
            .await?;
            state = NodeState::AwaitingSignature;
            let Some(signer_key) = item.signer_key.clone().filter(|k| !k.is_empty()) else {
                return self
                    .fail(
                        conn,
                        &item,
                        state,
                        codes::SIGNER_BINDING_MISSING,
                        "signing is required but the node has no signer_key",
                    )
                    .await;
            };
            let Some(signer) = self.registry.signer(&signer_key).map(|s| s.signer.clone()) else {
                let detail = format!("signer {signer_key:?} is not in this worker's registry");
                return self.fail(conn, &item, state, codes::SIGNER_BINDING_MISSING, &detail).await;
            };
            let request = SignRequest::build(&ctx, &signer_key, &prepared);
            let started = std::time::Instant::now();
            let span = calls::call_span("sign");
            let res = match tokio::time::timeout(deadline, signer.sign(&request)).instrument(span.clone()).await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(SignError::Refused(why))) => Err(SignFailure::Refused(why)),
                Ok(Err(SignError::Call(e))) => Err(SignFailure::Call(e)),
                Err(_) => Err(SignFailure::Call(ExecutorError::Timeout(deadline.as_millis() as u64))),
            };
            let outcome = match &res {
                Ok(_) => "ok",
                Err(SignFailure::Refused(_)) => "refused",
                Err(SignFailure::Call(e)) => calls::outcome(e),
            };
            let ms = calls::call_ended(&span, "sign", outcome, started);
            match res {
                Ok(result) => {
                    calls::record(conn, &item, attempt_no, "sign", "ok", None, ms, &self.actor).await?;
                    let value = serde_json::to_value(&result).unwrap_or_else(|_| json!({}));
                    artifacts::insert(
                        conn,
                        item.request_id,
                        item.node_id,
                        attempt_no,
                        ArtifactKind::SignResult,
                        &value,
                        Some(&prepared.payload_hash),
                    )
                    .await?;
                    signed = Some(result);
                }
                Err(SignFailure::Refused(why)) => {
                    calls::record(
                        conn,
                        &item,
                        attempt_no,
                        "sign",
                        "refused",
                        Some((codes::SIGNER_REFUSED, &why)),
                        ms,
                        &self.actor,
                    )
                    .await?;
                    return self.fail(conn, &item, state, codes::SIGNER_REFUSED, &why).await;
                }
                Err(SignFailure::Call(e)) => {
                    let detail = e.to_string();
                    calls::record(
                        conn,
                        &item,
                        attempt_no,
                        "sign",
                        calls::outcome(&e),
                        Some((codes::SIGNER_UNAVAILABLE, &detail)),
                        ms,
                        &self.actor,
                    )
                    .await?;
                    return self.fail(conn, &item, state, codes::SIGNER_UNAVAILABLE, &detail).await;
                }
            }
        }

        // Intent before effect: SUBMITTING, the attempt and its markers commit first.
        let begin = NodePatch { begin_attempt: true, ..Default::default() };
        transition::transition_node(conn, item.node_id, state, NodeState::Submitting, &begin, &meta).await?;
        Ok(Some(Submission { item, executor, ctx, prepared, signed }))
    }

    /// Transaction 2: submit under the node's lock, then record the result.
    async fn submit(&self, s: Submission) -> Result<()> {
        let attempt_no = s.ctx.attempt_no;
        let key = idempotency_key(&s.ctx.request_node_id, attempt_no);
        let mut tx = self.pool.begin().await?;
        let Some(relocked) = claims::relock_submitting(&mut tx, s.item.node_id, attempt_no).await? else {
            // Someone else (recovery) owns it now; the marker tells them what happened.
            tracing::warn!(node_id = %s.item.node_id, attempt_no, "node left SUBMITTING before submit; leaving it to recovery");
            tx.rollback().await?;
            return Ok(());
        };
        let item = relocked.item;
        // What was prepared is what is submitted, and only while no pause holds the node.
        let intact = relocked.prepared_hash.as_deref() == Some(s.prepared.payload_hash.as_str())
            && relocked.prepared_payload.as_deref() == Some(s.prepared.payload.as_str())
            && s.prepared.computed_hash() == s.prepared.payload_hash;
        let refusal = match (&relocked.held_by, intact) {
            (Some(pause), _) => Some((
                codes::DISPATCH_PAUSED,
                format!("dispatch paused ({pause}) before the submit was sent; nothing reached the venue; retry after resume"),
            )),
            (None, false) => Some((
                codes::PAYLOAD_HASH_MISMATCH,
                "the stored prepared action does not match what would be submitted".to_string(),
            )),
            (None, true) => None,
        };
        if let Some((code, detail)) = refusal {
            // Nothing was sent: a plain failure, safe to retry.
            tracing::warn!(node_id = %item.node_id, attempt_no, code, "submit not sent");
            claims::lock_request(&mut tx, item.request_id).await?;
            let patch = NodePatch {
                remove_refs: vec![qtg_core::markers::SUBMIT_ATTEMPT_PENDING.into()],
                ..NodePatch::error(code, &detail)
            };
            transition::transition_node(
                &mut tx,
                item.node_id,
                NodeState::Submitting,
                NodeState::Failed,
                &patch,
                &Meta::actor(&self.actor),
            )
            .await?;
            apply_request_state(&mut tx, item.request_id, &self.actor).await?;
            tx.commit().await?;
            return Ok(());
        }
        let (res, ms) = with_deadline(
            "submit",
            self.settings.executor_timeout,
            s.executor.submit(&s.ctx, &s.prepared, s.signed.as_ref(), &key, &mut tx),
        )
        .await;
        let res = res.and_then(|r| r.validate(Method::Submit).map(|_| r).map_err(|v| ExecutorError::Protocol(v.0)));
        claims::lock_request(&mut tx, item.request_id).await?;
        // An UNKNOWN from submit gets the lane's grace counted from now, the end of the call:
        // the venue may still be processing what it received.
        let grace = self.settings.grace.of(item.lane);
        match res {
            Ok(mut result) => {
                if result.next_state == NodeState::Unknown {
                    result.retry_after_seconds = Some(result.retry_after_seconds.unwrap_or(0.0).max(grace));
                }
                calls::record(
                    &mut tx,
                    &item,
                    attempt_no,
                    "submit",
                    &format!("result:{}", result.next_state),
                    result.error_code.as_deref().map(|c| (c, result.error_detail.as_deref().unwrap_or(""))),
                    ms,
                    &self.actor,
                )
                .await?;
                apply_result(&mut tx, &item, NodeState::Submitting, &result, Method::Submit, &self.actor).await?;
            }
            Err(e) => {
                // The venue may have it: UNKNOWN, never FAILED, never retried blind.
                let code = calls::error_code(&e);
                let detail = e.to_string();
                calls::record(
                    &mut tx,
                    &item,
                    attempt_no,
                    "submit",
                    calls::outcome(&e),
                    Some((code, &detail)),
                    ms,
                    &self.actor,
                )
                .await?;
                tracing::warn!(node_id = %item.node_id, attempt_no, error = %detail, "submit gave no answer; node is UNKNOWN");
                let result = ExecutionResult {
                    error_code: Some(code.into()),
                    error_detail: Some(detail),
                    retry_after_seconds: Some(grace),
                    ..ExecutionResult::new(NodeState::Unknown)
                };
                apply_result(&mut tx, &item, NodeState::Submitting, &result, Method::Submit, &self.actor).await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Ends transaction 1 with the node FAILED (nothing was sent) and re-derives.
    async fn fail(
        &self,
        conn: &mut PgConnection,
        item: &WorkItem,
        from: NodeState,
        code: &str,
        detail: &str,
    ) -> Result<Option<Submission>> {
        tracing::info!(node_id = %item.node_id, node_key = %item.node_key, code, detail, "node failed before submit");
        transition::transition_node(
            conn,
            item.node_id,
            from,
            NodeState::Failed,
            &NodePatch::error(code, detail),
            &Meta::actor(&self.actor),
        )
        .await?;
        apply_request_state(conn, item.request_id, &self.actor).await?;
        Ok(None)
    }

    #[allow(clippy::too_many_arguments)]
    async fn call_failed(
        &self,
        conn: &mut PgConnection,
        item: &WorkItem,
        attempt_no: i32,
        from: NodeState,
        method: &str,
        e: &ExecutorError,
        ms: i32,
    ) -> Result<Option<Submission>> {
        // Before submit nothing left qtg: unreachable, slow or garbled all mean FAILED.
        let code = match e {
            ExecutorError::Protocol(_) => codes::EXECUTOR_PROTOCOL_ERROR,
            _ => codes::EXECUTOR_UNAVAILABLE,
        };
        let detail = e.to_string();
        calls::record(conn, item, attempt_no, method, calls::outcome(e), Some((code, &detail)), ms, &self.actor)
            .await?;
        self.fail(conn, item, from, code, &detail).await
    }
}

enum SignFailure {
    Refused(String),
    Call(ExecutorError),
}
