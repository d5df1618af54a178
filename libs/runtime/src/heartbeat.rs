//! Heartbeats: a process seeds its `worker_heartbeats` rows (per network class) at start and
//! a task of its own writes them every `MG_HEARTBEAT_INTERVAL_SECONDS`, whatever its loops
//! are doing. Liveness comes from the process (a worker whose interval is six hours is not
//! dead between ticks; a process that dies goes stale within a few periods); the loops only
//! report when they last ticked and when they are next due, which each beat carries along.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use qtg_store::heartbeats::{self, HeartbeatKey, LoopTimes};
use qtg_store::PgPool;
use tokio_util::sync::CancellationToken;

/// No tick yet (for `ticked_ms`) / nothing due (for `due_ms`).
const NEVER: u64 = u64::MAX;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Milliseconds on the process' monotonic clock.
fn mono_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// One worker's heartbeat row in this process; its loops report their ticks through it.
#[derive(Clone)]
pub struct Heartbeat {
    key: Arc<HeartbeatKey>,
    /// Monotonic millis when a loop last finished a tick, and when the next is due.
    ticked_ms: Arc<AtomicU64>,
    due_ms: Arc<AtomicU64>,
}

impl Heartbeat {
    /// Seeds the row for `worker` in `network_class`.
    pub async fn seed(
        pool: &PgPool,
        worker: &str,
        network_class: &str,
        instance_id: &str,
    ) -> anyhow::Result<Heartbeat> {
        let key = HeartbeatKey {
            worker: worker.into(),
            network_class: network_class.into(),
            instance_id: instance_id.into(),
        };
        let hostname = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
        heartbeats::seed(pool, &key, &hostname, std::process::id() as i32).await?;
        Ok(Heartbeat {
            key: Arc::new(key),
            ticked_ms: Arc::new(AtomicU64::new(NEVER)),
            due_ms: Arc::new(AtomicU64::new(NEVER)),
        })
    }

    /// A loop finished a tick; its next one runs after `pause` (`None`: at once). Memory
    /// only: the next beat writes it.
    pub fn ticked(&self, pause: Option<Duration>) {
        let now = mono_ms();
        self.ticked_ms.store(now, Ordering::Relaxed);
        self.due_ms.store(now + pause.map_or(0, |p| p.as_millis() as u64), Ordering::Relaxed);
    }

    fn times(&self) -> LoopTimes {
        let now = mono_ms();
        let ticked = self.ticked_ms.load(Ordering::Relaxed);
        let due = self.due_ms.load(Ordering::Relaxed);
        LoopTimes {
            ticked_ago: (ticked != NEVER).then(|| now.saturating_sub(ticked) as f64 / 1000.0),
            due_in: (due != NEVER).then(|| due.saturating_sub(now) as f64 / 1000.0),
        }
    }

    pub fn worker(&self) -> &str {
        &self.key.worker
    }
}

/// The process' heartbeat writer: every `period` it beats each row, on its own task.
#[derive(Clone)]
pub struct Heartbeats {
    rows: Arc<Vec<Heartbeat>>,
    /// Unix millis of the last round in which every row was written.
    last_ok: Arc<AtomicI64>,
}

impl Heartbeats {
    pub fn new(rows: Vec<Heartbeat>) -> Heartbeats {
        Heartbeats { rows: Arc::new(rows), last_ok: Arc::new(AtomicI64::new(now_ms())) }
    }

    /// Whether this process writes any heartbeat (the API alone writes none).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Time since every row was last written successfully.
    pub fn age(&self) -> Duration {
        Duration::from_millis((now_ms() - self.last_ok.load(Ordering::Relaxed)).max(0) as u64)
    }

    /// Writes every row now. A failure is logged and leaves the age growing (readiness says
    /// so once it passes the stale threshold).
    pub async fn beat_all(&self, pool: &PgPool, deadline: Duration) {
        let beats: Vec<_> = self.rows.iter().map(|hb| (&*hb.key, hb.times())).collect();
        let round = heartbeats::beat(pool, &beats);
        match tokio::time::timeout(deadline, round).await {
            Ok(Ok(())) => self.last_ok.store(now_ms(), Ordering::Relaxed),
            Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
            Err(_) => tracing::warn!(deadline_s = deadline.as_secs_f64(), "heartbeat timed out"),
        }
    }

    /// Beats every `period` until `shutdown`.
    pub fn spawn(&self, pool: PgPool, period: Duration, shutdown: CancellationToken) {
        if self.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = every.tick() => this.beat_all(&pool, period).await,
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_times_follow_the_last_tick() {
        let hb = Heartbeat {
            key: Arc::new(HeartbeatKey { worker: "w".into(), network_class: "c".into(), instance_id: "i".into() }),
            ticked_ms: Arc::new(AtomicU64::new(NEVER)),
            due_ms: Arc::new(AtomicU64::new(NEVER)),
        };
        assert_eq!(hb.times(), LoopTimes { ticked_ago: None, due_in: None });
        hb.ticked(Some(Duration::from_secs(3600)));
        let t = hb.times();
        assert!(t.ticked_ago.is_some_and(|a| a < 5.0), "{t:?}");
        assert!(t.due_in.is_some_and(|d| d > 3500.0 && d <= 3600.0), "{t:?}");
        hb.ticked(None);
        assert!(hb.times().due_in.is_some_and(|d| d == 0.0));
    }
}
