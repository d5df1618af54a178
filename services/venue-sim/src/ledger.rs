//! The simulated exchange's books: accounts and balances (8 decimals, exact), withdrawals
//! that progress through the venue's statuses over time, deposits that appear on the account
//! owning the destination address, and the log of every withdraw *request* received. Kept in
//! one JSON file, replaced atomically after every change, so a restart loses nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Units per 1 of a coin (the venue's 8 decimals).
const SCALE: i128 = 100_000_000;

/// Parses `"12.5"` into units; `None` beyond 8 decimals or malformed.
pub fn units(s: &str) -> Option<i128> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if frac.len() > 8 || int.len() > 20 {
        return None;
    }
    let int: i128 = int.parse().ok()?;
    let frac: i128 = if frac.is_empty() { 0 } else { format!("{frac:0<8}").parse().ok()? };
    Some(int * SCALE + frac)
}

/// Units as the venue prints them (`"12.50000000"`).
pub fn text(u: i128) -> String {
    let sign = if u < 0 { "-" } else { "" };
    let u = u.abs();
    format!("{sign}{}.{:08}", u / SCALE, u % SCALE)
}

/// The accounts file: accounts, coins and networks, timing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    #[serde(default)]
    pub timing: Timing,
    pub accounts: Vec<AccountSetup>,
    pub coins: Vec<CoinSetup>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timing {
    /// Awaiting approval (2) → processing (4).
    pub processing_after_ms: i64,
    /// → completed (6), with a txId; the deposit appears on the destination account.
    pub complete_after_ms: i64,
    /// A deposit pending (0) → success (1), when the balance is credited.
    pub deposit_confirm_ms: i64,
    /// How long a booked withdrawal stays out of the history.
    pub history_lag_ms: i64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { processing_after_ms: 300, complete_after_ms: 1500, deposit_confirm_ms: 1000, history_lag_ms: 0 }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountSetup {
    pub name: String,
    pub api_key: String,
    pub secret: String,
    #[serde(default)]
    pub balances: BTreeMap<String, String>,
    /// coin → this account's deposit address.
    #[serde(default)]
    pub deposit_addresses: BTreeMap<String, String>,
    #[serde(default)]
    pub whitelist: Vec<WhitelistSetup>,
    /// How this account's withdrawals are charged the network fee (default `deducted`, as
    /// Binance does).
    #[serde(default)]
    pub fee_model: FeeModel,
    /// Which API shape this account speaks: `binance` (the default) or `kraken` (its secret is
    /// then base64, as Kraken issues them).
    #[serde(default)]
    pub api: Api,
}

/// The exchange API an account is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    #[default]
    Binance,
    Kraken,
}

/// How a withdrawal pays the network fee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FeeModel {
    /// Out of the amount: the account is debited the amount, the receiver gets amount − fee.
    #[default]
    Deducted,
    /// On top: the account is debited amount + fee, the receiver gets the amount.
    Added,
}

