//! node_recovery: decides UNKNOWN nodes, and SUBMITTING nodes whose dispatcher died, through
//! the executor's `recover()` — reconciling by idempotency key, never retrying blind. Four
//! arms in priority order (CCIP, Stargate, CEX, other), each `max(1, batch / 4)`, only in
//! EXECUTING requests, only after the lane's grace since `started_at`.

use qtg_core::Lane;
use qtg_store::claims::{self, Pickup};

use crate::{Engine, Result};

impl Engine {
    pub async fn recover_tick(&self) -> Result<usize> {
        let served = self.served_keys();
        let per_arm = (self.settings.recovery_batch / 4).max(1);
        let mut processed = 0;
        for lane in Lane::ALL {
            let pickup = Pickup::Recover {
                lane,
                grace_seconds: self.settings.grace.of(lane).as_secs_f64(),
                skew_seconds: self.settings.clock_skew.as_secs_f64(),
            };
            let ids = {
                let mut conn = self.pool.acquire().await?;
                claims::candidates(&mut conn, pickup, &served, &[], per_arm).await?
            };
            for id in ids {
                match self.step_leased(pickup, &served, id).await {
                    Ok(true) => processed += 1,
                    Ok(false) => {}
                    Err(e) => {
                        self.contain(id, "recover", e).await?;
                        processed += 1;
                    }
                }
            }
        }
        Ok(processed)
    }
}

impl Engine {
    /// How soon the earliest node waiting out its grace or backoff falls due for recovery.
    pub async fn recovery_due_in(&self) -> Result<Option<std::time::Duration>> {
        let g = &self.settings.grace;
        let mut conn = self.pool.acquire().await?;
        let due = claims::next_due_in(
            &mut conn,
            Pickup::Recover { lane: Lane::Other, grace_seconds: 0.0, skew_seconds: 0.0 },
            &Lane::ALL.map(|lane| (lane, g.of(lane).as_secs_f64())),
        )
        .await?;
        Ok(due.map(std::time::Duration::from_secs_f64))
    }
}
