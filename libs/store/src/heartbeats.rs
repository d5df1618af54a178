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
    sqlx::query(
        "INSERT INTO worker_heartbeats (worker, network_class, instance_id, hostname, pid)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (worker, network_class, instance_id)
         DO UPDATE SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
                       started_at = now(), last_beat_at = now()",
    )
    .bind(&key.worker)
    .bind(&key.network_class)
    .bind(&key.instance_id)
    .bind(hostname)
    .bind(pid)
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn beat(pool: &PgPool, key: &HeartbeatKey) -> Result<()> {
    sqlx::query(
        "UPDATE worker_heartbeats SET last_beat_at = now()
         WHERE worker = $1 AND network_class = $2 AND instance_id = $3",
    )
    .bind(&key.worker)
    .bind(&key.network_class)
    .bind(&key.instance_id)
    .execute(pool)
    .await?;
    Ok(())
}
