//! Heartbeats: a process seeds its `worker_heartbeats` rows (per network class) at start and
//! beats them from its loops, at most once per `MIN_BEAT_INTERVAL`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use qtg_store::heartbeats::{self, HeartbeatKey};
use qtg_store::PgPool;

const MIN_BEAT_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Heartbeat {
    pool: PgPool,
    key: Arc<HeartbeatKey>,
    /// Unix millis of the last successful beat.
    last: Arc<AtomicI64>,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
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
        Ok(Heartbeat { pool: pool.clone(), key: Arc::new(key), last: Arc::new(AtomicI64::new(now_ms())) })
    }

    pub async fn beat(&self) {
        let last = self.last.load(Ordering::Relaxed);
        if now_ms() - last < MIN_BEAT_INTERVAL.as_millis() as i64 {
            return;
        }
        self.last.store(now_ms(), Ordering::Relaxed);
        if let Err(e) = heartbeats::beat(&self.pool, &self.key).await {
            tracing::warn!(worker = %self.key.worker, error = %e, "heartbeat failed");
        }
    }

    /// Seconds since the last successful beat.
    pub fn age(&self) -> Duration {
        Duration::from_millis((now_ms() - self.last.load(Ordering::Relaxed)).max(0) as u64)
    }
}