impl FeeModel {
    /// `(debited, arriving)` of a withdrawal of `amount` charged `fee`; `None` when nothing
    /// would arrive.
    pub fn split(self, amount: i128, fee: i128) -> Option<(i128, i128)> {
        match self {
            FeeModel::Deducted if amount > fee => Some((amount, amount - fee)),
            FeeModel::Deducted => None,
            FeeModel::Added => Some((amount + fee, amount)),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WhitelistSetup {
    pub coin: String,
    pub network: String,
    pub address: String,
    #[serde(default)]
    pub address_tag: Option<String>,
    /// Kraken: the withdrawal key's name (a withdrawal names the key, not the address).
    #[serde(default)]
    pub key: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoinSetup {
    pub coin: String,
    pub networks: Vec<NetworkSetup>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSetup {
    pub network: String,
    #[serde(default = "yes")]
    pub withdraw_enable: bool,
    #[serde(default = "yes")]
    pub deposit_enable: bool,
    pub withdraw_min: String,
    pub withdraw_max: String,
    pub withdraw_fee: String,
    /// The address format answered as `addressRegex` (as Binance documents one per network).
    #[serde(default)]
    pub address_regex: String,
    /// The memo / tag format answered as `memoRegex` (empty: the network takes none).
    #[serde(default)]
    pub memo_regex: String,
}

fn yes() -> bool {
    true
}

impl Setup {
    pub fn load(path: &Path) -> anyhow::Result<Setup> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let setup: Setup = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        for a in &setup.accounts {
            for (coin, v) in &a.balances {
                units(v)
                    .ok_or_else(|| anyhow::anyhow!("account {}: balance {coin} = {v:?} is not a decimal", a.name))?;
            }
        }
        for c in &setup.coins {
            for n in &c.networks {
                for v in [&n.withdraw_min, &n.withdraw_max, &n.withdraw_fee] {
                    units(v).ok_or_else(|| anyhow::anyhow!("coin {}: {v:?} is not a decimal", c.coin))?;
                }
            }
        }
        Ok(setup)
    }

    pub fn account_by_key(&self, api_key: &str) -> Option<&AccountSetup> {
        self.accounts.iter().find(|a| a.api_key == api_key)
    }

    pub fn network(&self, coin: &str, network: Option<&str>) -> Option<&NetworkSetup> {
        let c = self.coins.iter().find(|c| c.coin == coin)?;
        match network {
            Some(n) => c.networks.iter().find(|x| x.network == n),
            None => c.networks.first(),
        }
    }

    /// The account whose deposit address `address` is for `coin`.
    pub fn owner_of(&self, coin: &str, address: &str) -> Option<&AccountSetup> {
        self.accounts.iter().find(|a| a.deposit_addresses.get(coin).is_some_and(|d| d.eq_ignore_ascii_case(address)))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WithdrawalRow {
    pub id: String,
    pub account: String,
    /// The client id as the public history shows it (absent under the `ambiguous` fault).
    pub client_id: Option<String>,
    /// The client id the request carried, whatever the history shows.
    pub requested_client_id: Option<String>,
    /// `request` (a withdraw request booked it) or `external` (injected by a fault: another
    /// desk's withdrawal of the same amount to the same address).
    pub origin: String,
    pub coin: String,
    pub network: String,
    pub address: String,
    pub address_tag: Option<String>,
    pub amount: String,
    pub fee: String,
    /// What the receiver gets (the amount, less the fee where it is deducted).
    #[serde(default)]
    pub arrival: Option<String>,
    pub status: i64,
    /// A status code the `unknown_status` fault pins.
    pub pinned_status: Option<i64>,
    pub tx_id: Option<String>,
    pub applied_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DepositRow {
    pub id: String,
    pub account: String,
    pub coin: String,
    pub network: String,
    pub address: String,
    pub address_tag: Option<String>,
    pub amount: String,
    pub status: i64,
    pub tx_id: String,
    pub inserted_at: DateTime<Utc>,
}

/// One withdraw request as it arrived, with what the venue made of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestRow {
    pub seq: u64,
    pub at: DateTime<Utc>,
    pub account: Option<String>,
    pub client_id: Option<String>,
    pub amount: Option<String>,
    pub address: Option<String>,
    /// `booked`, `duplicate_client_id`, `refused`, or a fault's name.
    pub outcome: String,
    pub http_status: u16,
    pub code: Option<i64>,
    pub withdrawal_id: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Books {
    /// account → coin → units.
    pub balances: BTreeMap<String, BTreeMap<String, i128>>,
    pub withdrawals: Vec<WithdrawalRow>,
    pub deposits: Vec<DepositRow>,
    pub requests: Vec<RequestRow>,
    /// Fee models set at run time (admin), over the accounts' own.
    #[serde(default)]
    pub fee_models: BTreeMap<String, FeeModel>,
    /// Kraken: the last nonce accepted per account (a nonce not above it is refused).
    #[serde(default)]
    pub nonces: BTreeMap<String, u64>,
}

impl Books {
    pub fn open(path: &Path, setup: &Setup) -> anyhow::Result<Books> {
        if path.exists() {
            let text = std::fs::read_to_string(path)?;
            let mut books: Books =
                serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            // An account added to the setup since the ledger was written opens with its balances.
            for a in &setup.accounts {
                if !books.balances.contains_key(&a.name) {
                    let coins = a.balances.iter().map(|(c, v)| (c.clone(), units(v).unwrap_or(0))).collect();
                    books.balances.insert(a.name.clone(), coins);
                }
            }
            return Ok(books);
        }
        let mut books = Books::default();
        for a in &setup.accounts {
            let coins = a.balances.iter().map(|(c, v)| (c.clone(), units(v).unwrap_or(0))).collect();
            books.balances.insert(a.name.clone(), coins);
        }
        Ok(books)
    }

    /// Replaces the file atomically (write, fsync, rename).
    pub fn save(&self, path: &PathBuf) -> anyhow::Result<()> {
        use std::io::Write;
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(self)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }

    pub fn balance(&self, account: &str, coin: &str) -> i128 {
        self.balances.get(account).and_then(|b| b.get(coin)).copied().unwrap_or(0)
    }

    /// The fee model of `account`'s withdrawals now.
    pub fn fee_model(&self, setup: &Setup, account: &str) -> FeeModel {
        self.fee_models.get(account).copied().unwrap_or_else(|| {
            setup.accounts.iter().find(|a| a.name == account).map(|a| a.fee_model).unwrap_or_default()
        })
    }

    pub fn credit(&mut self, account: &str, coin: &str, delta: i128) {
        *self.balances.entry(account.to_string()).or_default().entry(coin.to_string()).or_insert(0) += delta;
    }

    /// Moves withdrawals and deposits along by time. `true` if anything changed.
    pub fn advance(&mut self, setup: &Setup, now: DateTime<Utc>) -> bool {
        let t = &setup.timing;
        let mut changed = false;
        let mut arrivals = Vec::new();
        for w in &mut self.withdrawals {
            if let Some(code) = w.pinned_status {
                if w.status != code {
                    w.status = code;
                    changed = true;
                }
                continue;
            }
            let age = (now - w.applied_at).num_milliseconds();
            let next = if age >= t.complete_after_ms {
                6
            } else if age >= t.processing_after_ms {
                4
            } else {
                2
            };
            if w.status != next && w.status != 6 {
                w.status = next;
                changed = true;
                if next == 6 {
                    let tx = format!("0x{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(w.id.as_bytes())));
                    w.tx_id = Some(tx.clone());
                    w.completed_at = Some(now);
                    if let Some(owner) = setup.owner_of(&w.coin, &w.address) {
                        arrivals.push(DepositRow {
                            id: format!("{}", 700_000_000_000u64 + self_seq(&w.id)),
                            account: owner.name.clone(),
                            coin: w.coin.clone(),
                            network: w.network.clone(),
                            address: w.address.clone(),
                            address_tag: w.address_tag.clone(),
                            amount: w.arrival.clone().unwrap_or_else(|| w.amount.clone()),
                            status: 0,
                            tx_id: tx,
                            inserted_at: now,
                        });
                    }
                }
            }
        }
        self.deposits.extend(arrivals);
        let mut credits = Vec::new();
        for d in &mut self.deposits {
            if d.status == 0 && (now - d.inserted_at).num_milliseconds() >= t.deposit_confirm_ms {
                d.status = 1;
                credits.push((d.account.clone(), d.coin.clone(), units(&d.amount).unwrap_or(0)));
                changed = true;
            }
        }
        for (account, coin, u) in credits {
            self.credit(&account, &coin, u);
        }
        changed
    }
}

/// A stable number from a withdrawal id (deposit ids are numeric at this venue).
fn self_seq(id: &str) -> u64 {
    id.bytes().take(12).fold(0u64, |acc, b| (acc * 31 + u64::from(b)) % 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_added_since_the_ledger_was_written_opens_with_its_balances() {
        let setup = Setup::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/venue-sim.toml")).unwrap();
        let path = std::env::temp_dir().join(format!("venue-ledger-{}.json", std::process::id()));
        let mut old = Books::default();
        old.balances.insert("sim_a".into(), [("USDT".to_string(), 5)].into_iter().collect());
        old.save(&path).unwrap();
        let books = Books::open(&path, &setup).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(books.balance("sim_a", "USDT"), 5, "what the ledger holds stays");
        assert_eq!(books.balance("sim_k", "USDT"), units("1000000").unwrap(), "a new account opens");
    }

    #[test]
    fn amounts_are_exact_to_eight_decimals() {
        assert_eq!(units("12.5"), Some(1_250_000_000));
        assert_eq!(units("0.00000001"), Some(1));
        assert_eq!(units("1.000000001"), None);
        assert_eq!(units("-1"), None);
        assert_eq!(text(1_250_000_000), "12.50000000");
    }
}
