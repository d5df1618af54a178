//! evm_nonce_reaper: gives back EVM nonces that prepare reserved but nothing ever signed or
//! broadcast with, once they are `MG_EVM_NONCE_REAPER_AGE_SECONDS` old, so an abandoned
//! reservation does not leave a gap that strands every later transaction of its address.

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
}
