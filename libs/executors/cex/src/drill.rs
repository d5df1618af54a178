//! The runbook's submit-safety drill (`qtgctl venues drill`): can this venue account be
//! reconciled — credentials, withdrawal history readable across the lookback window,
//! whitelist, asset and network — without moving funds.

use chrono::Utc;
use serde::Serialize;

use crate::venue::Venue;

/// One check and what it found.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Runs every check against `venue` for `asset` (and `network`, when given), reading only.
pub async fn drill(
    venue: &dyn Venue,
    asset: &str,
    network: Option<&str>,
    lookback: chrono::Duration,
    skew: chrono::Duration,
) -> Vec<Check> {
    let mut out = Vec::new();
    let mut push = |name, r: Result<String, String>| {
        let ok = r.is_ok();
        out.push(Check { name, ok, detail: r.unwrap_or_else(|e| e) });
    };
    let host = Utc::now();
    let time = venue.server_time().await;
    push(
        "venue_time",
        match &time {
            Ok(t) => {
                let off = (*t - host).num_milliseconds();
                if off.abs() > skew.num_milliseconds() {
                    Err(format!(
                        "the venue's clock is {off} ms from this host's, beyond the skew margin (requests are \
                         signed with the venue's time, but recovery's margins assume it)"
                    ))
                } else {
                    Ok(format!("{t} (offset {off} ms)"))
                }
            }
            Err(e) => Err(e.to_string()),
        },
    );
    push(
        "credentials",
        venue
            .balances()
            .await
            .map(|b| format!("signed read accepted; {} balances", b.len()))
            .map_err(|e| e.to_string()),
    );
    let now = time.as_ref().copied().unwrap_or(host);
    push(
        "withdraw_history",
        venue
            .withdrawals(asset, now - lookback, now)
            .await
            .map(|w| {
                format!(
                    "readable across the lookback window ({} s): {} withdrawals of {asset}",
                    lookback.num_seconds(),
                    w.len()
                )
            })
            .map_err(|e| format!("recovery could not reconcile: {e}")),
    );
    push(
        "whitelist",
        match venue.whitelist().await {
            Ok(list) => {
                let n = list.iter().filter(|w| w.coin.as_deref().is_none_or(|c| c.eq_ignore_ascii_case(asset))).count();
                if n == 0 {
                    Err(format!("no whitelisted address for {asset}: every withdrawal would be refused at preflight"))
                } else {
                    Ok(format!("{n} whitelisted addresses for {asset}"))
                }
            }
            Err(e) => Err(e.to_string()),
        },
    );
    push(
        "asset_network",
        match venue.networks(asset).await {
            Ok(nets) => {
                let open: Vec<_> = nets.iter().filter(|n| n.withdraw_enable).map(|n| n.network.clone()).collect();
                match network {
                    Some(n) if open.iter().any(|o| o == n) => Ok(format!("{asset} on {n} is open for withdrawals")),
                    Some(n) => Err(format!("{asset} on {n} is not open for withdrawals (open: {open:?})")),
                    None if open.is_empty() => Err(format!("{asset} is not open for withdrawals on any network")),
                    None => Ok(format!("{asset} is open for withdrawals on {open:?}")),
                }
            }
            Err(e) => Err(e.to_string()),
        },
    );
    match venue.nonce_window_is_zero().await {
        Ok(None) => {}
        Ok(Some(true)) => push(
            "nonce_window",
            Ok("a request signed before a later accepted one is refused: the nonce fence holds".into()),
        ),
        Ok(Some(false)) => push(
            "nonce_window",
            Err("the API key accepts a nonce below the last one: a withdraw request delayed past recovery's fence \
                 could still execute; set the key's nonce window to 0"
                .into()),
        ),
        Err(e) => push("nonce_window", Err(e.to_string())),
    }
    out
}
