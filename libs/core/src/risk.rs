//! Risk limits qtg enforces itself (at creation and again at approval): a per-movement hard
//! cap, a rolling velocity limit per asset and source, a destination allow-list, and m-of-n
//! approval above a threshold. Limits come from a plan's `risk_controls` and from global
//! settings; where both set one, the stricter wins. Other keys in `risk_controls` (e.g. a
//! venue's `max_fee`) are left to executors.
//!
//! Amounts are decimal strings of any size (a uint256 of wei fits), compared exactly.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

/// A non-negative decimal, exact: integer digits and fraction digits without padding zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Amount {
    int: String,
    frac: String,
}

impl Amount {
    pub const ZERO: Amount = Amount { int: String::new(), frac: String::new() };

    /// Parses `"123"`, `"0.5"`, `"100.50"`: digits, at most one point with digits on both
    /// sides, no sign, no exponent, at most 78 characters.
    pub fn parse(s: &str) -> Option<Amount> {
        if s.is_empty() || s.len() > 78 {
            return None;
        }
        let (int, frac) = match s.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (s, None),
        };
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if !digits(int) || frac.is_some_and(|f| !digits(f)) {
            return None;
        }
        Some(Amount {
            int: int.trim_start_matches('0').to_string(),
            frac: frac.unwrap_or("").trim_end_matches('0').to_string(),
        })
    }

    pub fn is_zero(&self) -> bool {
        self.int.is_empty() && self.frac.is_empty()
    }

    /// Exact sum.
    pub fn add(&self, other: &Amount) -> Amount {
        let scale = self.frac.len().max(other.frac.len());
        let digits = |a: &Amount| format!("{}{:0<scale$}", a.int, a.frac);
        let (a, b) = (digits(self), digits(other));
        let width = a.len().max(b.len());
        let (a, b) = (format!("{a:0>width$}"), format!("{b:0>width$}"));
        let mut out = Vec::with_capacity(width + 1);
        let mut carry = 0;
        for (x, y) in a.bytes().rev().zip(b.bytes().rev()) {
            let d = (x - b'0') + (y - b'0') + carry;
            out.push(b'0' + d % 10);
            carry = d / 10;
        }
        if carry > 0 {
            out.push(b'0' + carry);
        }
        out.reverse();
        let all = String::from_utf8(out).unwrap_or_default();
        let (int, frac) = all.split_at(all.len() - scale);
        Amount { int: int.trim_start_matches('0').to_string(), frac: frac.trim_end_matches('0').to_string() }
    }
}

impl Ord for Amount {
    fn cmp(&self, other: &Self) -> Ordering {
        self.int.len().cmp(&other.int.len()).then_with(|| self.int.cmp(&other.int)).then_with(|| {
            let scale = self.frac.len().max(other.frac.len());
            format!("{:0<scale$}", self.frac).cmp(&format!("{:0<scale$}", other.frac))
        })
    }
}

impl PartialOrd for Amount {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let int = if self.int.is_empty() { "0" } else { &self.int };
        if self.frac.is_empty() {
            write!(f, "{int}")
        } else {
            write!(f, "{int}.{}", self.frac)
        }
    }
}

/// A rolling limit: at most `amount` per `window_seconds`, per asset and source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Velocity {
    pub amount: Amount,
    pub window_seconds: i64,
}

/// The limits qtg itself enforces. Every field optional; `default()` enforces nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RiskLimits {
    /// No single movement above this amount.
    pub hard_cap: Option<Amount>,
    pub velocity: Option<Velocity>,
    /// When set, `intent.destination` must be one of these.
    pub destination_allowlist: Option<Vec<String>>,
    /// Distinct approvers needed at or above `multi_approval_threshold` (1 when unset).
    pub approvals_required: u32,
    /// Amount from which `approvals_required` applies (every amount when unset).
    pub multi_approval_threshold: Option<Amount>,
}

/// The most approvers a template may demand.
pub const MAX_APPROVALS: u32 = 10;
/// Longest velocity window: 31 days.
pub const MAX_WINDOW_SECONDS: i64 = 31 * 86_400;

