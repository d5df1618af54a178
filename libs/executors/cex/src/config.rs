//! A registry entry of the CEX lane: which venue account it acts for, where that venue's API
//! is, its credentials (named by variable, never written in the registry) and the lane's
//! reconciliation margins.

use std::sync::Arc;
use std::time::Duration;

use qtg_executor::Setting;
use serde::Deserialize;

use crate::binance::{BinanceVenue, Credentials};
use crate::fees::FeeModel;
use crate::kraken::KrakenVenue;
use crate::venue::Venue;

/// The entry's `config` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryConfig {
    /// Which exchange API the venue speaks: `binance` (the default; also `qtg-venue-sim`) or
    /// `kraken`.
    pub api: Option<VenueApi>,
    /// The venue account's name: `MG_<VENUE>_ACCESS_KEY` / `MG_<VENUE>_SECRET` (or their
    /// `_FILE` forms) hold its credentials.
    pub venue: String,
    /// The name of the credentials' variables when they are not the venue's own:
    /// `MG_<CREDENTIALS>_ACCESS_KEY` / `MG_<CREDENTIALS>_SECRET` (e.g. the withdrawing entries
    /// of a Kraken account on an API key of their own, while every entry names the same venue).
    pub credentials: Option<String>,
    /// The venue's API base, e.g. `https://api.binance.com` or `qtg-venue-sim`'s address.
    pub base_url: String,
    /// `withdrawal_action`, `withdrawal_observe` or `deposit_observe`; defaults from the key
    /// (`exec.cex.<role>[.<suffix>]`).
    pub role: Option<String>,
    /// The network a withdrawal uses when neither the node's config nor the intent names one.
    pub network: Option<String>,
    /// Deadline of one venue call (default 5000 ms; keep it under half of
    /// `MG_EXECUTOR_TIMEOUT_MS`: a submit makes two).
    pub timeout_ms: Option<u64>,
    /// How long after a submit attempt started its withdrawal is looked for by amount and
    /// address (default 900 s).
    pub lookback_seconds: Option<f64>,
    /// How long the venue's history may lag behind a withdrawal it booked (default 10 s).
    pub history_lag_seconds: Option<f64>,
    /// Upper bound of a withdraw request's `recvWindow` (default and venue maximum 60000 ms).
    pub max_recv_window_ms: Option<u32>,
    /// How far back deposit_observe looks for the deposit (default 86400 s).
    pub deposit_lookback_seconds: Option<f64>,
    /// `true` lets credentials travel over plain `http://` to a host that is not loopback.
    pub insecure: Option<bool>,
    /// Whether the venue keeps qtg's client id on every withdrawal qtg requests (default
    /// `true`: Binance's `withdrawOrderId`). Then recovery matches only by client id — a
    /// withdrawal of the same amount and address *without* it can only be someone else's and is
    /// never claimed, only shown to a person. `false` (a venue without client ids) enables the
    /// runbook's amount/address/memo matcher inside the lookback window.
    pub client_ids: Option<bool>,
    /// How the venue charges a withdrawal's network fee: `deducted` (the default, Binance's:
    /// the receiver gets amount − fee) or `added` (the account is debited amount + fee).
    pub fee_model: Option<FeeModel>,
    /// Where the venue differs by asset or network: `{ "USDT" = "added", "BTC/BTC" = "deducted" }`
    /// (`ASSET/NETWORK` before `ASSET` before `fee_model`).
    pub fee_models: Option<std::collections::BTreeMap<String, FeeModel>>,
}

/// The exchange APIs the lane speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VenueApi {
    Binance,
    Kraken,
}

/// The three executors of the lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    WithdrawalAction,
    WithdrawalObserve,
    DepositObserve,
}

impl Role {
    fn parse(s: &str) -> Option<Role> {
        match s {
            "withdrawal_action" => Some(Role::WithdrawalAction),
            "withdrawal_observe" => Some(Role::WithdrawalObserve),
            "deposit_observe" => Some(Role::DepositObserve),
            _ => None,
        }
    }
}

