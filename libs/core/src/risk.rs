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
    /// sides, no sign, no exponent, at most 78 characters (an amount a client may send).
    pub fn parse(s: &str) -> Option<Amount> {
        if s.len() > 78 {
            return None;
        }
        Self::parse_any(s)
    }

    /// Like [`Amount::parse`] without the length bound: for sums the database computed, which
    /// may be longer than any single amount.
    pub fn parse_any(s: &str) -> Option<Amount> {
        if s.is_empty() {
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

    /// Exact difference; `None` when `other` is larger (amounts are never negative).
    pub fn checked_sub(&self, other: &Amount) -> Option<Amount> {
        if other > self {
            return None;
        }
        let scale = self.frac.len().max(other.frac.len());
        let digits = |a: &Amount| format!("{}{:0<scale$}", a.int, a.frac);
        let (a, b) = (digits(self), digits(other));
        let width = a.len().max(b.len());
        let (a, b) = (format!("{a:0>width$}"), format!("{b:0>width$}"));
        let mut out = Vec::with_capacity(width);
        let mut borrow = 0u8;
        for (x, y) in a.bytes().rev().zip(b.bytes().rev()) {
            let (x, y) = (x - b'0', y - b'0' + borrow);
            let (d, next) = if x >= y { (x - y, 0) } else { (x + 10 - y, 1) };
            out.push(b'0' + d);
            borrow = next;
        }
        out.reverse();
        let all = String::from_utf8(out).unwrap_or_default();
        let (int, frac) = all.split_at(all.len() - scale);
        Some(Amount { int: int.trim_start_matches('0').to_string(), frac: frac.trim_end_matches('0').to_string() })
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

/// `required` distinct approvers for amounts at or above `threshold` (every amount when
/// `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRule {
    pub required: u32,
    pub threshold: Option<Amount>,
}

/// The limits qtg itself enforces. `default()` enforces nothing. Combining two sets
/// ([`RiskLimits::stricter`]) keeps every velocity window and every approval rule, so each
/// source of limits holds on its own terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RiskLimits {
    /// No single movement above this amount.
    pub hard_cap: Option<Amount>,
    /// Each window is checked on its own.
    pub velocity: Vec<Velocity>,
    /// When set, `intent.destination` must be one of these.
    pub destination_allowlist: Option<Vec<String>>,
    /// The movement needs the most approvers any rule asks for (1 without rules).
    pub approval_rules: Vec<ApprovalRule>,
    /// When set, `intent.asset` must be one of these (case-insensitive): `per_asset`'s keys
    /// or `allowed_assets`.
    pub allowed_assets: Option<Vec<String>>,
    /// Intent fields the template requires, each with its format (`intent_fields`), so a
    /// requester cannot leave out or invent the values a limit is keyed on.
    pub intent_fields: Vec<(String, FieldFormat)>,
}

/// The format of a required intent field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldFormat {
    /// Any string that is not blank (a limit keyed on it trims and case-folds it).
    Text,
    /// `0x` and 40 hex digits.
    EvmAddress,
    /// A decimal string (digits, at most one point).
    Decimal,
}

impl FieldFormat {
    fn parse(s: &str) -> Option<FieldFormat> {
        match s {
            "text" => Some(FieldFormat::Text),
            "evm_address" => Some(FieldFormat::EvmAddress),
            "decimal" => Some(FieldFormat::Decimal),
            _ => None,
        }
    }

    fn accepts(self, v: &Value) -> bool {
        let Some(s) = v.as_str().or_else(|| v.get("address").and_then(Value::as_str)) else { return false };
        match self {
            FieldFormat::Text => !s.trim().is_empty(),
            FieldFormat::EvmAddress => {
                s.len() == 42 && s.starts_with("0x") && s[2..].bytes().all(|b| b.is_ascii_hexdigit())
            }
            FieldFormat::Decimal => Amount::parse(s).is_some(),
        }
    }
}

/// The most approvers a template may demand.
pub const MAX_APPROVALS: u32 = 10;
/// Longest velocity window: 31 days.
pub const MAX_WINDOW_SECONDS: i64 = 31 * 86_400;

