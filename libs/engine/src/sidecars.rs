//! The sidecar ticks that need no executor: approval expiry, template-proposal expiry, audit
//! promotion and the outboxes' retention.

use qtg_core::RequestState;
use qtg_store::transition::{self, Meta, RequestPatch};
use qtg_store::{audit, expiry};

use crate::{Engine, Result};

/// Movements expired per tick (seed: 20).
pub const EXPIRY_BATCH: i64 = 20;
/// Template proposals expired per tick.
pub const PROPOSAL_EXPIRY_BATCH: i64 = 20;
/// Outbox rows promoted per tick.
pub const AUDIT_BATCH: i64 = 500;
/// Rows of each outbox deleted per retention pass (a pass that deletes some is followed by
/// another at once).
pub const RETENTION_BATCH: i64 = 2000;

impl Engine {
    /// PENDING_APPROVAL past `expires_at` → approval rejected, request EXPIRED,
    /// `request_expired` callback.
    pub async fn expire_movements_tick(&self) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let ids = expiry::lock_expired_movements(&mut tx, EXPIRY_BATCH).await?;
        let patch = RequestPatch { approval_status: Some("rejected"), ..Default::default() };
        let meta = Meta::actor(&self.actor).with_reason("approval window passed");
        for id in &ids {
            transition::transition_request(
                &mut tx,
                *id,
                RequestState::PendingApproval,
                RequestState::Expired,
                &patch,
                &meta,
            )
            .await?
            .or_stale()?;
            tracing::info!(movement_id = %id, "movement expired before approval");
        }
        tx.commit().await?;
        Ok(ids.len())
    }

    /// Pending template proposals past their review window → expired.
    pub async fn expire_template_proposals_tick(&self) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let ids = expiry::expire_template_proposals(&mut tx, PROPOSAL_EXPIRY_BATCH, &self.actor).await?;
        tx.commit().await?;
        for id in &ids {
            tracing::info!(proposal_id = %id, "template proposal expired");
        }
        Ok(ids.len())
    }

    /// `audit_outbox` → `audit_events`, in order, exactly once (one promoter at a time).
    pub async fn promote_audit_tick(&self) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let n = audit::promote(&mut tx, AUDIT_BATCH).await?;
        tx.commit().await?;
        Ok(n as usize)
    }

    /// outbox_retention: promoted audit rows and acknowledged callbacks older than
    /// `MG_OUTBOX_RETENTION_SECONDS` are deleted, a batch of each per pass.
    pub async fn prune_outboxes_tick(&self) -> Result<usize> {
        let mut conn = self.pool.acquire().await?;
        let pruned =
            qtg_store::retention::prune_outboxes(&mut conn, self.settings.outbox_retention, RETENTION_BATCH).await?;
        if pruned.total() > 0 {
            tracing::info!(
                audit = pruned.audit,
                callbacks = pruned.callbacks,
                "outbox rows past their retention deleted"
            );
        }
        Ok(pruned.total() as usize)
    }
}
