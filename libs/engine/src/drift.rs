//! verify_drift: re-reads the on-chain facts the lanes rely on (each registry entry's
//! [`DriftSource`], each signer's address) with bounded concurrency and a deadline
//! per executor, groups them by scope (a chain, `evm:<id>`, or `signers`) and compares each
//! scope with the baseline an admin recorded. A new set of differences writes, in one
//! transaction, the check, an audit row (`drift.detected`), a `drift_detected` callback and —
//! with `MG_VERIFY_DRIFT_PAUSE` — a kill-switch pause of every executor of the scope.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use qtg_executor::{DriftFact, DriftSource};
use qtg_store::audit::{self, AuditRecord};
use qtg_store::drift::{self, Observation};
use serde_json::{json, Value};

use crate::{Engine, Result};

/// The scope of the signers' addresses.
pub const SIGNERS_SCOPE: &str = "signers";

#[derive(Debug, Clone)]
pub struct DriftSettings {
    /// `MG_VERIFY_DRIFT_PAUSE`: pause the executors of a drifted scope.
    pub pause: bool,
    /// `MG_VERIFY_DRIFT_CONCURRENCY`: executors read at once.
    pub concurrency: usize,
    /// `MG_VERIFY_DRIFT_TIMEOUT_SECONDS`: one executor's reads.
    pub timeout: Duration,
    /// `MG_DRIFT_ALERT_URL`, else `MG_CALLBACK_DEFAULT_URL`: where `drift_detected` goes.
    pub alert_url: Option<String>,
}

impl Default for DriftSettings {
    fn default() -> Self {
        DriftSettings { pause: false, concurrency: 4, timeout: Duration::from_secs(30), alert_url: None }
    }
}

/// What one scope showed: fact → value, and the executors that rely on it.
#[derive(Default)]
struct Seen {
    facts: BTreeMap<String, String>,
    executors: BTreeSet<String>,
}

/// The differences of `observed` from `baseline`: every baseline fact the scope no longer
/// shows with its value (a fact observed but not in the baseline is new configuration, not
/// drift), and every fact whose read reverted ([`DriftFact::UNREADABLE`]), baselined or not,
/// whatever the baseline holds. With `incomplete` (an executor that reported the scope could
/// not be read), a fact not observed at all is no difference.
pub fn differences(
    baseline: &BTreeMap<String, String>,
    observed: &BTreeMap<String, String>,
    incomplete: bool,
) -> Vec<Value> {
    let changed = baseline
        .iter()
        .filter(|(fact, value)| match observed.get(*fact) {
            Some(v) => v != *value || v == DriftFact::UNREADABLE,
            None => !incomplete,
        })
        .map(|(fact, value)| json!({"fact": fact, "baseline": value, "observed": observed.get(fact)}));
    let unreadable = observed
        .iter()
        .filter(|(fact, v)| *v == DriftFact::UNREADABLE && !baseline.contains_key(*fact))
        .map(|(fact, v)| json!({"fact": fact, "baseline": null, "observed": v}));
    changed.chain(unreadable).collect()
}

impl Engine {
    /// One check of every scope; the number of scopes checked.
    pub async fn verify_drift_tick(&self) -> Result<usize> {
        self.drift_tick(None).await
    }

    /// ccip_drift: the same check over the CCIP lane's executors only (`exec.ccip.*`), whose
    /// facts have scopes of their own (`ccip:<chain id>`), at its own pace.
    pub async fn ccip_drift_tick(&self) -> Result<usize> {
        self.drift_tick(Some("exec.ccip.")).await
    }

    /// One check of the scopes the executors whose key starts with `only` report (all
    /// executors and signers when `None`).
    async fn drift_tick(&self, only: Option<&str>) -> Result<usize> {
        // The database's clock before anything is read: a check recorded after it by another
        // replica is newer than what this tick reads.
        let started = {
            let mut conn = self.pool.acquire().await?;
            drift::now(&mut conn).await?
        };
        let (seen, failures, read) = self.read_drift_facts(only).await;
        {
            let mut conn = self.pool.acquire().await?;
            for source in &read {
                drift::clear_error(&mut conn, source).await?;
            }
        }
        for (source, error) in &failures {
            tracing::warn!(source = %source, %error, "verify_drift could not read the facts of an executor or signer");
            let mut conn = self.pool.acquire().await?;
            let key = source.split_once(':').map(|(_, k)| k.to_string()).unwrap_or_default();
            let o = Observation {
                scope: source,
                status: "error",
                observed: json!({}),
                differences: json!([]),
                executor_keys: vec![key],
                error: Some(error.clone()),
                alerted: false,
            };
            drift::record_check(&mut conn, &o).await?;
        }
        // An executor that could not be read this time leaves its facts unobserved: the scopes
        // it reported before (a signer: the signers' scope) are not judged on this tick.
        let unread: BTreeSet<String> =
            failures.iter().filter_map(|(s, _)| s.strip_prefix("executor:").map(str::to_string)).collect();
        let signer_unread = failures.iter().any(|(s, _)| s.starts_with("signer:"));
        for (scope, seen) in &seen {
            let skip = scope == SIGNERS_SCOPE && signer_unread;
            self.record_drift(scope, seen, &unread, skip, started).await?;
        }
        Ok(seen.len())
    }

