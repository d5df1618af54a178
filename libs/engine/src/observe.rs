//! node_observer: polls due SUBMITTED/OBSERVING nodes (two-phase claim: unlocked candidate
//! list, then one node + request at a time with SKIP LOCKED, in a short transaction that
//! leases the node), enforces the observation timeout when enabled, calls the executor
//! outside any transaction and applies its answer by compare-and-set.

use qtg_core::codes;
use qtg_core::protocol::{idempotency_key, Method};
use qtg_core::{ExecutionResult, NodeState};
use qtg_executor::ExecutorError;
use qtg_store::claims::{self, Pickup};
use qtg_store::events::{record_calls, Call};

use qtg_store::transition::{self, Guard, Lease, Meta, NodePatch, Schedule, SubmitAccepted};
use qtg_store::{PgConnection, WorkItem};
use tracing::Instrument;

use crate::advance::{apply_request_state, apply_result, stale_answer, Answer};
use crate::calls::{self, with_deadline};
use crate::context::build_execution_context;
use crate::{Engine, Result};

impl Engine {
    /// Observes up to `observe_batch` due nodes. Returns how many it claimed.
    pub async fn observe_tick(&self) -> Result<usize> {
        let served = self.served_keys();
        let ids = {
            let mut conn = self.pool.acquire().await?;
            claims::candidates(&mut conn, Pickup::Observe, &served, &[], self.settings.observe_batch).await?
        };
        let mut processed = 0;
        for id in ids {
            match self.step_leased(Pickup::Observe, &served, id).await {
                Ok(true) => processed += 1,
                Ok(false) => {}
                Err(e) => {
                    self.contain(id, "observe", e).await?;
                    processed += 1;
                }
            }
        }
        Ok(processed)
    }

    /// Observe or recover one node, leased: a short claim transaction (token, lease pushed
    /// into `next_observe_at`, context built), the call outside any transaction, then the
    /// answer applied by compare-and-set on (state, attempt, token). `false` on a miss.
    pub(crate) async fn step_leased(&self, pickup: Pickup, served: &[String], id: uuid::Uuid) -> Result<bool> {
        let method = match pickup {
            Pickup::Observe => Method::Observe,
            _ => Method::Recover,
        };
        let mut tx = self.pool.begin().await?;
        let Some(item) = claims::claim_first(&mut tx, pickup, served, id).await? else {
            tx.rollback().await?;
            return Ok(false);
        };
        let span =
            crate::step_span(if method == Method::Observe { "observe" } else { "recover" }, &item, item.attempt_no);
        async {
            let Some((executor, ctx, token)) = self.claim_leased(&mut tx, &item, method).await? else {
                tx.commit().await?;
                return Ok(());
            };
            tx.commit().await?;
            let deadline = self.settings.executor_timeout;
            // Both answers are stored alike, as the wire's result.
            let (res, ms) = if method == Method::Observe {
                let (res, ms) = with_deadline("observe", deadline, executor.observe(&ctx)).await;
                (res.map(ExecutionResult::erase), ms)
            } else {
                let key = idempotency_key(&ctx.request_node_id, item.attempt_no);
                tracing::info!(
                    node_id = %item.node_id, node_key = %item.node_key, state = %item.node_state,
                    idempotency_key = %key,
                    "recovering node"
                );
                let (res, ms) = with_deadline("recover", deadline, executor.recover(&ctx, &key)).await;
                (res.map(ExecutionResult::erase), ms)
            };
            let res = res.and_then(|r| {
                r.validate_merged(method, &ctx.provider_refs).map(|_| r).map_err(|v| ExecutorError::Protocol(v.0))
            });
            let guard = Guard { claim_token: Some(token), attempt_no: Some(item.attempt_no), ..Default::default() };
            let mut tx = self.pool.begin().await?;
            let name = method.as_str();
            match res {
                Ok(result) => {
                    let error = result.error_code.as_deref().map(|c| (c, result.error_detail.as_deref().unwrap_or("")));
                    let outcome = format!("result:{}", result.next_state);
                    let call = match error {
                        Some((code, detail)) => Call::failed(name, &outcome, code, detail, ms),
                        None => Call::ok(name, &outcome, ms),
                    };
                    let calls = [call];
                    // Re-derives too: an executor may have handed the node to a person.
                    let answer = Answer { result: &result, method, guard, calls: &calls, hand_off: false };
                    let applied = apply_result(&mut tx, &item, item.node_state, &answer, &self.actor).await?;
                    if applied.is_stale() {
                        record_calls(&mut tx, item.request_id, item.node_id, item.attempt_no, &calls, &self.actor)
                            .await?;
                        stale_answer(&mut tx, &item, name, &result, true, &self.actor).await?
                    }
                }
                Err(e) => self.call_failed_no_change(&mut tx, &item, name, &e, ms, guard).await?,
            }
            tx.commit().await?;
            Ok::<_, crate::EngineError>(())
        }
        .instrument(span)
        .await?;
        Ok(true)
    }

