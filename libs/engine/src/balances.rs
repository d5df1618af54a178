//! balance_snapshot: every registered balance fetcher read (with a deadline each, at once),
//! each venue's balances appended in its own transaction — a fetcher that fails, or whose
//! numbers the database refuses, loses only its own venue — then snapshots older than the
//! retention deleted. `GET /v3/balances?fresh=true` reads through the same fetchers. Where
//! money leaves, a movement is refused when the latest fresh-enough snapshot of its source
//! holds less than its amount.

use std::time::Duration;

use qtg_store::balances::{self, Granularity};
use serde_json::Value;

use crate::movements::OpError;
use crate::{Engine, Result};

/// How long after an hour ends it is rolled: a snapshot's time is its transaction's start, so
/// one committing just after the hour may still belong to it.
pub const ROLLUP_LAG: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct BalanceSettings {
    /// `MG_BALANCE_SNAPSHOT_RETENTION_SECONDS`: snapshots older than this are deleted.
    pub retention: Duration,
    /// `MG_BALANCE_STALE_THRESHOLD_SECONDS`: older is `stale`, and no evidence at creation.
    pub stale: Duration,
    /// `MG_BALANCE_FETCH_TIMEOUT_SECONDS`: one fetcher's read.
    pub fetch_timeout: Duration,
    /// `MG_BALANCE_HISTORY_ENABLED` (true): balance_history_rollup runs, and the snapshot
    /// retention keeps what it has not rolled yet.
    pub history: bool,
    /// `MG_BALANCE_HISTORY_HOURLY_RETENTION_SECONDS` (90 days): hourly rollups kept.
    pub hourly_retention: Duration,
    /// `MG_BALANCE_HISTORY_DAILY_RETENTION_SECONDS` (5 years): daily rollups kept.
    pub daily_retention: Duration,
}

impl Default for BalanceSettings {
    fn default() -> Self {
        BalanceSettings {
            retention: Duration::from_secs(7 * 86_400),
            stale: Duration::from_secs(120),
            fetch_timeout: Duration::from_secs(10),
            history: true,
            hourly_retention: Duration::from_secs(90 * 86_400),
            daily_retention: Duration::from_secs(5 * 365 * 86_400),
        }
    }
}

/// What one read of the fetchers stored, and which venues failed (with why).
#[derive(Debug, Default)]
pub struct Fetched {
    pub stored: Vec<String>,
    pub failed: Vec<(String, String)>,
}

impl Engine {
    /// One snapshot of every venue, then retention; the venues stored.
    pub async fn snapshot_balances_tick(&self) -> Result<usize> {
        let fetched = self.fetch_balances(None, "worker", self.settings.balances.fetch_timeout).await?;
        let mut conn = self.pool.acquire().await?;
        let b = &self.settings.balances;
        let deleted = balances::delete_older_than(&mut conn, b.retention.as_secs_f64(), b.history).await?;
        if deleted > 0 {
            tracing::info!(deleted, "balance snapshots past the retention deleted");
        }
        Ok(fetched.stored.len())
    }

