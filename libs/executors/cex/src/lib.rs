//! The CEX lane (docs/architecture.md §9.4): withdrawals and deposits through an exchange
//! account's API. `impl = "cex"` in the registry, one entry per venue account and role:
//!
//! ```toml
//! [executors."exec.cex.withdrawal_action.main"]
//! transport = "local"
//! impl = "cex"
//! config = { venue = "binance_main", base_url = "https://api.binance.com", network = "ETH" }
//! ```
//!
//! Credentials come from `MG_<VENUE>_ACCESS_KEY` / `MG_<VENUE>_SECRET` (or `…_FILE`). The
//! lane's fence is the venue's deadline: every withdraw request is signed with the venue's
//! own time T and `recvWindow ≤ submit_by − T`, after its key was recorded in the shared key
//! store (`cex_submit_keys`).

mod binance;
mod config;
mod drill;
mod executors;
pub mod fees;
mod kraken;
mod reconcile;
pub mod venue;

use std::sync::Arc;

use async_trait::async_trait;
use qtg_executor::{Balance, BalanceFetcher, Executor, ExecutorError, LaneContext, LanePlugin, Setting};

pub use binance::{BinanceVenue, Credentials};
pub use config::{EntryConfig, Role, VenueApi};
pub use drill::{drill, Check};
pub use executors::{CexExecutor, WithdrawPayload};
pub use kraken::KrakenVenue;

/// The lane (`impl = "cex"`).
pub struct CexLane {
    pool: sqlx::PgPool,
    skew: chrono::Duration,
}

/// The lane's factory (listed in `services/common/src/lanes.rs`).
pub fn lane(ctx: &LaneContext<'_>) -> Result<Box<dyn LanePlugin>, String> {
    Ok(Box::new(CexLane { pool: ctx.pool.clone(), skew: config::secs(ctx.clock_skew_seconds) }))
}

impl LanePlugin for CexLane {
    fn name(&self) -> &'static str {
        "cex"
    }

    fn executor(
        &self,
        key: &str,
        config: Option<&toml::Table>,
        setting: Setting<'_>,
    ) -> Result<Arc<dyn Executor>, String> {
        let config = EntryConfig::parse(key, config)?;
        let role = config.role(key)?;
        let venue = config.venue(setting)?;
        Ok(Arc::new(CexExecutor::new(key, role, config, venue, self.pool.clone(), self.skew)))
    }

    /// `[balances."<venue_key>"]` with `config = { venue, base_url, … }` (the entries'
    /// config): the account's balances (`/api/v3/account`), signed with its credentials.
    fn balance_fetcher(
        &self,
        venue_key: &str,
        config: Option<&toml::Table>,
        setting: Setting<'_>,
    ) -> Result<Arc<dyn BalanceFetcher>, String> {
        let config = EntryConfig::parse(venue_key, config)?;
        let venue = config.venue(setting)?;
        Ok(Arc::new(CexBalances { account: config.venue, venue }))
    }
}

/// A venue account's balances.
struct CexBalances {
    account: String,
    venue: Arc<dyn venue::Venue>,
}

#[async_trait]
impl BalanceFetcher for CexBalances {
    async fn fetch(&self) -> Result<Vec<Balance>, ExecutorError> {
        let balances = self.venue.balances().await.map_err(|e| ExecutorError::Unavailable(e.to_string()))?;
        Ok(balances
            .into_iter()
            .map(|b| Balance { account: self.account.clone(), asset: b.asset, free: b.free, locked: b.locked })
            .collect())
    }
}