impl RiskLimits {
    /// Reads the known keys of a plan's `risk_controls`, refusing a known key with a bad value.
    pub fn from_plan(controls: &Value) -> Result<RiskLimits, String> {
        let empty = serde_json::Map::new();
        let obj = controls.as_object().unwrap_or(&empty);
        let amount = |key: &str, v: &Value| -> Result<Amount, String> {
            v.as_str()
                .and_then(Amount::parse)
                .filter(|a| !a.is_zero())
                .ok_or_else(|| format!("risk_controls.{key} must be a decimal string greater than 0, e.g. \"1000\""))
        };
        let mut out = RiskLimits { approvals_required: 1, ..Default::default() };
        if let Some(v) = obj.get("hard_cap") {
            out.hard_cap = Some(amount("hard_cap", v)?);
        }
        if let Some(v) = obj.get("velocity_limit") {
            let bad = || {
                "risk_controls.velocity_limit must be {\"amount\": \"<decimal > 0>\", \"window_seconds\": 1..2678400}"
                    .to_string()
            };
            let o = v.as_object().ok_or_else(bad)?;
            if o.keys().any(|k| k != "amount" && k != "window_seconds") {
                return Err(bad());
            }
            let amount = o.get("amount").map(|a| amount("velocity_limit.amount", a)).transpose()?.ok_or_else(bad)?;
            let window_seconds = o
                .get("window_seconds")
                .and_then(Value::as_i64)
                .filter(|w| (1..=MAX_WINDOW_SECONDS).contains(w))
                .ok_or_else(bad)?;
            out.velocity = Some(Velocity { amount, window_seconds });
        }
        if let Some(v) = obj.get("destination_allowlist") {
            let bad = || "risk_controls.destination_allowlist must be a list of 1-1000 non-empty strings".to_string();
            let list = v.as_array().filter(|l| !l.is_empty() && l.len() <= 1000).ok_or_else(bad)?;
            let list = list
                .iter()
                .map(|d| d.as_str().filter(|s| !s.is_empty() && s.len() <= 256).map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?;
            out.destination_allowlist = Some(list);
        }
        if let Some(v) = obj.get("approvals_required") {
            out.approvals_required = v
                .as_u64()
                .filter(|n| (1..=u64::from(MAX_APPROVALS)).contains(n))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("risk_controls.approvals_required must be an integer 1-{MAX_APPROVALS}"))?;
        }
        if let Some(v) = obj.get("multi_approval_threshold") {
            out.multi_approval_threshold = Some(amount("multi_approval_threshold", v)?);
        }
        Ok(out)
    }