    /// balance_history_rollup: rolls the closed UTC hours out of the snapshots, then the
    /// closed days out of the hours — each granularity in a transaction of its own under its
    /// progress row's lock, skipped when another replica holds it — then deletes rollups past
    /// their retention. Answers the buckets written.
    pub async fn roll_balance_history_tick(&self) -> Result<usize> {
        let mut written = 0;
        for granularity in [Granularity::Hour, Granularity::Day] {
            let mut tx = self.pool.begin().await?;
            let Some(from) = balances::lock_progress(&mut tx, granularity).await? else {
                tracing::debug!(granularity = granularity.as_str(), "another replica is rolling it");
                continue;
            };
            let rolled = match granularity {
                Granularity::Hour => balances::roll_hours(&mut tx, from, ROLLUP_LAG.as_secs_f64()).await?,
                Granularity::Day => balances::roll_days(&mut tx, from).await?,
            };
            tx.commit().await?;
            if rolled.buckets > 0 {
                tracing::info!(
                    granularity = granularity.as_str(), buckets = rolled.buckets,
                    rolled_until = ?rolled.until, "balance history rolled up"
                );
            }
            written += rolled.buckets as usize;
        }
        let b = &self.settings.balances;
        let mut conn = self.pool.acquire().await?;
        for (granularity, keep) in [(Granularity::Hour, b.hourly_retention), (Granularity::Day, b.daily_retention)] {
            let deleted = balances::delete_rollups_older_than(&mut conn, granularity, keep.as_secs_f64()).await?;
            if deleted > 0 {
                tracing::info!(
                    granularity = granularity.as_str(),
                    deleted,
                    "balance rollups past the retention deleted"
                );
            }
        }
        Ok(written)
    }