impl EntryConfig {
    pub fn parse(key: &str, table: Option<&toml::Table>) -> Result<EntryConfig, String> {
        let table =
            table.ok_or_else(|| format!("the cex lane needs a `config` table (venue, base_url) for entry {key:?}"))?;
        let config: EntryConfig = toml::Value::Table(table.clone()).try_into().map_err(|e| format!("config: {e}"))?;
        if config.venue.is_empty() || !config.venue.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(format!("config.venue {:?}: letters, digits, '_' and '-' only", config.venue));
        }
        if let Some(c) = &config.credentials {
            if c.is_empty() || !c.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(format!("config.credentials {c:?}: letters, digits, '_' and '-' only"));
            }
        }
        let shown = qtg_core::urls::redact(&config.base_url);
        let plain = config.base_url.starts_with("http://");
        if !plain && !config.base_url.starts_with("https://") {
            return Err(format!("config.base_url {shown:?} is not an http(s) URL"));
        }
        if qtg_core::urls::has_userinfo(&config.base_url) {
            return Err(format!(
                "config.base_url {shown:?} carries credentials in the URL: the venue's keys come from its \
                 api_key / secret settings"
            ));
        }
        if plain && !loopback(&config.base_url) && config.insecure != Some(true) {
            return Err(format!(
                "config.base_url {shown:?}: signed requests and the API key would travel in clear text; use https \
                 (or insecure = true for a test venue)"
            ));
        }
        for (name, v, max) in [
            ("lookback_seconds", config.lookback_seconds, 7.0 * 86_400.0),
            ("history_lag_seconds", config.history_lag_seconds, 3_600.0),
            ("deposit_lookback_seconds", config.deposit_lookback_seconds, 90.0 * 86_400.0),
        ] {
            if v.is_some_and(|s| !s.is_finite() || !(0.0..=max).contains(&s)) {
                return Err(format!("config.{name} must be a number of seconds from 0 to {max}"));
            }
        }
        if config.api == Some(VenueApi::Kraken) {
            // Kraken keeps no client id: recovery can only match by amount, key and time.
            if config.client_ids == Some(true) {
                return Err(
                    "config.client_ids: Kraken keeps no client id on a withdrawal; leave it unset (false)".into()
                );
            }
            // Kraken takes its fee out of the amount; its status shows the amount sent.
            if config.fee_model == Some(FeeModel::Added)
                || config.fee_models.as_ref().is_some_and(|m| m.values().any(|f| *f == FeeModel::Added))
            {
                return Err("config.fee_model: Kraken deducts its fee from the amount (deducted)".into());
            }
        }
        if config.max_recv_window_ms.is_some_and(|w| !(1000..=60_000).contains(&w)) {
            return Err("config.max_recv_window_ms must be between 1000 and 60000".into());
        }
        Ok(config)
    }

    pub fn role(&self, key: &str) -> Result<Role, String> {
        let named = self.role.clone().or_else(|| key.split('.').nth(2).map(str::to_string)).unwrap_or_default();
        Role::parse(&named).ok_or_else(|| {
            format!(
                "entry {key:?}: role {named:?} is not one of withdrawal_action, withdrawal_observe, deposit_observe \
                 (name it in the key, exec.cex.<role>[.<suffix>], or as config.role)"
            )
        })
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.unwrap_or(5000))
    }

    /// The fee model of `coin` on `network`.
    pub fn fee_model(&self, coin: &str, network: Option<&str>) -> FeeModel {
        let by = self.fee_models.as_ref();
        let find = |k: &str| by.and_then(|m| m.iter().find(|(name, _)| name.eq_ignore_ascii_case(k))).map(|(_, v)| *v);
        network.and_then(|n| find(&format!("{coin}/{n}"))).or_else(|| find(coin)).or(self.fee_model).unwrap_or_default()
    }

    /// Whether the venue keeps qtg's client id (`true` by default; never at Kraken).
    pub fn client_ids(&self) -> bool {
        self.client_ids.unwrap_or(self.api != Some(VenueApi::Kraken))
    }

    pub fn lookback(&self) -> chrono::Duration {
        secs(self.lookback_seconds.unwrap_or(900.0))
    }

    pub fn history_lag(&self) -> chrono::Duration {
        secs(self.history_lag_seconds.unwrap_or(10.0))
    }

    pub fn deposit_lookback(&self) -> chrono::Duration {
        secs(self.deposit_lookback_seconds.unwrap_or(86_400.0))
    }

    pub fn max_recv_window_ms(&self) -> u32 {
        self.max_recv_window_ms.unwrap_or(60_000)
    }

    /// The variable prefix of this entry's credentials: `MG_<CREDENTIALS>_`, else `MG_<VENUE>_`.
    pub fn env_prefix(&self) -> String {
        let name = self.credentials.as_deref().unwrap_or(&self.venue);
        format!("MG_{}_", name.to_ascii_uppercase().replace('-', "_"))
    }

    /// The venue client, with credentials from `MG_<VENUE>_ACCESS_KEY` / `MG_<VENUE>_SECRET`
    /// (or `…_FILE`, a file holding the value).
    pub fn venue(&self, setting: Setting<'_>) -> Result<Arc<dyn Venue>, String> {
        let p = self.env_prefix();
        let credentials = Credentials {
            api_key: credential(setting, &format!("{p}ACCESS_KEY"))?,
            secret: credential(setting, &format!("{p}SECRET"))?,
        };
        Ok(match self.api.unwrap_or(VenueApi::Binance) {
            VenueApi::Binance => Arc::new(BinanceVenue::new(&self.venue, &self.base_url, credentials, self.timeout())?),
            VenueApi::Kraken => Arc::new(KrakenVenue::new(&self.venue, &self.base_url, credentials, self.timeout())?),
        })
    }
}

