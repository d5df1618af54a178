//! What qtg needs from an exchange account, whatever its API: the [`Venue`] trait, the
//! records it answers with, and the venue's status codes mapped explicitly.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// A withdrawal to send.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WithdrawRequest {
    pub coin: String,
    pub network: Option<String>,
    pub address: String,
    pub address_tag: Option<String>,
    /// Decimal string, as the venue takes it.
    pub amount: String,
    /// qtg's idempotency key, the venue's client id (`withdrawOrderId`; a venue without
    /// client ids does not send it).
    pub client_id: String,
    /// The withdrawal key the venue pays by (Kraken), resolved from the address at prepare.
    pub key: Option<String>,
    /// The highest fee the venue may charge, where it takes one (Kraken's `max_fee`): the fee
    /// priced at prepare.
    pub max_fee: Option<String>,
}

/// What a withdraw request is signed with: the venue's time and `recvWindow` (a venue with a
/// deadline), or a nonce (a venue whose key's nonce only goes up).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stamp {
    pub signed_at: DateTime<Utc>,
    pub recv_window_ms: u32,
    pub nonce: Option<u64>,
}

/// How a late withdraw request is made harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// The request carries the venue's time and a `recvWindow`: the venue refuses it after
    /// T + window (Binance).
    RecvWindow,
    /// The request carries a nonce and the venue refuses any nonce not above the last it
    /// accepted for the key (Kraken, nonce window 0): one accepted call with a higher nonce
    /// kills it.
    Nonce,
}

/// A withdrawal as the venue's history shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Withdrawal {
    pub id: String,
    pub client_id: Option<String>,
    pub coin: String,
    pub network: Option<String>,
    pub address: String,
    pub address_tag: Option<String>,
    pub amount: String,
    pub fee: Option<String>,
    /// The venue's own status code ([`withdrawal_phase`] maps it).
    pub status: i64,
    pub tx_id: Option<String>,
    pub apply_time: Option<DateTime<Utc>>,
    pub info: Option<String>,
    /// The withdrawal key it was paid by (Kraken).
    pub key: Option<String>,
}

/// A deposit as the venue's history shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Deposit {
    pub id: String,
    pub coin: String,
    pub network: Option<String>,
    pub address: String,
    pub address_tag: Option<String>,
    pub amount: String,
    pub status: i64,
    pub tx_id: Option<String>,
    pub insert_time: Option<DateTime<Utc>>,
}

/// One network a coin can be withdrawn on, with its limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkInfo {
    pub coin: String,
    pub network: String,
    pub withdraw_enable: bool,
    pub deposit_enable: bool,
    pub withdraw_min: Option<String>,
    pub withdraw_max: Option<String>,
    pub withdraw_fee: Option<String>,
    /// The address format the venue documents for the network (Binance: `addressRegex`).
    pub address_regex: Option<String>,
    /// The memo / tag format (Binance: `memoRegex`; empty when the network takes none).
    pub memo_regex: Option<String>,
}

/// A whitelisted withdrawal address.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhitelistEntry {
    pub coin: Option<String>,
    pub network: Option<String>,
    pub address: String,
    pub address_tag: Option<String>,
    /// The withdrawal key's name, where the venue pays by key (Kraken).
    pub key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Balance {
    pub asset: String,
    pub free: String,
    pub locked: String,
}

/// Why a venue call gave no usable answer. What each means for a withdrawal that may have
/// been sent is decided by the executor: only a refusal the venue states (4xx) proves that
/// nothing was booked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VenueError {
    /// The venue refused the credentials (HTTP 401/403, or its own auth codes).
    #[error("authentication refused by the venue (HTTP {status}, code {code}): {msg}")]
    Auth { status: u16, code: i64, msg: String },
    /// The venue refused the request as malformed or not allowed (HTTP 4xx): nothing was done.
    #[error("refused by the venue (HTTP {status}, code {code}): {msg}")]
    Rejected { status: u16, code: i64, msg: String },
    /// Rate-limited (HTTP 429/418): the request was not processed.
    #[error(
        "rate-limited by the venue (HTTP {status}){}",
        retry_after.map(|s| format!(", retry after {s} s")).unwrap_or_default()
    )]
    RateLimited { status: u16, retry_after: Option<u64> },
    /// HTTP 5xx: the venue's side failed; whether it acted is unknown.
    #[error("venue error (HTTP {status}): {body}")]
    Server { status: u16, body: String },
    /// No connection could be made: the request never left.
    #[error("venue unreachable: {0}")]
    Unreachable(String),
    /// The connection failed or timed out after the request may have left.
    #[error("no answer from the venue: {0}")]
    NoAnswer(String),
    /// An answer that is not what the API documents.
    #[error("unexpected answer from the venue: {0}")]
    Protocol(String),
}

impl VenueError {
    /// True when the venue certainly did not act on the request.
    pub fn not_executed(&self) -> bool {
        matches!(
            self,
            VenueError::Auth { .. }
                | VenueError::Rejected { .. }
                | VenueError::RateLimited { .. }
                | VenueError::Unreachable(_)
        )
    }
}