    /// Inside the claim transaction: what needs no call is done here (observation timeout,
    /// unknown executor, context errors); otherwise the node gets the token and its lease.
    async fn claim_leased(
        &self,
        conn: &mut PgConnection,
        item: &WorkItem,
        method: Method,
    ) -> Result<Option<(std::sync::Arc<dyn qtg_executor::Executor>, qtg_core::ExecutionContext, uuid::Uuid)>> {
        let from = item.node_state;
        let name = method.as_str();
        if method == Method::Observe && self.settings.observe_timeout_enforcement && item.observe_timed_out {
            // No executor call; a person decides (derivation escalates).
            let patch = NodePatch {
                submit_accepted: SubmitAccepted::Mark,
                ..NodePatch::error(codes::OBSERVATION_TIMEOUT, "timeout_policy.observe_seconds passed since started_at")
            };
            transition::transition_node(
                conn,
                item.node_id,
                from,
                NodeState::Unknown,
                &patch,
                &Meta::actor(&self.actor),
            )
            .await?
            .or_stale()?;
            apply_request_state(conn, item.request_id, &self.actor).await?;
            return Ok(None);
        }
        let Some(entry) = self.registry.executor(&item.executor_key) else {
            let e = ExecutorError::Unavailable(format!(
                "executor {:?} is not in this worker's registry",
                item.executor_key
            ));
            self.call_failed_no_change(conn, item, name, &e, 0, Guard::default()).await?;
            return Ok(None);
        };
        let ctx = match build_execution_context(conn, item, item.attempt_no).await {
            Ok(ctx) => ctx,
            Err(e) => {
                let e = ExecutorError::Protocol(format!("cannot build context: {e}"));
                self.call_failed_no_change(conn, item, name, &e, 0, Guard::default()).await?;
                return Ok(None);
            }
        };
        let token = uuid::Uuid::new_v4();
        // The lease: no other worker takes the node before the call's deadline has passed.
        let patch = NodePatch {
            lease: Some(Lease { token, expires_in: None }),
            next_observe: Schedule::In(self.settings.call_lease()),
            ..Default::default()
        };
        // Taken under the claim's row lock.
        transition::poll_node(conn, item.node_id, from, &patch).await?.or_stale()?;
        Ok(Some((entry.executor.clone(), ctx, token)))
    }

    /// Observe/recover got no usable answer: no state change, a node event, and a backoff
    /// before the node is due again (by compare-and-set on `guard`; a miss leaves the event).
    pub(crate) async fn call_failed_no_change(
        &self,
        conn: &mut PgConnection,
        item: &WorkItem,
        method: &str,
        e: &ExecutorError,
        ms: i32,
        guard: Guard,
    ) -> Result<()> {
        let code = calls::error_code(e);
        let detail = e.to_string();
        tracing::warn!(
            node_id = %item.node_id, node_key = %item.node_key, method, code, error = %detail,
            "executor call failed; node unchanged, backing off"
        );
        calls::record(conn, item, item.attempt_no, method, calls::outcome(e), Some((code, &detail)), ms, &self.actor)
            .await?;
        let patch =
            NodePatch { next_observe: Schedule::In(self.settings.call_failure_backoff), guard, ..Default::default() };
        if transition::poll_node(conn, item.node_id, item.node_state, &patch).await?.is_stale() {
            // The node moved on meanwhile and needs no backoff; the event stays.
            tracing::debug!(node_id = %item.node_id, "no backoff written: the node moved on");
        }
        Ok(())
    }
}

impl Engine {
    /// How soon the earliest scheduled observation falls due (for the idle pause).
    pub async fn observe_due_in(&self) -> Result<Option<std::time::Duration>> {
        let mut conn = self.pool.acquire().await?;
        let due = claims::next_due_in(&mut conn, Pickup::Observe, &[]).await?;
        Ok(due.map(std::time::Duration::from_secs_f64))
    }
}