pub(crate) fn secs(s: f64) -> chrono::Duration {
    chrono::Duration::milliseconds((s * 1000.0) as i64)
}

/// Whether the URL's host (after any userinfo) is a loopback address or `localhost`.
fn loopback(url: &str) -> bool {
    qtg_core::urls::Parts::of(url).is_some_and(|p| {
        let host = p.host();
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    })
}

/// `name`, or the contents of the file `name_FILE` names. The value is never in an error.
fn credential(setting: Setting<'_>, name: &str) -> Result<String, String> {
    if let Some(v) = setting(name).filter(|v| !v.is_empty()) {
        return Ok(v);
    }
    let file = format!("{name}_FILE");
    match setting(&file).filter(|v| !v.is_empty()) {
        Some(path) => std::fs::read_to_string(&path)
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("{file} = {path:?}: {e}"))
            .and_then(|s| if s.is_empty() { Err(format!("{file} = {path:?} is empty")) } else { Ok(s) }),
        None => Err(format!("the venue's credentials are not set: {name} (or {file})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(s: &str) -> toml::Table {
        s.parse().unwrap()
    }

    #[test]
    fn entries_are_checked() {
        let ok = table("venue = \"sim_a\"\nbase_url = \"http://127.0.0.1:9400\"");
        let c = EntryConfig::parse("exec.cex.withdrawal_action.sim_a", Some(&ok)).unwrap();
        assert_eq!(c.role("exec.cex.withdrawal_action.sim_a").unwrap(), Role::WithdrawalAction);
        assert!(c.role("exec.cex.other").is_err());
        assert_eq!(c.env_prefix(), "MG_SIM_A_");
        let own = table("venue = \"k\"\nbase_url = \"http://127.0.0.1:1\"\ncredentials = \"k-withdraw\"");
        assert_eq!(EntryConfig::parse("k", Some(&own)).unwrap().env_prefix(), "MG_K_WITHDRAW_");
        let far = table("venue = \"a\"\nbase_url = \"http://venue.example:80\"");
        assert!(EntryConfig::parse("k", Some(&far)).unwrap_err().contains("clear text"));
        let typo = table("venue = \"a\"\nbase_url = \"https://x\"\nlookback = 3");
        assert!(EntryConfig::parse("k", Some(&typo)).is_err());
        assert!(EntryConfig::parse("k", None).is_err());
    }

    #[test]
    fn credentials_come_from_variables_and_never_show() {
        let c = EntryConfig::parse(
            "exec.cex.deposit_observe",
            Some(&table("venue = \"b\"\nbase_url = \"http://127.0.0.1:1\"")),
        )
        .unwrap();
        let none = |_: &str| None;
        let e = c.venue(&none).err().unwrap();
        assert!(e.contains("MG_B_ACCESS_KEY"), "{e}");
        let set = |k: &str| match k {
            "MG_B_ACCESS_KEY" => Some("ak".to_string()),
            "MG_B_SECRET" => Some("very-secret".to_string()),
            _ => None,
        };
        assert!(c.venue(&set).is_ok());
    }
}
