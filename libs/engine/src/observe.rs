//! node_observer: polls due SUBMITTED/OBSERVING nodes (two-phase claim: unlocked candidate
//! list, then one node + request at a time with SKIP LOCKED), enforces the observation
//! timeout when enabled, and applies the executor's answer.

use qtg_core::codes;
use qtg_core::protocol::Method;
use qtg_core::{ExecutionResult, NodeState};
use qtg_executor::ExecutorError;
use qtg_store::claims::{self, Pickup};
use qtg_store::transition::{self, Meta, NodePatch};
use qtg_store::{PgConnection, WorkItem};
use tracing::Instrument;

use crate::advance::{apply_request_state, apply_result};
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
            let mut tx = self.pool.begin().await?;
            let Some(item) = claims::claim(&mut tx, Pickup::Observe, &served, id).await? else {
                tx.rollback().await?;
                continue;
            };
            let span = crate::step_span("observe", &item, item.attempt_no);
            async {
                self.observe_node(&mut tx, &item).await?;
                tx.commit().await?;
                Ok::<_, crate::EngineError>(())
            }
            .instrument(span)
            .await?;
            processed += 1;
        }
        Ok(processed)
    }

    async fn observe_node(&self, conn: &mut PgConnection, item: &WorkItem) -> Result<()> {
        let from = item.node_state;
        if self.settings.observe_timeout_enforcement && item.observe_timed_out {
            // No executor call; a person decides (derivation escalates).
            let patch = NodePatch {
                submit_accepted: Some(true),
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
            .await?;
            apply_request_state(conn, item.request_id, &self.actor).await?;
            return Ok(());
        }
        let Some(entry) = self.registry.executor(&item.executor_key) else {
            let e = ExecutorError::Unavailable(format!(
                "executor {:?} is not in this worker's registry",
                item.executor_key
            ));
            return self.call_failed_no_change(conn, item, "observe", &e, 0).await;
        };
        let ctx = match build_execution_context(conn, item, item.attempt_no).await {
            Ok(ctx) => ctx,
            Err(e) => {
                let e = ExecutorError::Protocol(format!("cannot build context: {e}"));
                return self.call_failed_no_change(conn, item, "observe", &e, 0).await;
            }
        };
        let (res, ms) =
            with_deadline("observe", self.settings.executor_timeout, entry.executor.observe(&ctx, conn)).await;
        let res = res.and_then(|r| r.validate(Method::Observe).map(|_| r).map_err(|v| ExecutorError::Protocol(v.0)));
        match res {
            Ok(result) => {
                record_result(conn, item, "observe", &result, ms, &self.actor).await?;
                apply_result(conn, item, from, &result, Method::Observe, &self.actor).await?;
                Ok(())
            }
            Err(e) => self.call_failed_no_change(conn, item, "observe", &e, ms).await,
        }
    }

    /// Observe/recover got no usable answer: no state change, a node event, and a backoff
    /// before the node is due again.
    pub(crate) async fn call_failed_no_change(
        &self,
        conn: &mut PgConnection,
        item: &WorkItem,
        method: &str,
        e: &ExecutorError,
        ms: i32,
    ) -> Result<()> {
        let code = calls::error_code(e);
        let detail = e.to_string();
        tracing::warn!(node_id = %item.node_id, node_key = %item.node_key, method, code, error = %detail, "executor call failed; node unchanged, backing off");
        calls::record(conn, item, item.attempt_no, method, calls::outcome(e), Some((code, &detail)), ms, &self.actor)
            .await?;
        let patch =
            NodePatch { next_observe_in: Some(Some(self.settings.call_failure_backoff_seconds)), ..Default::default() };
        transition::poll_node(conn, item.node_id, item.node_state, &patch).await?;
        Ok(())
    }
}

pub(crate) async fn record_result(
    conn: &mut PgConnection,
    item: &WorkItem,
    method: &str,
    result: &ExecutionResult,
    ms: i32,
    actor: &str,
) -> Result<()> {
    let error = result.error_code.as_deref().map(|c| (c, result.error_detail.as_deref().unwrap_or("")));
    calls::record(conn, item, item.attempt_no, method, &format!("result:{}", result.next_state), error, ms, actor)
        .await?;
    Ok(())
}

impl Engine {
    /// How soon the earliest scheduled observation falls due (for the idle pause).
    pub async fn observe_due_in(&self) -> Result<Option<std::time::Duration>> {
        let mut conn = self.pool.acquire().await?;
        let due = claims::next_due_in(&mut conn, Pickup::Observe, [0.0; 4]).await?;
        Ok(due.map(std::time::Duration::from_secs_f64))
    }
}
