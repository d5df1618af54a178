//! The runbook's matcher (C1/C2): which withdrawals in the venue's history could be the one
//! an attempt sent, when the venue cannot find it by client id.

use qtg_core::risk::Amount;
use serde::Serialize;

use crate::venue::Withdrawal;

/// What the attempt sent.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    pub coin: &'a str,
    pub address: &'a str,
    pub address_tag: Option<&'a str>,
    pub amount: &'a str,
    pub client_id: &'a str,
    /// The withdrawal key it paid by (a venue that pays by key).
    pub key: Option<&'a str>,
}

fn same_tag(a: Option<&str>, b: Option<&str>) -> bool {
    a.filter(|s| !s.is_empty()) == b.filter(|s| !s.is_empty())
}

fn same_amount(a: &str, b: &str) -> bool {
    match (Amount::parse_any(a), Amount::parse_any(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Withdrawals of the same coin, address, memo and amount (and withdrawal key, where both say
/// one) that carry no other client id.
pub fn candidates<'a>(history: &'a [Withdrawal], t: &Target<'_>) -> Vec<&'a Withdrawal> {
    history
        .iter()
        .filter(|w| w.coin.eq_ignore_ascii_case(t.coin))
        .filter(|w| w.address.eq_ignore_ascii_case(t.address))
        // Where both name a withdrawal key, the key decides (it holds the address and memo;
        // Kraken's history shows no memo); else the memo must match.
        .filter(|w| match (w.key.as_deref(), t.key) {
            (Some(a), Some(b)) => a == b,
            _ => same_tag(w.address_tag.as_deref(), t.address_tag),
        })
        .filter(|w| same_amount(&w.amount, t.amount))
        .filter(|w| w.client_id.as_deref().is_none_or(|c| c.is_empty() || c == t.client_id))
        .collect()
}

/// One candidate as the evidence shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub id: String,
    pub amount: String,
    pub address: String,
    pub address_tag: Option<String>,
    pub client_id: Option<String>,
    pub apply_time: Option<String>,
    pub status: i64,
}

impl From<&Withdrawal> for Candidate {
    fn from(w: &Withdrawal) -> Self {
        Candidate {
            id: w.id.clone(),
            amount: w.amount.clone(),
            address: w.address.clone(),
            address_tag: w.address_tag.clone(),
            client_id: w.client_id.clone(),
            apply_time: w.apply_time.map(|t| t.to_rfc3339()),
            status: w.status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(id: &str, amount: &str, address: &str, client: Option<&str>) -> Withdrawal {
        Withdrawal {
            id: id.into(),
            client_id: client.map(str::to_string),
            coin: "USDT".into(),
            network: Some("ETH".into()),
            address: address.into(),
            address_tag: None,
            amount: amount.into(),
            fee: None,
            status: 4,
            tx_id: None,
            apply_time: None,
            info: None,
            key: None,
        }
    }

    #[test]
    fn matches_amount_address_and_memo_but_never_another_client_id() {
        let history = vec![
            w("1", "100.00", "0xAbC", None),
            w("2", "100", "0xabc", Some("n:1")),
            w("3", "100", "0xabc", Some("other:1")),
            w("4", "100.01", "0xabc", None),
            w("5", "100", "0xdef", None),
        ];
        let t =
            Target { coin: "usdt", address: "0xabc", address_tag: None, amount: "100", client_id: "n:1", key: None };
        let ids: Vec<_> = candidates(&history, &t).iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ids, ["1", "2"]);
        let tagged = Target { address_tag: Some("memo"), ..t };
        assert!(candidates(&history, &tagged).is_empty());
    }
}
