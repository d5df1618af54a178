//! The signals an on-call person pages on, read from the database (every process exports
//! them; alert on `max`).

use sqlx::PgPool;

use crate::Result;

#[derive(Debug, Clone, Default)]
pub struct Signals {
    pub oldest_unknown_node_age_seconds: f64,
    pub oldest_stale_submitting_node_age_seconds: f64,
    pub oldest_manual_intervention_age_seconds: f64,
    pub callback_dlq_size: i64,
    pub callback_backlog: i64,
    pub audit_backlog: i64,
    /// Per worker: seconds since its newest heartbeat (any replica).
    pub heartbeat_age_seconds: Vec<(String, f64)>,
    /// Per executor key: seconds the oldest READY node of a movement that may run (approved or
    /// executing, no pause holding it) has waited for a dispatcher — a live dispatcher serving
    /// the key takes one within seconds.
    pub ready_age_by_executor: Vec<(String, f64)>,
    /// Seconds the oldest OBSERVING node has been observing (since its submit).
    pub oldest_observing_node_age_seconds: f64,
    /// Per drift scope (a chain, the signers): baseline facts its last check found changed.
    pub drift_differences_by_scope: Vec<(String, i64)>,
}

/// `stale_after_seconds`: a SUBMITTING node older than this (the recovery grace) is stale.
pub async fn read(pool: &PgPool, stale_after_seconds: f64) -> Result<Signals> {
    let r = sqlx::query!(
        r#"SELECT
           COALESCE((SELECT extract(epoch FROM now() - min(started_at))::float8 FROM movement_request_nodes
                     WHERE node_state = 'UNKNOWN'), 0) AS "unknown_age!",
           COALESCE((SELECT extract(epoch FROM now() - min(started_at))::float8 FROM movement_request_nodes
                     WHERE node_state = 'SUBMITTING' AND started_at < now() - make_interval(secs => $1)), 0)
                    AS "stale_submitting_age!",
           COALESCE((SELECT extract(epoch FROM now() - min(updated_at))::float8 FROM movement_requests
                     WHERE request_state IN ('MANUAL_INTERVENTION', 'WAITING_MANUAL_ACTION')), 0) AS "manual_age!",
           (SELECT count(*) FROM movement_callback_outbox WHERE status = 'dlq') AS "dlq!",
           (SELECT count(*) FROM movement_callback_outbox WHERE status = 'pending') AS "callback_backlog!",
           (SELECT count(*) FROM audit_outbox WHERE promoted_at IS NULL) AS "audit_backlog!""#,
        stale_after_seconds,
    )
    .fetch_one(pool)
    .await?;
    // The pause test is the one of `controls` (PAUSED), handed to the macro as literals.
    let ready = crate::controls::holding_pauses!(
        sqlx::query!,
        r#"SELECT p.executor_key, extract(epoch FROM now() - min(n.updated_at))::float8 AS "age!"
         FROM movement_request_nodes n
         JOIN movement_requests r ON r.id = n.request_id
         JOIN plan_nodes p ON p.id = n.plan_node_id
         WHERE n.node_state = 'READY' AND n.node_kind <> 'manual'
           AND r.request_state IN ('APPROVED', 'EXECUTING') AND NOT EXISTS ("#,
        "1",
        ")
         GROUP BY p.executor_key ORDER BY p.executor_key"
    )
    .fetch_all(pool)
    .await?;
    let observing: f64 = sqlx::query_scalar!(
        r#"SELECT COALESCE(extract(epoch FROM now() - min(started_at))::float8, 0) AS "age!" FROM movement_request_nodes
         WHERE node_state = 'OBSERVING'"#,
    )
    .fetch_one(pool)
    .await?;
    let beats = sqlx::query!(
        r#"SELECT worker, extract(epoch FROM now() - max(last_beat_at))::float8 AS "age!" FROM worker_heartbeats
         GROUP BY worker ORDER BY worker"#,
    )
    .fetch_all(pool)
    .await?;
    let drift = sqlx::query!(
        r#"SELECT scope, jsonb_array_length(differences)::int8 AS "differences!" FROM drift_checks ORDER BY scope"#,
    )
    .fetch_all(pool)
    .await?;
    Ok(Signals {
        drift_differences_by_scope: drift.into_iter().map(|b| (b.scope, b.differences)).collect(),
        oldest_unknown_node_age_seconds: r.unknown_age,
        oldest_stale_submitting_node_age_seconds: r.stale_submitting_age,
        oldest_manual_intervention_age_seconds: r.manual_age,
        callback_dlq_size: r.dlq,
        callback_backlog: r.callback_backlog,
        audit_backlog: r.audit_backlog,
        heartbeat_age_seconds: beats.into_iter().map(|b| (b.worker, b.age)).collect(),
        ready_age_by_executor: ready.into_iter().map(|b| (b.executor_key, b.age)).collect(),
        oldest_observing_node_age_seconds: observing,
    })
}