    /// Reads the fetchers (all, or the one of `venue`) at once, each within `timeout`, and
    /// appends what each answered as `source` snapshots, one transaction per venue.
    pub async fn fetch_balances(&self, venue: Option<&str>, source: &str, timeout: Duration) -> Result<Fetched> {
        let mut reads = tokio::task::JoinSet::new();
        for (key, fetcher) in self.registry.balance_fetchers() {
            if venue.is_some_and(|v| v != key) {
                continue;
            }
            let (key, fetcher) = (key.clone(), fetcher.clone());
            reads.spawn(async move {
                let res = match tokio::time::timeout(timeout, fetcher.fetch()).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {} s", timeout.as_secs_f64())),
                };
                (key, res)
            });
        }
        let mut out = Fetched::default();
        while let Some(done) = reads.join_next().await {
            let (key, res) = match done {
                Ok(r) => r,
                Err(e) => ("task".to_string(), Err(e.to_string())),
            };
            // Every figure a finite non-negative decimal, or none of the venue's answer is stored
            // (an "Infinity" would cover any transfer, a negative one hide a debt).
            let res = res.and_then(|rows| match rows.iter().find_map(not_a_balance) {
                Some(why) => Err(why),
                None => Ok(rows),
            });
            let rows = match res {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(venue_key = %key, error = %e, "balance fetcher failed; the other venues are stored");
                    out.failed.push((key, e));
                    continue;
                }
            };
            let new: Vec<balances::NewBalance<'_>> = rows
                .iter()
                .map(|b| (b.account.as_str(), b.asset.as_str(), b.free.as_str(), b.locked.as_str()))
                .collect();
            let mut tx = self.pool.begin().await?;
            match balances::append(&mut tx, &key, &new, source).await {
                Ok(n) => {
                    tx.commit().await?;
                    tracing::debug!(venue_key = %key, rows = n, source, "balances stored");
                    out.stored.push(key);
                }
                Err(qtg_store::StoreError::Sqlx(sqlx::Error::Database(e))) => {
                    // This venue's numbers only (e.g. not a decimal): rolled back, the others land.
                    tx.rollback().await?;
                    tracing::warn!(
                        venue_key = %key, error = %e,
                        "the venue's balances were refused; the other venues are stored"
                    );
                    out.failed.push((key, format!("its balances could not be stored: {e}")));
                }
                // The database itself: the tick fails as a whole.
                Err(e) => return Err(e),
            }
        }
        out.stored.sort();
        out.failed.sort();
        Ok(out)
    }

    /// The accounts a plan pays from: of the action nodes whose executor names the account it
    /// debits (`Executor::paying_account`), those with no such node upstream (a CCTP mint's
    /// gas is not the movement's money; the burn before it is).
    pub(crate) fn paying_accounts(&self, plan: &qtg_core::PlanDefinition) -> Vec<String> {
        let payer = |key: &str| {
            let n = plan.nodes.iter().find(|n| n.node_key == key)?;
            (n.node_kind != qtg_core::NodeKind::Manual).then_some(())?;
            self.registry.executor(&n.executor_key)?.executor.paying_account(&n.config)
        };
        let mut out: Vec<String> = Vec::new();
        for n in &plan.nodes {
            let Some(account) = payer(&n.node_key) else { continue };
            let upstream_pays = plan.ancestors(&n.node_key).into_iter().any(|a| payer(a).is_some());
            if !upstream_pays && !out.iter().any(|a| a.eq_ignore_ascii_case(&account)) {
                out.push(account);
            }
        }
        out
    }

    /// The account a movement pays from, as its template's executors name it: `source` must
    /// name it (case aside) — what approvers read, the balance check and the audit trail then
    /// name the account that pays. A `source` naming another account is refused; none, when
    /// one account pays, is that account. `source` as given when the executors do not say.
    pub(crate) fn paying_source(
        &self,
        plan: &qtg_core::PlanDefinition,
        source: Option<&str>,
    ) -> std::result::Result<Option<String>, OpError> {
        let payers = self.paying_accounts(plan);
        match (source.map(str::trim).filter(|s| !s.is_empty()), payers.as_slice()) {
            (s, []) => Ok(s.map(str::to_string)),
            (None, [one]) => Ok(Some(one.clone())),
            (None, _) => Ok(None),
            (Some(s), _) => match payers.iter().find(|p| p.eq_ignore_ascii_case(s)) {
                Some(p) => Ok(Some(p.clone())),
                None => Err(OpError::Validation(format!(
                    "source {s:?} is not the account this template pays from ({}): the source is the account \
                     that pays, the one approvers see and the balance check reads",
                    payers.join(", ")
                ))),
            },
        }
    }

    /// Refuses a movement whose source — the account that pays ([`Self::paying_source`]) —
    /// holds less than its amount by the latest snapshot no older than the stale threshold
    /// (`risk_controls.balance_check = false` opts a template out; no such snapshot: not
    /// known, not refused).
    pub(crate) async fn check_source_balance(
        &self,
        conn: &mut sqlx::PgConnection,
        controls: &Value,
        source: Option<&str>,
        intent: &Value,
    ) -> std::result::Result<(), OpError> {
        if controls.get("balance_check").and_then(Value::as_bool) == Some(false) {
            return Ok(());
        }
        let text = |k: &str| intent.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
        let (Some(source), Some(asset), Some(amount)) = (source, text("asset"), text("amount")) else {
            return Ok(());
        };
        let max_age = self.settings.balances.stale.as_secs_f64();
        match balances::source_covers(conn, source, asset, amount, max_age).await? {
            Some((free, false, as_of)) => Err(OpError::InsufficientBalance(format!(
                "{source} holds {free} {asset} (snapshot of {}), less than {amount}",
                as_of.to_rfc3339()
            ))),
            Some(_) => Ok(()),
            None => {
                tracing::info!(
                    source,
                    asset,
                    "no fresh balance snapshot of the source: its balance is not checked at creation"
                );
                Ok(())
            }
        }
    }
}

/// Why a balance read from a venue, a chain or an executor is not one, if it is not: `free`
/// and `locked` must be finite non-negative decimals, the account and asset plain text.
fn not_a_balance(b: &qtg_executor::Balance) -> Option<String> {
    for (what, v) in [("free", &b.free), ("locked", &b.locked)] {
        if qtg_core::risk::Amount::parse(v).is_none() {
            let shown: String = v.chars().take(40).collect();
            return Some(format!(
                "{} {}: {what} is {shown:?}, not a finite non-negative decimal; nothing of this answer is stored",
                b.account, b.asset
            ));
        }
    }
    for (what, v) in [("account", &b.account), ("asset", &b.asset)] {
        if let Err(e) = qtg_core::text::check_plain(what, v, 256) {
            return Some(format!("{e}; nothing of this answer is stored"));
        }
    }
    None
}