/// The exchange account qtg acts for. Implementations sign every private call and never log
/// credentials.
#[async_trait]
pub trait Venue: Send + Sync {
    /// The venue account's name (the registry entry's `venue`).
    fn name(&self) -> &str;
    /// The venue's clock.
    async fn server_time(&self) -> Result<DateTime<Utc>, VenueError>;
    /// How a late withdraw request is made harmless.
    fn fencing(&self) -> Fencing {
        Fencing::RecvWindow
    }
    /// Whether a withdrawal names a withdrawal key rather than an address (Kraken).
    fn pays_by_key(&self) -> bool {
        false
    }
    /// A nonce for the next withdraw request, above every one this process used (a
    /// [`Fencing::Nonce`] venue; `None` otherwise).
    fn reserve_nonce(&self) -> Option<u64> {
        None
    }
    /// One signed call accepted with a nonce above `above`: from then on the venue refuses any
    /// request signed with `above` or less ([`Fencing::Nonce`]).
    async fn raise_nonce(&self, above: u64) -> Result<u64, VenueError> {
        Err(VenueError::Protocol(format!("{}: no nonce to raise above {above}", self.name())))
    }
    /// Whether a request signed before a later accepted one is refused ([`Fencing::Nonce`]:
    /// the API key's nonce window is 0), probed with two reads; `None` where it does not apply.
    async fn nonce_window_is_zero(&self) -> Result<Option<bool>, VenueError> {
        Ok(None)
    }
    /// Sends one withdrawal signed with `stamp`; answers the venue's withdrawal id.
    async fn submit_withdrawal(&self, req: &WithdrawRequest, stamp: Stamp) -> Result<String, VenueError>;
    /// Withdrawals carrying client id `client_id` (normally zero or one; none at a venue
    /// without client ids).
    async fn withdrawals_by_client_id(&self, coin: &str, client_id: &str) -> Result<Vec<Withdrawal>, VenueError>;
    /// The withdrawal with the venue's id `id`.
    async fn withdrawal_by_id(&self, id: &str) -> Result<Option<Withdrawal>, VenueError>;
    /// Withdrawals of `coin` applied between `from` and `to`. `amount` is what was applied for
    /// (a venue that shows the amount sent has its fee added back).
    async fn withdrawals(
        &self,
        coin: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<Withdrawal>, VenueError>;
    /// The most rows one history read answers (a list this long may be cut short).
    fn history_page_limit(&self) -> usize {
        1000
    }
    /// Withdrawals of every asset applied between `from` and `to` (cex_transfer_ingest).
    async fn all_withdrawals(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Withdrawal>, VenueError>;
    /// Deposits of every asset credited between `from` and `to` (cex_transfer_ingest).
    async fn all_deposits(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Deposit>, VenueError>;
    /// Deposits of `coin` credited between `from` and `to`.
    async fn deposits(&self, coin: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Deposit>, VenueError>;
    /// The networks `coin` can move on, with their limits.
    async fn networks(&self, coin: &str) -> Result<Vec<NetworkInfo>, VenueError>;
    /// The account's withdrawal address whitelist.
    async fn whitelist(&self) -> Result<Vec<WhitelistEntry>, VenueError>;
    async fn balances(&self) -> Result<Vec<Balance>, VenueError>;
}

/// Where a withdrawal is, by the venue's status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithdrawalPhase {
    /// Booked, not yet on chain (email sent, awaiting approval, processing).
    Pending,
    /// Sent on chain (`txId` known).
    Completed,
    /// Ended without moving funds: cancelled, rejected, failed.
    Ended(&'static str),
    /// A code the mapping does not know (runbook C5): never guessed.
    Unmapped,
}

/// A status the venue reported that is not in its documented set: kept as this code (never
/// mapped, runbook C5), the venue's own words in `info`.
pub const UNDOCUMENTED_STATUS: i64 = -1;

/// The Binance-compatible withdrawal status codes: 0 email sent, 1 cancelled, 2 awaiting
/// approval, 3 rejected, 4 processing, 5 failure, 6 completed.
pub fn withdrawal_phase(status: i64) -> WithdrawalPhase {
    match status {
        0 | 2 | 4 => WithdrawalPhase::Pending,
        6 => WithdrawalPhase::Completed,
        1 => WithdrawalPhase::Ended(qtg_core::codes::CEX_WITHDRAWAL_CANCELLED),
        3 => WithdrawalPhase::Ended(qtg_core::codes::CEX_WITHDRAWAL_REJECTED),
        5 => WithdrawalPhase::Ended(qtg_core::codes::CEX_WITHDRAWAL_FAILED),
        _ => WithdrawalPhase::Unmapped,
    }
}

/// Where a deposit is, by the venue's status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepositPhase {
    Pending,
    /// Credited to the account.
    Credited,
    Ended(&'static str),
    Unmapped,
}

/// The Binance-compatible deposit status codes: 0 pending, 8 waiting for the user's
/// confirmation, 6 credited but not yet withdrawable, 1 success, 7 wrong deposit, 2 rejected.
pub fn deposit_phase(status: i64) -> DepositPhase {
    match status {
        0 | 8 => DepositPhase::Pending,
        1 | 6 => DepositPhase::Credited,
        7 => DepositPhase::Ended(qtg_core::codes::CEX_DEPOSIT_WRONG),
        2 => DepositPhase::Ended(qtg_core::codes::CEX_DEPOSIT_REJECTED),
        _ => DepositPhase::Unmapped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_code_is_mapped_and_no_other() {
        let w: Vec<_> = (0..=7).map(withdrawal_phase).collect();
        assert_eq!(w[0], WithdrawalPhase::Pending);
        assert_eq!(w[1], WithdrawalPhase::Ended("CEX_WITHDRAWAL_CANCELLED"));
        assert_eq!(w[6], WithdrawalPhase::Completed);
        assert_eq!(w[7], WithdrawalPhase::Unmapped);
        assert_eq!(withdrawal_phase(-1), WithdrawalPhase::Unmapped);
        assert_eq!(deposit_phase(1), DepositPhase::Credited);
        assert_eq!(deposit_phase(8), DepositPhase::Pending);
        assert_eq!(deposit_phase(3), DepositPhase::Unmapped);
    }
}
