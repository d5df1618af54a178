//! outbox_retention (docs/deployment.md "PostgreSQL maintenance"): the two outboxes keep rows
//! whose content lives on elsewhere — an audit row once promoted into `audit_events`, a
//! callback once its receiver acknowledged it — and they are deleted once older than the
//! retention. Movements, nodes, node events, artifacts, `audit_events` and dead letters are
//! never deleted here.

use std::time::Duration;

use sqlx::PgConnection;

use crate::Result;

/// What one pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// `audit_outbox` rows promoted before the cut-off.
    pub audit: u64,
    /// `movement_callback_outbox` rows sent before the cut-off that no replay names.
    pub callbacks: u64,
}

impl Pruned {
    pub fn total(&self) -> u64 {
        self.audit + self.callbacks
    }
}

/// Deletes up to `batch` rows of each outbox older than `older_than` (oldest first). Rows
/// another pass holds are skipped, so replicas share the work; a pass is one statement.
pub async fn prune_outboxes(conn: &mut PgConnection, older_than: Duration, batch: i64) -> Result<Pruned> {
    let row = sqlx::query!(
        r#"WITH cut AS (SELECT now() - make_interval(secs => $1::float8) AS at),
         audit AS (
             DELETE FROM audit_outbox WHERE id IN (
                 SELECT a.id FROM audit_outbox a, cut
                 WHERE a.promoted_at IS NOT NULL AND a.promoted_at < cut.at
                 ORDER BY a.id LIMIT $2 FOR UPDATE OF a SKIP LOCKED)
             RETURNING 1
         ), callbacks AS (
             DELETE FROM movement_callback_outbox WHERE id IN (
                 SELECT c.id FROM movement_callback_outbox c, cut
                 WHERE c.status = 'sent' AND c.sent_at < cut.at
                   AND NOT EXISTS (SELECT 1 FROM movement_callback_outbox r WHERE r.replay_of = c.id)
                 ORDER BY c.sent_at LIMIT $2 FOR UPDATE OF c SKIP LOCKED)
             RETURNING 1
         )
         SELECT (SELECT count(*) FROM audit) AS "audit!", (SELECT count(*) FROM callbacks) AS "callbacks!""#,
        older_than.as_secs_f64(),
        batch
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Pruned { audit: row.audit as u64, callbacks: row.callbacks as u64 })
}
