//! executor_health: calls `health()` on every registered executor and signer (local and
//! remote), records up / down / unknown (not implemented), creates missing rows, marks rows
//! whose key left the registry `orphan`, and is the sole writer of a signer's observed
//! address (validated, lowercase, non-zero).

use qtg_executor::ExecutorError;
use qtg_store::health;
use serde_json::Value;

use crate::calls::with_deadline;
use crate::{Engine, Result};

/// `0x` + 40 hex, lowercased, not all zero; `None` otherwise.
pub fn canonical_address(v: &str) -> Option<String> {
    let lower = v.trim().to_ascii_lowercase();
    let hex = lower.strip_prefix("0x")?;
    (hex.len() == 40 && hex.chars().all(|c| c.is_ascii_hexdigit()) && hex.chars().any(|c| c != '0')).then_some(lower)
}

fn state(res: &std::result::Result<Option<Value>, ExecutorError>) -> (&'static str, Option<String>) {
    match res {
        Ok(_) => ("up", None),
        Err(ExecutorError::NotImplemented) => ("unknown", None),
        Err(e) => ("down", Some(e.to_string())),
    }
}

impl Engine {
    pub async fn refresh_health_tick(&self) -> Result<usize> {
        let deadline = self.settings.executor_timeout;
        let mut executors = Vec::new();
        for e in self.registry.executors() {
            let (res, _) = with_deadline("health", deadline, e.executor.health()).await;
            executors.push((e.key.clone(), e.transport.as_str(), e.lane.as_str(), state(&res)));
        }
        let mut signers = Vec::new();
        for s in self.registry.signers() {
            let (res, _) = with_deadline("signer_health", deadline, s.signer.health()).await;
            let observed = match &res {
                Ok(Some(d)) => match d.get("signer_address").and_then(Value::as_str) {
                    Some(a) => {
                        let c = canonical_address(a);
                        if c.is_none() {
                            tracing::warn!(
                                signer_key = %s.key, address = %a,
                                "signer reports an invalid address; not recorded"
                            );
                        }
                        c
                    }
                    None => None,
                },
                _ => None,
            };
            signers.push((s.key.clone(), s.transport.as_str(), state(&res), observed));
        }
        let mut tx = self.pool.begin().await?;
        for (key, transport, lane, (st, err)) in &executors {
            health::record_executor(&mut tx, key, transport, lane, st, err.as_deref()).await?;
            if *st == "down" {
                tracing::warn!(executor_key = %key, error = err.as_deref().unwrap_or(""), "executor is down");
            }
        }
        for (key, transport, (st, err), observed) in &signers {
            health::record_signer(&mut tx, key, transport, st, err.as_deref(), observed.as_deref()).await?;
        }
        let exec_keys: Vec<String> = executors.iter().map(|e| e.0.clone()).collect();
        let signer_keys: Vec<String> = signers.iter().map(|s| s.0.clone()).collect();
        health::mark_orphans(&mut tx, &exec_keys, &signer_keys).await?;
        tx.commit().await?;
        Ok(executors.len() + signers.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_validated_and_lowercased() {
        assert_eq!(
            canonical_address("0xABCDEF0123456789abcdef0123456789ABCDEF01").as_deref(),
            Some("0xabcdef0123456789abcdef0123456789abcdef01")
        );
        assert_eq!(canonical_address("0x0000000000000000000000000000000000000000"), None);
        assert_eq!(canonical_address("0x1234"), None);
        assert_eq!(canonical_address("abcdef0123456789abcdef0123456789abcdef01"), None);
    }
}
