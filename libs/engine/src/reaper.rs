//! evm_nonce_reaper: gives back EVM nonces that prepare reserved but nothing ever signed or
//! broadcast with, once they are `MG_EVM_NONCE_REAPER_AGE_SECONDS` old, so an abandoned
//! reservation does not leave a gap that strands every later transaction of its address.

use qtg_core::markers::MANUAL_REVIEW_REQUIRED;
use qtg_core::{codes, NodeState};
use qtg_store::transition::{self, Meta, NodePatch};
use serde_json::json;

use crate::advance::apply_request_state;
use crate::{Engine, Result};

/// Reservations one tick reclaims at most.
const REAP_BATCH: i64 = 100;

impl Engine {
    pub async fn reap_nonces_tick(&self) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let reclaimed =
            qtg_store::evm::reclaim(&mut tx, self.settings.evm_nonce_reaper_age.as_secs_f64(), &self.actor, REAP_BATCH)
                .await?;
        tx.commit().await?;
        for r in &reclaimed {
            tracing::info!(
                chain_id = r.chain_id, address = %r.address, nonce = r.nonce, request_node_id = ?r.request_node_id,
                "reclaimed an EVM nonce reservation nothing was signed or broadcast with"
            );
        }
        Ok(reclaimed.len())
    }

    /// ccip_stranded_reaper: one transaction ends what is stranded (each intent taken by one
    /// replica, `SKIP LOCKED`): intents never broadcast whose node is no longer in flight and
    /// can hold no signature are released (and their nonce, by the EVM rules); a message that
    /// left but shows no execution past `MG_CCIP_STRANDED_REAPER_AGE_SECONDS` hands the
    /// movement's open delivery node to a person (UNKNOWN, `CCIP_EXECUTION_OVERDUE`). Audited.
    pub async fn reap_ccip_tick(&self) -> Result<usize> {
        let age = self.settings.ccip_stranded_age.as_secs_f64();
        let mut tx = self.pool.begin().await?;
        let released = qtg_store::ccip::release_stranded(&mut tx, age, &self.actor, REAP_BATCH).await?;
        let escalated = qtg_store::ccip::escalate_overdue(&mut tx, age, &self.actor, REAP_BATCH).await?;
        for e in &escalated {
            let (Some(movement), Some(message_id)) = (e.request_id, e.message_id.as_deref()) else { continue };
            for node in qtg_store::ccip::delivery_nodes(&mut tx, movement, message_id).await? {
                let mut patch = NodePatch::error(
                    codes::CCIP_EXECUTION_OVERDUE,
                    format!(
                        "message {} shows no execution on the destination {age} s after it left: a person decides \
                         (the message may still be executed; never re-send)",
                        e.message_id.as_deref().unwrap_or("?")
                    ),
                );
                patch.merge_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("ccip_execution_overdue"));
                transition::transition_node(
                    &mut tx,
                    node,
                    NodeState::Observing,
                    NodeState::Unknown,
                    &patch,
                    &Meta::actor(&self.actor),
                )
                .await?
                .or_stale()?;
            }
            apply_request_state(&mut tx, movement, &self.actor).await?;
        }
        tx.commit().await?;
        for r in &released {
            tracing::info!(
                chain_id = r.chain_id, nonce = r.nonce, request_node_id = %r.request_node_id,
                "released a CCIP send intent that was never broadcast"
            );
        }
        for e in &escalated {
            tracing::warn!(
                message_id = ?e.message_id, request_node_id = %e.request_node_id,
                "a CCIP message shows no execution past the age threshold: handed to a person"
            );
        }
        Ok(released.len() + escalated.len())
    }
}
