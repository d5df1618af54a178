//! CCTP V2 fees. The fee is paid in USDC on the destination out of the burned amount: the
//! recipient receives `amount − feeExecuted`, `feeExecuted ≤ maxFee` (the burn's cap). Two
//! sources say what a route costs (`docs/cctp-reference.md` §2.6, §3.3):
//! - Circle's fee API, `GET /v2/burn/USDC/fees/{sourceDomain}/{destDomain}`: per finality
//!   threshold a `minimumFee` in basis points, a JSON number that may be fractional (1.3); the
//!   body is a bare array or `{"data": [...]}` (both are in Circle's own sources);
//! - the messenger's on-chain minimum (V2.1 `minFee`, in 1/1000 basis points of
//!   `MIN_FEE_MULTIPLIER` = 10,000,000): a burn whose `maxFee` is below `getMinFeeAmount(amount)`
//!   reverts.

use alloy::primitives::U256;
use serde_json::Value;

/// Circle's fee API (or one in its shape) at `base`.
#[derive(Clone)]
pub struct FeeApi {
    base: String,
    http: reqwest::Client,
}

impl FeeApi {
    /// `base` as the attestation service's: https, plain http only to loopback or `insecure`.
    pub fn new(base: &str, insecure: bool, timeout_ms: Option<u64>) -> Result<FeeApi, String> {
        let http = crate::service_client("config.fee_url", base, insecure, timeout_ms)?;
        Ok(FeeApi { base: base.trim_end_matches('/').to_string(), http })
    }

    /// `GET /v2/burn/USDC/fees/{source}/{destination}`. The burn's preflight passes only on
    /// quotes: it is never signed on a guess.
    pub async fn quotes(&self, source: u32, destination: u32) -> Result<Vec<FeeQuote>, FeeError> {
        let url = format!("{}/v2/burn/USDC/fees/{source}/{destination}", self.base);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| FeeError::Unavailable(format!("fee API: {}", e.without_url())))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(FeeError::of_status(status));
        }
        let body: Value =
            resp.json().await.map_err(|e| FeeError::Refused(format!("fee API: not JSON: {}", e.without_url())))?;
        parse_quotes(&body).map_err(|e| FeeError::Refused(format!("fee API: {e}")))
    }
}

/// Why the fee API gave no quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeeError {
    /// No answer, a 429 or a 5xx: asked again later.
    Unavailable(String),
    /// An answer asking again will not change: another 4xx (an unsupported route, say), or a
    /// body not in Circle's shape.
    Refused(String),
}

impl FeeError {
    fn of_status(status: u16) -> FeeError {
        let why = format!("fee API answered HTTP {status}");
        if status == 429 || status >= 500 {
            FeeError::Unavailable(why)
        } else {
            FeeError::Refused(why)
        }
    }
}

/// Basis points as an exact decimal: `units / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bps {
    units: u128,
    scale: u32,
}

impl Bps {
    /// From the API's JSON number, exactly as written (`1`, `1.3`, `0.25`); an exponent, a
    /// negative value or more than 12 decimals is refused.
    pub fn from_json(n: &serde_json::Number) -> Result<Bps, String> {
        let text = n.to_string();
        let bad = || format!("minimumFee {text} is not a non-negative decimal number of basis points");
        let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
        if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let scale = u32::try_from(frac.len()).ok().filter(|s| *s <= 12).ok_or_else(bad)?;
        let units = format!("{whole}{frac}").parse::<u128>().map_err(|_| bad())?;
        Ok(Bps { units, scale })
    }

    /// This many basis points of `amount`, rounded up (a fee cap never under-covers).
    pub fn of(self, amount: U256) -> U256 {
        let denominator = U256::from(10_000u64) * U256::from(10u64).pow(U256::from(self.scale));
        (amount * U256::from(self.units)).div_ceil(denominator)
    }
}

/// One finality threshold's quote from the fee API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeeQuote {
    pub finality_threshold: u32,
    pub minimum_fee: Bps,
}

