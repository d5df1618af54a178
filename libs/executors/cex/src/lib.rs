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
use qtg_executor::{
    Balance, BalanceFetcher, ExecutorError, LaneContext, LaneError, LaneExecutor, LanePlugin, Setting, TransferPage,
    VenueTransfer,
};

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
pub fn lane(ctx: &LaneContext<'_>) -> Result<Box<dyn LanePlugin>, LaneError> {
    Ok(Box::new(CexLane {
        pool: ctx.pool.clone(),
        skew: chrono::Duration::from_std(ctx.clock_skew).unwrap_or(chrono::Duration::MAX),
    }))
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
    ) -> Result<LaneExecutor, LaneError> {
        let config = EntryConfig::parse(key, config).map_err(LaneError::Config)?;
        let role = config.role(key).map_err(LaneError::Unsupported)?;
        let venue = config.venue(setting).map_err(LaneError::Setting)?;
        Ok(LaneExecutor::new(Arc::new(CexExecutor::new(key, role, config, venue, self.pool.clone(), self.skew))))
    }

    /// `[balances."<venue_key>"]` with `config = { venue, base_url, … }` (the entries'
    /// config): the account's balances (`/api/v3/account`), signed with its credentials.
    fn balance_fetcher(
        &self,
        venue_key: &str,
        config: Option<&toml::Table>,
        setting: Setting<'_>,
    ) -> Result<Arc<dyn BalanceFetcher>, LaneError> {
        let config = EntryConfig::parse(venue_key, config).map_err(LaneError::Config)?;
        let venue = config.venue(setting).map_err(LaneError::Setting)?;
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
    async fn venue_time(&self) -> Result<chrono::DateTime<chrono::Utc>, ExecutorError> {
        self.venue.server_time().await.map_err(|e| ExecutorError::Unavailable(e.to_string()))
    }

    /// The account's withdrawal and deposit history in the window, every asset.
    async fn transfers(
        &self,
        from: chrono::DateTime<chrono::Utc>,
        to: chrono::DateTime<chrono::Utc>,
    ) -> Result<TransferPage, ExecutorError> {
        let unavailable = |e: venue::VenueError| ExecutorError::Unavailable(e.to_string());
        let withdrawals = self.venue.all_withdrawals(from, to).await.map_err(unavailable)?;
        let deposits = self.venue.all_deposits(from, to).await.map_err(unavailable)?;
        let limit = self.venue.history_page_limit();
        let truncated = withdrawals.len() >= limit || deposits.len() >= limit;
        let mut out: Vec<VenueTransfer> = withdrawals
            .into_iter()
            .map(|w| VenueTransfer {
                account: self.account.clone(),
                direction: "withdrawal",
                venue_ref: w.id,
                asset: w.coin,
                network: w.network,
                amount: w.amount,
                fee: w.fee,
                address: w.address,
                address_tag: w.address_tag,
                tx_id: w.tx_id.filter(|t| !t.is_empty()),
                client_id: w.client_id.filter(|c| !c.is_empty()),
                status: w.status.to_string(),
                occurred_at: w.apply_time,
            })
            .collect();
        out.extend(deposits.into_iter().map(|d| VenueTransfer {
            account: self.account.clone(),
            direction: "deposit",
            venue_ref: d.id,
            asset: d.coin,
            network: d.network,
            amount: d.amount,
            fee: None,
            address: d.address,
            address_tag: d.address_tag,
            tx_id: d.tx_id.filter(|t| !t.is_empty()),
            client_id: None,
            status: d.status.to_string(),
            occurred_at: d.insert_time,
        }));
        Ok(TransferPage { transfers: out, truncated })
    }

    async fn fetch(&self) -> Result<Vec<Balance>, ExecutorError> {
        let balances = self.venue.balances().await.map_err(|e| ExecutorError::Unavailable(e.to_string()))?;
        Ok(balances
            .into_iter()
            .map(|b| Balance { account: self.account.clone(), asset: b.asset, free: b.free, locked: b.locked })
            .collect())
    }
}
