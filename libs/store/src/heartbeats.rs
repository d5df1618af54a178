//! `worker_heartbeats`: which workers are alive, per network class.

use sqlx::PgPool;

use crate::Result;

#[derive(Debug, Clone)]
pub struct HeartbeatKey {
    pub worker: String,
    pub network_class: String,
    pub instance_id: String,
}

/// Seeds (or re-seeds) this process' row at start.
pub async fn seed(pool: &PgPool, key: &HeartbeatKey, hostname: &str, pid: i32) -> Result<()> {
    sqlx::query!(
        "INSERT INTO worker_heartbeats (worker, network_class, instance_id, hostname, pid)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (worker, network_class, instance_id)
         DO UPDATE SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
                       started_at = now(), last_beat_at = now(),
                       last_tick_at = NULL, next_tick_at = NULL",
        key.worker,
        key.network_class,
        key.instance_id,
        hostname,
        pid,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// What a worker's loop last did, measured on the process' monotonic clock and written as
/// offsets from the database's `now()` (the one clock decisions and views use).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoopTimes {
    /// Seconds since the loop's last tick ended; `None` before its first.
    pub ticked_ago: Option<f64>,
    /// Seconds until the loop's next tick is due (0 while it drains); `None` before its first.
    pub due_in: Option<f64>,
}

/// Beats this process' rows, one per worker, in one statement: `last_beat_at = now()` and
/// each loop's times.
pub async fn beat(pool: &PgPool, beats: &[(&HeartbeatKey, LoopTimes)]) -> Result<()> {
    let workers: Vec<&str> = beats.iter().map(|(k, _)| k.worker.as_str()).collect();
    let classes: Vec<&str> = beats.iter().map(|(k, _)| k.network_class.as_str()).collect();
    let instances: Vec<&str> = beats.iter().map(|(k, _)| k.instance_id.as_str()).collect();
    let ago: Vec<Option<f64>> = beats.iter().map(|(_, t)| t.ticked_ago).collect();
    let due: Vec<Option<f64>> = beats.iter().map(|(_, t)| t.due_in).collect();
    sqlx::query!(
        "UPDATE worker_heartbeats h SET last_beat_at = now(),
             last_tick_at = now() - make_interval(secs => b.ago),
             next_tick_at = now() + make_interval(secs => b.due)
         FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::float8[])
             AS b(worker, network_class, instance_id, ago, due)
         WHERE h.worker = b.worker AND h.network_class = b.network_class AND h.instance_id = b.instance_id",
        &workers as &[&str],
        &classes as &[&str],
        &instances as &[&str],
        &ago as &[Option<f64>],
        &due as &[Option<f64>],
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Removes a process' rows when it stops cleanly: a stopped instance is not a stale one.
/// (A crashed one keeps its rows and reads as stale, then gone.)
pub async fn forget_instance(pool: &PgPool, instance_id: &str) -> Result<u64> {
    let done = sqlx::query!("DELETE FROM worker_heartbeats WHERE instance_id = $1", instance_id).execute(pool).await?;
    Ok(done.rows_affected())
}