    /// The stricter of two sets of limits, field by field.
    pub fn stricter(self, other: &RiskLimits) -> RiskLimits {
        fn min_amount(a: Option<Amount>, b: &Option<Amount>) -> Option<Amount> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b.clone())),
                (a, b) => a.or_else(|| b.clone()),
            }
        }
        let velocity = match (self.velocity, &other.velocity) {
            // Both apply: keep each as its own window; the tighter amount over the longer
            // window is the conservative single limit.
            (Some(a), Some(b)) => Some(Velocity {
                amount: a.amount.min(b.amount.clone()),
                window_seconds: a.window_seconds.max(b.window_seconds),
            }),
            (a, b) => a.or_else(|| b.clone()),
        };
        let destination_allowlist = match (self.destination_allowlist, &other.destination_allowlist) {
            (Some(a), Some(b)) => Some(a.into_iter().filter(|d| b.contains(d)).collect()),
            (a, b) => a.or_else(|| b.clone()),
        };
        RiskLimits {
            hard_cap: min_amount(self.hard_cap, &other.hard_cap),
            velocity,
            destination_allowlist,
            approvals_required: self.approvals_required.max(other.approvals_required),
            multi_approval_threshold: min_amount(self.multi_approval_threshold, &other.multi_approval_threshold),
        }
    }

    /// Distinct approvers this amount needs.
    pub fn approvals_needed(&self, amount: &Amount) -> u32 {
        match &self.multi_approval_threshold {
            Some(t) if amount < t => 1,
            _ => self.approvals_required.max(1),
        }
    }

    /// Checks the limits that need no history: hard cap and destination.
    pub fn check_static(&self, amount: &Amount, destination: Option<&Value>) -> Result<(), RiskViolation> {
        if let Some(cap) = &self.hard_cap {
            if amount > cap {
                return Err(RiskViolation {
                    limit: "hard_cap",
                    message: format!("amount {amount} is above the hard cap {cap}"),
                });
            }
        }
        if let Some(list) = &self.destination_allowlist {
            match destination.and_then(destination_key) {
                Some(d) if list.iter().any(|a| a == d) => {}
                Some(d) => {
                    return Err(RiskViolation {
                        limit: "destination_allowlist",
                        message: format!("destination {d:?} is not on the allow-list"),
                    })
                }
                None => {
                    return Err(RiskViolation {
                        limit: "destination_allowlist",
                        message: "intent.destination is required (a string, or an object with \"address\") when a \
                                  destination allow-list applies"
                            .into(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Checks the velocity limit given what other live movements of the same asset and source
    /// already committed inside the window.
    pub fn check_velocity(&self, amount: &Amount, used: &Amount) -> Result<(), RiskViolation> {
        if let Some(v) = &self.velocity {
            let total = used.add(amount);
            if total > v.amount {
                return Err(RiskViolation {
                    limit: "velocity_limit",
                    message: format!(
                        "amount {amount} plus {used} already moving for this asset and source in the last {}s \
                         exceeds the velocity limit {}",
                        v.window_seconds, v.amount
                    ),
                });
            }
        }
        Ok(())
    }
}

/// The string an allow-list matches: the destination itself, or its `address`.
pub fn destination_key(d: &Value) -> Option<&str> {
    match d {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("address").and_then(Value::as_str),
        _ => None,
    }
}

/// A refused movement: which limit, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RiskViolation {
    pub limit: &'static str,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn a(s: &str) -> Amount {
        Amount::parse(s).unwrap()
    }

    #[test]
    fn amounts_parse_compare_and_add() {
        assert_eq!(a("100.50").to_string(), "100.5");
        assert_eq!(a("000.000").to_string(), "0");
        assert!(a("0").is_zero());
        for bad in ["", "-1", "1e5", ".5", "5.", "1.2.3", " 1", "+1", "abc"] {
            assert!(Amount::parse(bad).is_none(), "{bad}");
        }
        assert!(a("10") > a("9.999999"));
        assert!(a("0.1") < a("0.10001"));
        assert_eq!(a("1.5").cmp(&a("1.50")), Ordering::Equal);
        assert_eq!(a("999.99").add(&a("0.01")).to_string(), "1000");
        let wei = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
        assert_eq!(a(wei).add(&a("1")).to_string().len(), 78);
    }

    proptest! {
        #[test]
        fn add_and_cmp_agree_with_integers(x in 0u64..u64::MAX / 4, y in 0u64..u64::MAX / 4, sx in 0u32..6, sy in 0u32..6) {
            // x / 10^sx as a decimal string
            let dec = |v: u128, s: u32| {
                let digits = format!("{v:0>width$}", width = s as usize + 1);
                let (i, f) = digits.split_at(digits.len() - s as usize);
                if f.is_empty() { i.to_string() } else { format!("{i}.{f}") }
            };
            let (ax, ay) = (a(&dec(u128::from(x), sx)), a(&dec(u128::from(y), sy)));
            // Compare on a common scale of 10^6 in u128.
            let scaled = |v: u64, s: u32| u128::from(v) * 10u128.pow(6 - s);
            prop_assert_eq!(ax.cmp(&ay), scaled(x, sx).cmp(&scaled(y, sy)));
            let sum = scaled(x, sx) + scaled(y, sy);
            prop_assert_eq!(ax.add(&ay), a(&dec(sum, 6)));
        }
    }

    #[test]
    fn limits_from_plan() {
        let l = RiskLimits::from_plan(&json!({
            "hard_cap": "1000", "max_fee": "5",
            "velocity_limit": {"amount": "1500", "window_seconds": 3600},
            "destination_allowlist": ["acct-1", "0xabc"],
            "approvals_required": 2, "multi_approval_threshold": "500"
        }))
        .unwrap();
        assert_eq!(l.hard_cap, Some(a("1000")));
        assert_eq!(l.approvals_needed(&a("499.99")), 1);
        assert_eq!(l.approvals_needed(&a("500")), 2);
        assert_eq!(l.check_static(&a("1000.01"), Some(&json!("acct-1"))).unwrap_err().limit, "hard_cap");
        assert!(l.check_static(&a("10"), Some(&json!({"address": "0xabc"}))).is_ok());
        assert_eq!(l.check_static(&a("10"), Some(&json!("acct-9"))).unwrap_err().limit, "destination_allowlist");
        assert_eq!(l.check_static(&a("10"), None).unwrap_err().limit, "destination_allowlist");
        assert!(l.check_velocity(&a("500"), &a("1000")).is_ok());
        assert_eq!(l.check_velocity(&a("500.01"), &a("1000")).unwrap_err().limit, "velocity_limit");
        assert_eq!(RiskLimits::from_plan(&json!({})).unwrap().approvals_needed(&a("1")), 1);
        for bad in [
            json!({"hard_cap": 1000}),
            json!({"hard_cap": "0"}),
            json!({"velocity_limit": {"amount": "1"}}),
            json!({"velocity_limit": {"amount": "1", "window_seconds": 0}}),
            json!({"velocity_limit": {"amount": "1", "window_seconds": 60, "x": 1}}),
            json!({"destination_allowlist": []}),
            json!({"destination_allowlist": [1]}),
            json!({"approvals_required": 0}),
            json!({"approvals_required": 11}),
            json!({"multi_approval_threshold": "-1"}),
        ] {
            assert!(RiskLimits::from_plan(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn stricter_takes_the_tighter_of_each() {
        let t = RiskLimits::from_plan(&json!({"hard_cap": "1000", "destination_allowlist": ["a", "b"]})).unwrap();
        let g = RiskLimits {
            hard_cap: Some(a("500")),
            velocity: Some(Velocity { amount: a("2000"), window_seconds: 60 }),
            destination_allowlist: Some(vec!["b".into(), "c".into()]),
            approvals_required: 1,
            multi_approval_threshold: None,
        };
        let s = t.stricter(&g);
        assert_eq!(s.hard_cap, Some(a("500")));
        assert_eq!(s.velocity.unwrap().amount, a("2000"));
        assert_eq!(s.destination_allowlist, Some(vec!["b".to_string()]));
    }
}
