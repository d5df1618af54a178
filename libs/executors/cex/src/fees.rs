//! What a withdrawal costs and what arrives (docs/architecture.md §9.4, "Fees"). Exchanges
//! charge the network fee in one of two ways, and an intent says which side of it its amount
//! is on; from the two and the fee the venue states, every amount of the withdrawal follows —
//! exactly, in decimal, never within a tolerance.

use qtg_core::risk::Amount;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How the venue charges a withdrawal's network fee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeeModel {
    /// The fee comes out of the amount applied for: the account is debited the amount, the
    /// receiver gets amount − fee (Binance, Kraken).
    #[default]
    Deducted,
    /// The fee is charged on top: the account is debited amount + fee, the receiver gets the
    /// amount.
    Added,
}

impl FeeModel {
    pub fn as_str(self) -> &'static str {
        match self {
            FeeModel::Deducted => "deducted",
            FeeModel::Added => "added",
        }
    }
}

/// Which side of the fee an intent's `amount` is on (`intent.amount_is`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AmountIs {
    /// The amount applied for at the venue — the withdrawal's own amount (the default).
    #[default]
    Sent,
    /// The amount that must arrive: grossed up by the fee where the venue deducts it, bounded
    /// by the template's fee cap (`risk_controls.max_fee`).
    Received,
}

impl AmountIs {
    /// `intent.amount_is`: absent means `sent`; anything but `"sent"` / `"received"` is refused.
    pub fn of_intent(intent: &Value) -> Result<AmountIs, String> {
        match intent.get("amount_is") {
            None | Some(Value::Null) => Ok(AmountIs::Sent),
            Some(Value::String(s)) if s == "sent" => Ok(AmountIs::Sent),
            Some(Value::String(s)) if s == "received" => Ok(AmountIs::Received),
            Some(other) => Err(format!(
                "intent.amount_is {other} is not \"sent\" (the amount applied for at the venue) or \"received\" \
                 (the amount that must arrive)"
            )),
        }
    }
}

/// A withdrawal's amounts under its fee model, as prepared (and so as approved and sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Priced {
    pub fee_model: FeeModel,
    pub amount_is: AmountIs,
    /// The intent's amount.
    pub requested: String,
    /// The fee the venue stated for the network when the withdrawal was prepared.
    pub fee: String,
    /// What the withdraw request says (`amount`).
    pub applied: String,
    /// What leaves the account.
    pub debit: String,
    /// What the receiver gets.
    pub arrival: String,
}

/// The amounts of a withdrawal of `requested` (on the `amount_is` side of the fee) at a venue
/// charging `fee` under `model`. Refused when nothing would arrive.
pub fn price(model: FeeModel, amount_is: AmountIs, requested: &Amount, fee: &Amount) -> Result<Priced, String> {
    let gross = requested.add(fee);
    let (applied, debit, arrival) = match (model, amount_is) {
        (FeeModel::Deducted, AmountIs::Sent) => {
            let arrival = requested.checked_sub(fee).filter(|a| !a.is_zero()).ok_or_else(|| {
                format!("the venue deducts its fee of {fee} from the amount: {requested} would leave nothing to arrive")
            })?;
            (requested.clone(), requested.clone(), arrival)
        }
        (FeeModel::Deducted, AmountIs::Received) => (gross.clone(), gross, requested.clone()),
        (FeeModel::Added, _) => (requested.clone(), gross, requested.clone()),
    };
    Ok(Priced {
        fee_model: model,
        amount_is,
        requested: requested.to_string(),
        fee: fee.to_string(),
        applied: applied.to_string(),
        debit: debit.to_string(),
        arrival: arrival.to_string(),
    })
}

/// What arrives of a withdrawal the venue books for `amount` and charges `fee` for.
pub fn arrival(model: FeeModel, amount: &Amount, fee: &Amount) -> Option<Amount> {
    match model {
        FeeModel::Deducted => amount.checked_sub(fee),
        FeeModel::Added => Some(amount.clone()),
    }
}

/// The template's fee cap for `asset`: `risk_controls.max_fee`, a decimal string (any asset)
/// or an object by asset (`{"USDT": "5"}`). `None` when the template sets none for the asset.
pub fn fee_cap(risk_controls: &Value, asset: &str) -> Result<Option<Amount>, String> {
    let raw = match risk_controls.get("max_fee") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(by_asset)) => {
            match by_asset.iter().find(|(k, _)| k.eq_ignore_ascii_case(asset)).map(|(_, v)| v) {
                None | Some(Value::Null) => return Ok(None),
                Some(v) => v,
            }
        }
        Some(v) => v,
    };
    raw.as_str()
        .and_then(Amount::parse)
        .map(Some)
        .ok_or_else(|| format!("risk_controls.max_fee {raw} is not a decimal string (or an object of them by asset)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn a(s: &str) -> Amount {
        Amount::parse(s).unwrap()
    }

    fn amounts(p: &Priced) -> (&str, &str, &str) {
        (p.applied.as_str(), p.debit.as_str(), p.arrival.as_str())
    }

    #[test]
    fn each_model_and_side_of_the_fee() {
        let fee = a("1.5");
        let p = price(FeeModel::Deducted, AmountIs::Sent, &a("100"), &fee).unwrap();
        assert_eq!(amounts(&p), ("100", "100", "98.5"));
        let p = price(FeeModel::Deducted, AmountIs::Received, &a("100"), &fee).unwrap();
        assert_eq!(amounts(&p), ("101.5", "101.5", "100"));
        let p = price(FeeModel::Added, AmountIs::Sent, &a("100"), &fee).unwrap();
        assert_eq!(amounts(&p), ("100", "101.5", "100"));
        let p = price(FeeModel::Added, AmountIs::Received, &a("100"), &fee).unwrap();
        assert_eq!(amounts(&p), ("100", "101.5", "100"));
        assert!(price(FeeModel::Deducted, AmountIs::Sent, &a("1.5"), &fee).is_err());
        assert_eq!(arrival(FeeModel::Deducted, &a("101.5"), &fee), Some(a("100")));
        assert_eq!(arrival(FeeModel::Added, &a("100"), &fee), Some(a("100")));
    }

    #[test]
    fn the_intent_and_the_cap_are_read_strictly() {
        assert_eq!(AmountIs::of_intent(&json!({})), Ok(AmountIs::Sent));
        assert_eq!(AmountIs::of_intent(&json!({"amount_is": "received"})), Ok(AmountIs::Received));
        assert!(AmountIs::of_intent(&json!({"amount_is": "Received"})).is_err());
        assert!(AmountIs::of_intent(&json!({"amount_is": "received\u{200b}"})).is_err());
        assert_eq!(fee_cap(&json!({}), "USDT"), Ok(None));
        assert_eq!(fee_cap(&json!({"max_fee": "2"}), "USDT"), Ok(Some(a("2"))));
        assert_eq!(fee_cap(&json!({"max_fee": {"usdt": "3"}}), "USDT"), Ok(Some(a("3"))));
        assert_eq!(fee_cap(&json!({"max_fee": {"BTC": "3"}}), "USDT"), Ok(None));
        assert!(fee_cap(&json!({"max_fee": 2}), "USDT").is_err());
        assert!(fee_cap(&json!({"max_fee": "-1"}), "USDT").is_err());
    }
}
