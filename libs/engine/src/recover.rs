//! node_recovery: decides UNKNOWN nodes, and SUBMITTING nodes whose dispatcher died, through
//! the executor's `recover()` — reconciling by idempotency key, never retrying blind. Four
//! arms in priority order (CCIP, Stargate, CEX, other), each `max(1, batch / 4)`, only in
//! EXECUTING requests, only after the lane's grace since `started_at`.

use qtg_core::protocol::{idempotency_key, Method};
use qtg_core::Lane;
use qtg_executor::ExecutorError;
use qtg_store::claims::{self, Pickup};
use qtg_store::{PgConnection, WorkItem};
use tracing::Instrument;

use crate::advance::apply_result;
use crate::calls::with_deadline;
use crate::context::build_execution_context;
use crate::observe::record_result;
use crate::{Engine, Result};

impl Engine {
    pub async fn recover_tick(&self) -> Result<usize> {
        let served = self.served_keys();
        let per_arm = (self.settings.recovery_batch / 4).max(1);
        let mut processed = 0;
        for lane in Lane::ALL {
            let pickup = Pickup::Recover { lane, grace_seconds: self.settings.grace.of(lane) };
            let ids = {
                let mut conn = self.pool.acquire().await?;
                claims::candidates(&mut conn, pickup, &served, &[], per_arm).await?
            };
            for id in ids {
                let mut tx = self.pool.begin().await?;
                let Some(item) = claims::claim(&mut tx, pickup, &served, id).await? else {
                    tx.rollback().await?;
                    continue;
                };
                let span = crate::step_span("recover", &item, item.attempt_no);
                async {
                    self.recover_node(&mut tx, &item).await?;
                    tx.commit().await?;
                    Ok::<_, crate::EngineError>(())
                }
                .instrument(span)
                .await?;
                processed += 1;
            }
        }
        Ok(processed)
    }

    async fn recover_node(&self, conn: &mut PgConnection, item: &WorkItem) -> Result<()> {
        let from = item.node_state;
        let Some(entry) = self.registry.executor(&item.executor_key) else {
            let e = ExecutorError::Unavailable(format!(
                "executor {:?} is not in this worker's registry",
                item.executor_key
            ));
            return self.call_failed_no_change(conn, item, "recover", &e, 0).await;
        };
        let ctx = match build_execution_context(conn, item, item.attempt_no).await {
            Ok(ctx) => ctx,
            Err(e) => {
                let e = ExecutorError::Protocol(format!("cannot build context: {e}"));
                return self.call_failed_no_change(conn, item, "recover", &e, 0).await;
            }
        };
        let key = idempotency_key(&ctx.request_node_id, item.attempt_no);
        tracing::info!(node_id = %item.node_id, node_key = %item.node_key, state = %from, idempotency_key = %key, "recovering node");
        let (res, ms) =
            with_deadline("recover", self.settings.executor_timeout, entry.executor.recover(&ctx, &key, conn)).await;
        let res = res.and_then(|r| r.validate(Method::Recover).map(|_| r).map_err(|v| ExecutorError::Protocol(v.0)));
        match res {
            Ok(result) => {
                record_result(conn, item, "recover", &result, ms, &self.actor).await?;
                // Re-derives too: an executor may have handed the node to a person.
                apply_result(conn, item, from, &result, Method::Recover, &self.actor).await?;
                Ok(())
            }
            Err(e) => self.call_failed_no_change(conn, item, "recover", &e, ms).await,
        }
    }
}

impl Engine {
    /// How soon the earliest node waiting out its grace or backoff falls due for recovery.
    pub async fn recovery_due_in(&self) -> Result<Option<std::time::Duration>> {
        let g = &self.settings.grace;
        let mut conn = self.pool.acquire().await?;
        let due = claims::next_due_in(
            &mut conn,
            Pickup::Recover { lane: Lane::Other, grace_seconds: 0.0 },
            [g.ccip, g.stargate, g.cex, g.other],
        )
        .await?;
        Ok(due.map(std::time::Duration::from_secs_f64))
    }
}