    /// Every local executor's facts and every signer's address, `concurrency` at a time, each
    /// executor within the deadline. Also: what failed (`executor:<key>` / `signer:<key>`),
    /// with why, and what was read.
    async fn read_drift_facts(
        &self,
        only: Option<&str>,
    ) -> (BTreeMap<String, Seen>, Vec<(String, String)>, Vec<String>) {
        let settings = &self.settings.drift;
        let gate = Arc::new(tokio::sync::Semaphore::new(settings.concurrency.max(1)));
        let mut reads = tokio::task::JoinSet::new();
        for e in self.registry.executors() {
            if only.is_some_and(|prefix| !e.key.starts_with(prefix)) {
                continue;
            }
            let Some(source) = e.drift.clone() else { continue };
            let (key, gate, timeout) = (e.key.clone(), gate.clone(), settings.timeout);
            reads.spawn(async move {
                let _permit = gate.acquire_owned().await;
                let res = match tokio::time::timeout(timeout, read_facts(source)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {} s", timeout.as_secs_f64())),
                };
                (format!("executor:{key}"), key, res)
            });
        }
        for s in self.registry.signers().filter(|_| only.is_none()) {
            let (key, signer, gate, timeout) = (s.key.clone(), s.signer.clone(), gate.clone(), settings.timeout);
            reads.spawn(async move {
                let _permit = gate.acquire_owned().await;
                let res = match tokio::time::timeout(timeout, signer.health()).await {
                    Ok(Ok(details)) => Ok(details
                        .as_ref()
                        .and_then(|d| d.get("signer_address"))
                        .and_then(Value::as_str)
                        .map(|a| DriftFact {
                            scope: SIGNERS_SCOPE.into(),
                            fact: format!("{key}.address"),
                            value: a.to_ascii_lowercase(),
                        })
                        .into_iter()
                        .collect()),
                    // A signer that reports no health has no address to compare.
                    Ok(Err(qtg_executor::ExecutorError::NotImplemented)) => Ok(Vec::new()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {} s", timeout.as_secs_f64())),
                };
                (format!("signer:{key}"), key, res)
            });
        }
        let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
        let mut failures = Vec::new();
        let mut read = Vec::new();
        while let Some(done) = reads.join_next().await {
            match done {
                Ok((source, key, Ok(facts))) => {
                    read.push(source);
                    for f in facts {
                        let s = seen.entry(f.scope).or_default();
                        s.facts.insert(f.fact, f.value);
                        if self.registry.executor(&key).is_some() {
                            s.executors.insert(key.clone());
                        }
                    }
                }
                Ok((source, _, Err(e))) => failures.push((source, e)),
                Err(e) => failures.push(("task".into(), e.to_string())),
            }
        }
        (seen, failures, read)
    }

    /// Compares one scope with its baseline and records the check; a new set of differences
    /// is alerted (audit, callback, pause) in the same transaction, once across replicas.
    async fn record_drift(
        &self,
        scope: &str,
        seen: &Seen,
        unread: &BTreeSet<String>,
        skip: bool,
        started: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let previous = drift::lock_check(&mut tx, scope).await?;
        let incomplete = skip
            || previous.as_ref().is_some_and(|p| {
                p.executor_keys.as_array().into_iter().flatten().filter_map(Value::as_str).any(|k| unread.contains(k))
            });
        // Not all of the scope was read, or another replica recorded a newer check meanwhile:
        // the last check stands (no false "ok", no alert from an older read).
        if incomplete || previous.as_ref().is_some_and(|p| p.checked_at >= started) {
            tracing::debug!(scope, incomplete, "drift check of the scope left as it stands");
            tx.rollback().await?;
            return Ok(());
        }
        let baseline = drift::baseline(&mut tx, scope).await?;
        let diffs = differences(&baseline, &seen.facts, false);
        // Without a baseline the only differences are facts that could not be read: a drift
        // already (the contract is not the one the lane expects).
        let status = if !diffs.is_empty() {
            "drift"
        } else if baseline.is_empty() {
            "unbaselined"
        } else {
            "ok"
        };
        let differences = Value::Array(diffs.clone());
        let new = status == "drift"
            && previous
                .as_ref()
                .is_none_or(|p| p.status != "drift" || p.differences != differences || p.alerted_at.is_none());
        let executor_keys: Vec<String> = seen.executors.iter().cloned().collect();
        let o = Observation {
            scope,
            status,
            observed: json!(seen.facts),
            differences: differences.clone(),
            executor_keys: executor_keys.clone(),
            error: None,
            alerted: new,
        };
        drift::record_check(&mut tx, &o).await?;
        if new {
            let paused: Vec<&String> =
                if self.settings.drift.pause { executor_keys.iter().collect() } else { Vec::new() };
            let reason = format!("verify_drift: {} fact(s) of {scope} differ from the baseline", diffs.len());
            for key in &paused {
                let (_, created) = qtg_store::controls::pause(&mut tx, "executor", key, &reason, &self.actor).await?;
                audit::record(
                    &mut tx,
                    &AuditRecord {
                        actor: &self.actor,
                        action: "control.pause",
                        entity_type: "control",
                        entity_id: format!("executor:{key}"),
                        movement_id: None,
                        data: json!({"scope": "executor", "target": key, "reason": reason, "new": created}),
                    },
                )
                .await?;
            }
            let data = json!({"scope": scope, "differences": differences, "executor_keys": executor_keys,
                              "paused_executors": paused});
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor: &self.actor,
                    action: "drift.detected",
                    entity_type: "chain",
                    entity_id: scope.to_string(),
                    movement_id: None,
                    data: data.clone(),
                },
            )
            .await?;
            if let Some(url) = &self.settings.drift.alert_url {
                qtg_store::callbacks::enqueue_event(&mut tx, None, "drift_detected", url, &data).await?;
            }
            tracing::error!(scope, differences = %differences, paused = ?paused,
                "on-chain facts differ from the recorded baseline");
        }
        tx.commit().await?;
        Ok(())
    }
}

