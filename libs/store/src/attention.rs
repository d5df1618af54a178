//! What needs a person now, counted in one statement: the console's attention view and the
//! counts in its navigation.

use serde::Serialize;
use sqlx::PgConnection;

use crate::Result;

/// Counts of what waits for a person; each names the list that shows the rows.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attention {
    /// Movements with a node in UNKNOWN (recovery's, then a person's).
    pub unknown: i64,
    /// Movements in MANUAL_INTERVENTION.
    pub manual_intervention: i64,
    /// Movements in WAITING_MANUAL_ACTION (a manual node is READY).
    pub waiting_manual_action: i64,
    /// Movements in PENDING_APPROVAL.
    pub pending_approval: i64,
    /// Movements waiting for the caller's approval (not created by them, not approved by them,
    /// not expired); 0 for a caller who cannot approve.
    pub awaiting_my_approval: i64,
    /// Dead-lettered callbacks not replayed yet.
    pub dlq: i64,
    /// Capital transfers in NEEDS_ATTENTION.
    pub capital_transfers: i64,
    /// Worker instances whose heartbeat is stale (and not yet gone).
    pub stale_workers: i64,
    /// Drift scopes whose last check found drift or failed.
    pub drift: i64,
    /// Active kill-switch pauses.
    pub paused: i64,
    /// Executors and signers whose health is down.
    pub down: i64,
    /// Venue withdrawals no movement explains.
    pub unexplained_withdrawals: i64,
}

/// The counts for `principal`; a heartbeat older than `stale_after_seconds` is stale, one
/// older than `gone_after_seconds` is an instance that is gone (no longer counted).
pub async fn counts(
    conn: &mut PgConnection,
    principal: &str,
    stale_after_seconds: f64,
    gone_after_seconds: f64,
) -> Result<Attention> {
    let r = sqlx::query!(
        r#"SELECT
             (SELECT count(DISTINCT n.request_id) FROM movement_request_nodes n
               WHERE n.node_state = 'UNKNOWN') AS "unknown!",
             (SELECT count(*) FROM movement_requests WHERE request_state = 'MANUAL_INTERVENTION') AS "manual!",
             (SELECT count(*) FROM movement_requests WHERE request_state = 'WAITING_MANUAL_ACTION') AS "waiting!",
             (SELECT count(*) FROM movement_requests WHERE request_state = 'PENDING_APPROVAL') AS "pending!",
             (SELECT count(*) FROM movement_requests m
               WHERE m.request_state = 'PENDING_APPROVAL' AND lower(m.created_by) <> lower($1)
                 AND (m.expires_at IS NULL OR m.expires_at > now())
                 AND NOT EXISTS (SELECT 1 FROM movement_approvals a
                                  WHERE a.request_id = m.id AND lower(a.approver) = lower($1))) AS "mine!",
             (SELECT count(*) FROM movement_callback_outbox c WHERE c.status = 'dlq'
                 AND NOT EXISTS (SELECT 1 FROM movement_callback_outbox r WHERE r.replay_of = c.id)) AS "dlq!",
             (SELECT count(*) FROM capital_transfer_requests WHERE state = 'NEEDS_ATTENTION') AS "capital!",
             (SELECT count(*) FROM worker_heartbeats
               WHERE last_beat_at < now() - make_interval(secs => $2)
                 AND last_beat_at >= now() - make_interval(secs => $3)) AS "stale!",
             (SELECT count(*) FROM drift_checks WHERE status IN ('drift', 'error')) AS "drift!",
             (SELECT count(*) FROM dispatch_pauses) AS "paused!",
             (SELECT count(*) FROM executors WHERE health_state = 'down')
               + (SELECT count(*) FROM signers WHERE health_state = 'down') AS "down!",
             (SELECT count(*) FROM venue_transfers
               WHERE direction = 'withdrawal' AND movement_id IS NULL) AS "unexplained!""#,
        principal,
        stale_after_seconds,
        gone_after_seconds,
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Attention {
        unknown: r.unknown,
        manual_intervention: r.manual,
        waiting_manual_action: r.waiting,
        pending_approval: r.pending,
        awaiting_my_approval: r.mine,
        dlq: r.dlq,
        capital_transfers: r.capital,
        stale_workers: r.stale,
        drift: r.drift,
        paused: r.paused,
        down: r.down,
        unexplained_withdrawals: r.unexplained,
    })
}
