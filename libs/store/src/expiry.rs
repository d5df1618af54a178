//! Expiry pickups: movements past their approval window, template proposals past their
//! review window. Single-table pickups lock in the pickup query (`LIMIT n … SKIP LOCKED`).

use sqlx::PgConnection;
use uuid::Uuid;

use crate::Result;

/// Locks up to `limit` PENDING_APPROVAL movements whose `expires_at` has passed.
pub async fn lock_expired_movements(conn: &mut PgConnection, limit: i64) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM movement_requests
         WHERE request_state = 'PENDING_APPROVAL' AND expires_at IS NOT NULL AND expires_at < now()
         LIMIT $1 FOR UPDATE SKIP LOCKED",
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Marks up to `limit` pending template proposals past their review window `expired`, with
/// an audit row each. Returns their ids.
pub async fn expire_template_proposals(conn: &mut PgConnection, limit: i64, actor: &str) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar!(
        r#"WITH expired AS (
             UPDATE template_proposals SET status = 'expired', updated_at = now()
             WHERE id IN (SELECT id FROM template_proposals WHERE status = 'pending' AND expires_at < now()
                          LIMIT $1 FOR UPDATE SKIP LOCKED)
             RETURNING id, template_key
         ), aud AS (
             INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, data)
             SELECT gen_random_uuid(), $2, 'template_proposal.expire', 'template_proposal', id::text,
                    jsonb_build_object('template_key', template_key)
             FROM expired
         )
         SELECT id AS "id!" FROM expired"#,
        limit,
        actor
    )
    .fetch_all(&mut *conn)
    .await?)
}