impl RiskLimits {
    /// The limits of a movement of `asset` under a plan's `risk_controls`: the top-level ones
    /// and, with `per_asset`, that asset's own (both apply, the stricter winning).
    pub fn for_asset(controls: &Value, asset: &str) -> Result<RiskLimits, String> {
        let limits = Self::from_plan(controls)?;
        let per_asset = controls.get("per_asset").and_then(Value::as_object);
        let own = per_asset.and_then(|m| m.iter().find(|(k, _)| k.eq_ignore_ascii_case(asset.trim())).map(|(_, v)| v));
        match own {
            Some(v) => Ok(limits.stricter(&Self::from_plan(v)?)),
            None => Ok(limits),
        }
    }

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
        let mut out = RiskLimits::default();
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
            out.velocity = vec![Velocity { amount, window_seconds }];
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
        let required = obj
            .get("approvals_required")
            .map(|v| {
                v.as_u64()
                    .filter(|n| (1..=u64::from(MAX_APPROVALS)).contains(n))
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| format!("risk_controls.approvals_required must be an integer 1-{MAX_APPROVALS}"))
            })
            .transpose()?;
        let threshold =
            obj.get("multi_approval_threshold").map(|v| amount("multi_approval_threshold", v)).transpose()?;
        match (required, threshold) {
            (Some(required), threshold) => out.approval_rules.push(ApprovalRule { required, threshold }),
            (None, Some(_)) => {
                return Err("risk_controls.multi_approval_threshold needs approvals_required".into());
            }
            (None, None) => {}
        }
        if let Some(v) = obj.get("per_asset") {
            let bad = || "risk_controls.per_asset must be {\"<ASSET>\": {hard_cap, velocity_limit, …}, …}".to_string();
            let m = v.as_object().filter(|m| !m.is_empty() && m.len() <= 100).ok_or_else(bad)?;
            for (asset, limits) in m {
                if asset.trim().is_empty() || asset.trim() != asset || !limits.is_object() {
                    return Err(bad());
                }
                if limits.get("per_asset").is_some() || limits.get("allowed_assets").is_some() {
                    return Err("risk_controls.per_asset entries take limits, not assets".into());
                }
                Self::from_plan(limits)
                    .map_err(|e| e.replace("risk_controls.", &format!("risk_controls.per_asset.{asset}.")))?;
            }
            out.allowed_assets = Some(m.keys().cloned().collect());
        }
        if let Some(v) = obj.get("allowed_assets") {
            let bad = || "risk_controls.allowed_assets must be a list of 1-100 asset names".to_string();
            let list = v.as_array().filter(|l| !l.is_empty() && l.len() <= 100).ok_or_else(bad)?;
            let list: Vec<String> = list
                .iter()
                .map(|a| a.as_str().filter(|s| !s.trim().is_empty() && s.trim() == *s).map(String::from))
                .collect::<Option<_>>()
                .ok_or_else(bad)?;
            out.allowed_assets = Some(match out.allowed_assets.take() {
                Some(keys) => keys.into_iter().filter(|k| list.iter().any(|a| a.eq_ignore_ascii_case(k))).collect(),
                None => list,
            });
        }
        if let Some(v) = obj.get("intent_fields") {
            let bad = || {
                "risk_controls.intent_fields must be {\"<field>\": \"text\"|\"evm_address\"|\"decimal\", …}".to_string()
            };
            let m = v.as_object().filter(|m| m.len() <= 20).ok_or_else(bad)?;
            for (field, format) in m {
                let format = format.as_str().and_then(FieldFormat::parse).ok_or_else(bad)?;
                out.intent_fields.push((field.clone(), format));
            }
        }
        Ok(out)
    }

    /// Both sets of limits at once: the lower hard cap, the intersection of allow-lists, and
    /// every velocity window and approval rule of either.
    pub fn stricter(self, other: &RiskLimits) -> RiskLimits {
        let hard_cap = match (self.hard_cap, &other.hard_cap) {
            (Some(a), Some(b)) => Some(a.min(b.clone())),
            (a, b) => a.or_else(|| b.clone()),
        };
        let destination_allowlist = match (self.destination_allowlist, &other.destination_allowlist) {
            (Some(a), Some(b)) => Some(a.into_iter().filter(|d| b.contains(d)).collect()),
            (a, b) => a.or_else(|| b.clone()),
        };
        let mut velocity = self.velocity;
        velocity.extend(other.velocity.iter().cloned());
        let mut approval_rules = self.approval_rules;
        approval_rules.extend(other.approval_rules.iter().cloned());
        let allowed_assets = match (self.allowed_assets, &other.allowed_assets) {
            (Some(a), Some(b)) => Some(a.into_iter().filter(|x| b.iter().any(|y| y.eq_ignore_ascii_case(x))).collect()),
            (a, b) => a.or_else(|| b.clone()),
        };
        let mut intent_fields = self.intent_fields;
        intent_fields.extend(other.intent_fields.iter().cloned());
        RiskLimits { hard_cap, velocity, destination_allowlist, approval_rules, allowed_assets, intent_fields }
    }

    /// Distinct approvers this amount needs: the most any rule asks for, at least 1.
    pub fn approvals_needed(&self, amount: &Amount) -> u32 {
        self.approval_rules
            .iter()
            .filter(|r| r.threshold.as_ref().is_none_or(|t| amount >= t))
            .map(|r| r.required)
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// Checks the limits that need no history: the asset, the required intent fields, the hard
    /// cap and the destination.
    pub fn check_static(&self, amount: &Amount, intent: &Value) -> Result<(), RiskViolation> {
        let asset = intent.get("asset").and_then(Value::as_str).unwrap_or("");
        if let Some(list) = &self.allowed_assets {
            if !list.iter().any(|a| a.eq_ignore_ascii_case(asset.trim())) {
                return Err(RiskViolation {
                    limit: "allowed_assets",
                    message: format!("asset {asset:?} is not one this template moves ({})", list.join(", ")),
                });
            }
        }
        for (field, format) in &self.intent_fields {
            if !intent.get(field).is_some_and(|v| format.accepts(v)) {
                return Err(RiskViolation {
                    limit: "intent_fields",
                    message: format!("intent.{field} is required as {format:?} by this template"),
                });
            }
        }
        let destination = intent.get("destination");
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
                        message: "intent.destination must be a string, or an object with only \"address\", when a \
                                  destination allow-list applies"
                            .into(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Checks one velocity window given what other live movements of the same asset and
    /// source already committed inside it.
    pub fn check_velocity(v: &Velocity, amount: &Amount, used: &Amount) -> Result<(), RiskViolation> {
        {
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

/// The string an allow-list matches: the destination itself, or the `address` of an object
/// that holds nothing else (a memo, tag or chain beside an allowed address would send funds
/// somewhere the list never named).
pub fn destination_key(d: &Value) -> Option<&str> {
    match d {
        Value::String(s) => Some(s),
        Value::Object(o) if o.len() == 1 => o.get("address").and_then(Value::as_str),
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
mod asset_tests {
    use super::*;
    use serde_json::json;

    fn a(s: &str) -> Amount {
        Amount::parse(s).unwrap()
    }

    #[test]
    fn limits_are_per_asset_and_the_asset_must_be_allowed() {
        let controls = json!({"hard_cap": "1000000", "per_asset": {
            "USDC": {"hard_cap": "1000", "velocity_limit": {"amount": "5000", "window_seconds": 3600}},
            "ETH": {"hard_cap": "2"}}});
        RiskLimits::from_plan(&controls).unwrap();
        let usdc = RiskLimits::for_asset(&controls, "usdc").unwrap();
        assert_eq!(usdc.hard_cap.as_ref().map(|c| c.to_string()).as_deref(), Some("1000"));
        assert_eq!(usdc.velocity.len(), 1);
        let eth = RiskLimits::for_asset(&controls, "ETH").unwrap();
        assert_eq!(eth.check_static(&a("3"), &json!({"asset": "ETH"})).unwrap_err().limit, "hard_cap");
        assert!(eth.check_static(&a("1.5"), &json!({"asset": "ETH"})).is_ok());
        let other = RiskLimits::for_asset(&controls, "DOGE").unwrap();
        assert_eq!(other.check_static(&a("1"), &json!({"asset": "DOGE"})).unwrap_err().limit, "allowed_assets");
        assert!(RiskLimits::from_plan(&json!({"per_asset": {"USDC": {"hard_cap": "-1"}}}))
            .unwrap_err()
            .contains("per_asset.USDC"));
        assert!(RiskLimits::from_plan(&json!({"allowed_assets": []})).is_err());
    }

    #[test]
    fn required_intent_fields_have_their_format() {
        let l = RiskLimits::from_plan(&json!({"intent_fields": {"source": "evm_address", "memo": "text"}})).unwrap();
        let ok = json!({"asset": "USDC", "source": "0x00000000000000000000000000000000000000aa", "memo": "payroll"});
        assert!(l.check_static(&a("1"), &ok).is_ok());
        for bad in [
            json!({"asset": "USDC", "memo": "payroll"}),
            json!({"asset": "USDC", "source": "0xAA", "memo": "payroll"}),
            json!({"asset": "USDC", "source": "0x00000000000000000000000000000000000000aa", "memo": "   "}),
        ] {
            assert_eq!(l.check_static(&a("1"), &bad).unwrap_err().limit, "intent_fields", "{bad}");
        }
        assert!(RiskLimits::from_plan(&json!({"intent_fields": {"source": "regex"}})).is_err());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn subtraction_is_exact_and_never_negative() {
        let a = |s: &str| Amount::parse(s).unwrap();
        assert_eq!(a("100").checked_sub(&a("1")).map(|x| x.to_string()), Some("99".into()));
        assert_eq!(a("10.05").checked_sub(&a("0.0501")).map(|x| x.to_string()), Some("9.9999".into()));
        assert_eq!(a("1").checked_sub(&a("1")).map(|x| x.is_zero()), Some(true));
        assert_eq!(a("0.5").checked_sub(&a("0.50000001")), None);
        assert_eq!(
            a("1000000000000000000000").checked_sub(&a("0.000000000000000001")).map(|x| x.to_string()),
            Some("999999999999999999999.999999999999999999".into())
        );
    }

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
        fn add_and_cmp_agree_with_integers(
            x in 0u64..u64::MAX / 4,
            y in 0u64..u64::MAX / 4,
            sx in 0u32..6,
            sy in 0u32..6
        ) {
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
        assert_eq!(l.check_static(&a("1000.01"), &json!({"destination": "acct-1"})).unwrap_err().limit, "hard_cap");
        assert!(l.check_static(&a("10"), &json!({"destination": {"address": "0xabc"}})).is_ok());
        assert_eq!(
            l.check_static(&a("10"), &json!({"destination": "acct-9"})).unwrap_err().limit,
            "destination_allowlist"
        );
        assert_eq!(l.check_static(&a("10"), &json!({})).unwrap_err().limit, "destination_allowlist");
        let v = &l.velocity[0];
        assert!(RiskLimits::check_velocity(v, &a("500"), &a("1000")).is_ok());
        assert_eq!(RiskLimits::check_velocity(v, &a("500.01"), &a("1000")).unwrap_err().limit, "velocity_limit");
        assert_eq!(
            l.check_static(&a("10"), &json!({"destination": {"address": "0xabc", "memo": "x"}})).unwrap_err().limit,
            "destination_allowlist",
            "an allowed address with a memo is not the allowed destination"
        );
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
            json!({"approvals_required": 2, "multi_approval_threshold": "-1"}),
            json!({"multi_approval_threshold": "5"}),
        ] {
            assert!(RiskLimits::from_plan(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn stricter_keeps_each_source_on_its_own_terms() {
        let t = RiskLimits::from_plan(&json!({"hard_cap": "1000", "destination_allowlist": ["a", "b"],
            "velocity_limit": {"amount": "1000", "window_seconds": 60},
            "approvals_required": 3, "multi_approval_threshold": "1000000"}))
        .unwrap();
        let g = RiskLimits::from_plan(&json!({"hard_cap": "500", "destination_allowlist": ["b", "c"],
            "velocity_limit": {"amount": "100000", "window_seconds": 2_678_400}, "approvals_required": 2}))
        .unwrap();
        let s = t.clone().stricter(&g);
        assert_eq!(s.hard_cap, Some(a("500")));
        assert_eq!(s.destination_allowlist, Some(vec!["b".to_string()]));
        // Each window stays its own: not 1000 per 31 days.
        assert_eq!(s.velocity.len(), 2);
        // A template threshold never loosens a global "2 for everything", and vice versa.
        assert_eq!(s.approvals_needed(&a("500")), 2);
        assert_eq!(s.approvals_needed(&a("1000000")), 3);
        assert_eq!(g.stricter(&t).approvals_needed(&a("1")), 2);
        let only_threshold =
            RiskLimits::from_plan(&json!({"approvals_required": 2, "multi_approval_threshold": "500"})).unwrap();
        let everyone = RiskLimits::from_plan(&json!({"approvals_required": 2})).unwrap();
        assert_eq!(everyone.stricter(&only_threshold).approvals_needed(&a("1")), 2);
    }

    #[test]
    fn database_sums_longer_than_an_amount_still_parse() {
        let dust = format!("0.{}1", "0".repeat(75));
        assert!(Amount::parse(&dust).is_some());
        let sum = a("100").add(&a(&dust)).to_string();
        assert!(sum.len() > 78);
        assert!(Amount::parse(&sum).is_none());
        assert_eq!(Amount::parse_any(&sum).map(|s| s > a("100")), Some(true));
    }
}