async fn read_facts(source: Arc<dyn DriftSource>) -> std::result::Result<Vec<DriftFact>, String> {
    source.facts().await.map_err(|e| e.to_string())
}

impl Engine {
    /// An admin records the baseline of `scope`: `facts` as given, or else what the last check
    /// of the scope observed (the enrolment: the facts as they stand now are the right ones).
    /// Audited; the next check compares against it.
    pub async fn record_drift_baseline(
        &self,
        actor: &str,
        scope: &str,
        facts: Option<BTreeMap<String, String>>,
        reason: &str,
    ) -> std::result::Result<BTreeMap<String, String>, crate::movements::OpError> {
        use crate::movements::{finish, OpError};
        if scope.is_empty() || scope.starts_with("executor:") || scope.starts_with("signer:") {
            return Err(OpError::Validation(
                "scope must name a checked scope (evm:<chain id>, ccip:<chain id> or signers)".into(),
            ));
        }
        let mut tx = self.pool.begin().await?;
        let res = async {
            // Serialised with the checks of the scope (they lock the same row).
            let check =
                drift::lock_existing(&mut tx, scope).await?.ok_or(OpError::NotFound("drift check of this scope"))?;
            let facts = match facts {
                Some(f) if f.is_empty() => return Err(OpError::Validation("facts is empty".into())),
                Some(f)
                    if f.iter().any(|(k, v)| {
                        k.trim().is_empty() || v.trim().is_empty() || k.len() > 200 || v.len() > 2000
                    }) =>
                {
                    return Err(OpError::Validation(
                        "every fact needs a name (at most 200) and a value (at most 2000)".into(),
                    ))
                }
                Some(f) => f,
                None => {
                    let observed: BTreeMap<String, String> = serde_json::from_value(check.observed).unwrap_or_default();
                    if observed.is_empty() {
                        return Err(OpError::InvalidState(format!(
                            "the last check of {scope} observed nothing ({}): nothing to record",
                            check.status
                        )));
                    }
                    observed
                }
            };
            drift::set_baseline(&mut tx, scope, &facts, actor).await?;
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor,
                    action: "drift.baseline",
                    entity_type: "chain",
                    entity_id: scope.to_string(),
                    movement_id: None,
                    data: json!({"scope": scope, "facts": facts, "reason": reason}),
                },
            )
            .await?;
            tracing::info!(scope, actor, facts = facts.len(), "drift baseline recorded");
            Ok(facts)
        }
        .await;
        finish(tx, res).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_or_missing_baseline_fact_is_a_difference_a_new_one_is_not() {
        let m = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let baseline = m(&[("code_hash", "0xaa"), ("decimals", "6"), ("attester", "0x01")]);
        let observed = m(&[("code_hash", "0xbb"), ("decimals", "6"), ("remote.2", "0x02")]);
        let d = differences(&baseline, &observed, false);
        assert_eq!(
            d,
            vec![
                json!({"fact": "attester", "baseline": "0x01", "observed": null}),
                json!({"fact": "code_hash", "baseline": "0xaa", "observed": "0xbb"}),
            ]
        );
        assert!(differences(&baseline, &baseline, false).is_empty());
        // An executor of the scope unread: what was not observed is not evidence.
        assert_eq!(differences(&baseline, &observed, true), vec![d[1].clone()]);
    }

    /// A read that reverted is a difference on every check: baselined as "reverted" or not
    /// baselined at all, it never goes quiet.
    #[test]
    fn a_fact_that_cannot_be_read_is_always_a_difference() {
        let m = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let baseline = m(&[("threshold", "reverted"), ("decimals", "6")]);
        let observed = m(&[("threshold", "reverted"), ("decimals", "6"), ("owner", "reverted")]);
        assert_eq!(
            differences(&baseline, &observed, false),
            vec![
                json!({"fact": "threshold", "baseline": "reverted", "observed": "reverted"}),
                json!({"fact": "owner", "baseline": null, "observed": "reverted"}),
            ]
        );
        assert_eq!(differences(&BTreeMap::new(), &observed, false).len(), 2);
    }
}