/// The fee API's answer: a bare array or `{"data": [...]}` of `{finalityThreshold,
/// minimumFee, ...}`.
pub fn parse_quotes(body: &Value) -> Result<Vec<FeeQuote>, String> {
    let items = match body {
        Value::Array(a) => a,
        Value::Object(o) => o.get("data").and_then(Value::as_array).ok_or("the fee answer has no data array")?,
        _ => return Err("the fee answer is neither an array nor an object".into()),
    };
    items
        .iter()
        .map(|q| {
            let finality_threshold = q
                .get("finalityThreshold")
                .and_then(Value::as_u64)
                .and_then(|t| u32::try_from(t).ok())
                .ok_or("a fee quote without a finalityThreshold")?;
            let minimum_fee = match q.get("minimumFee") {
                Some(Value::Number(n)) => Bps::from_json(n)?,
                _ => return Err(format!("the quote for finality {finality_threshold} has no minimumFee number")),
            };
            Ok(FeeQuote { finality_threshold, minimum_fee })
        })
        .collect()
}

/// `TokenMessengerV2.getMinFeeAmount(amount)` as the contract computes it from `minFee`
/// (1/1000 basis points): 0 without a minimum; else at least 1 unit, `floor(amount × minFee /
/// 10,000,000)`. `None` where the contract reverts ("Amount too low": an amount of at most 1).
pub fn onchain_min_fee(amount: U256, min_fee: U256) -> Option<U256> {
    if min_fee.is_zero() {
        return Some(U256::ZERO);
    }
    if amount <= U256::from(1u64) {
        return None;
    }
    Some((amount * min_fee / U256::from(10_000_000u64)).max(U256::from(1u64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fee_api_answers_in_either_shape_with_fractional_basis_points() {
        let bare = json!([{"finalityThreshold": 1000, "minimumFee": 1.3, "forwardFee": {"low": 90}},
                          {"finalityThreshold": 2000, "minimumFee": 0}]);
        let quotes = parse_quotes(&bare).unwrap();
        assert_eq!(quotes.len(), 2);
        assert_eq!((quotes[0].finality_threshold, quotes[0].minimum_fee), (1000, Bps { units: 13, scale: 1 }));
        assert_eq!(parse_quotes(&json!({"data": bare})).unwrap(), quotes);
        // 1.3 bps of 1,000 USDC (6 decimals) is 0.13 USDC; of 1 unit, rounded up, 1 unit.
        assert_eq!(quotes[0].minimum_fee.of(U256::from(1_000_000_000u64)), U256::from(130_000u64));
        assert_eq!(quotes[0].minimum_fee.of(U256::from(1u64)), U256::from(1u64));
        assert_eq!(quotes[1].minimum_fee.of(U256::from(1_000_000_000u64)), U256::ZERO);
        assert!(parse_quotes(&json!([{"finalityThreshold": 1000, "minimumFee": -1}])).is_err());
        assert!(parse_quotes(&json!([{"finalityThreshold": 1000, "minimumFee": "1"}])).is_err());
        assert!(parse_quotes(&json!({"fees": []})).is_err());
    }

    #[test]
    fn a_fee_api_status_is_transient_only_when_asking_again_can_help() {
        assert!(matches!(FeeError::of_status(503), FeeError::Unavailable(_)));
        assert!(matches!(FeeError::of_status(429), FeeError::Unavailable(_)));
        assert!(matches!(FeeError::of_status(400), FeeError::Refused(_)));
        assert!(matches!(FeeError::of_status(404), FeeError::Refused(_)));
    }

    #[test]
    fn the_onchain_minimum_fee_is_the_contracts_arithmetic() {
        // minFee 1000 = 1 bp: 1 bp of 1,000 USDC is 0.1 USDC.
        assert_eq!(onchain_min_fee(U256::from(1_000_000_000u64), U256::from(1000u64)), Some(U256::from(100_000u64)));
        assert_eq!(onchain_min_fee(U256::from(50u64), U256::from(1000u64)), Some(U256::from(1u64)), "at least 1");
        assert_eq!(onchain_min_fee(U256::from(1u64), U256::from(1000u64)), None, "Amount too low");
        assert_eq!(onchain_min_fee(U256::from(1u64), U256::ZERO), Some(U256::ZERO));
    }
}
