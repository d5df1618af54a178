//! Canonical JSON — RFC 8785, the JSON Canonicalization Scheme (JCS), which every language
//! has a library for — and its sha256: plan, intent and body hashes, and the bytes an HMAC
//! over a gRPC call covers. Keys are sorted by UTF-16 code units, numbers are IEEE-754
//! doubles written as ECMAScript writes them (`0.00001`, `1e-7`, `1e+21`, `-0` → `0`), strings
//! escape only `"`, `\\` and control characters.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The RFC 8785 form of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        Value::Number(n) => out.push_str(&ecmascript_number(n.as_f64().unwrap_or(f64::NAN))),
        other => out.push_str(&other.to_string()),
    }
}

/// A double as ECMAScript's `Number.prototype.toString` writes it (RFC 8785 §3.2.2.3).
fn ecmascript_number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        // -0 is 0; JSON has no NaN or infinity (serde_json cannot hold them).
        return "0".into();
    }
    // The shortest digits that round-trip, and the decimal exponent: d.ddd × 10^e.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let e: i32 = exp.parse().unwrap_or(0);
    let (k, n) = (digits.len() as i32, e + 1);
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let rest = if k > 1 { format!(".{}", &digits[1..]) } else { String::new() };
        let sign = if n - 1 < 0 { '-' } else { '+' };
        format!("{}{rest}e{sign}{}", &digits[..1], (n - 1).abs())
    };
    if x < 0.0 {
        format!("-{body}")
    } else {
        body
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// hex sha256 of the canonical JSON form.
pub fn canonical_hash(value: &Value) -> String {
    sha256_hex(canonical_json(value).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_are_written_as_ecmascript_does() {
        for (x, s) in [
            (1e-5, "0.00001"),
            (1e-7, "1e-7"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012.345, "123456789012.345"),
            (-1.5, "-1.5"),
            (2.0, "2"),
            (-0.0, "0"),
            (0.1, "0.1"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740991.0, "9007199254740991"),
        ] {
            assert_eq!(ecmascript_number(x), s, "{x}");
        }
    }

    #[test]
    fn key_order_does_not_change_the_hash() {
        let a = json!({"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": null}});
        let b: Value = serde_json::from_str(r#"{"a":{"x":null,"y":[1,{"c":3,"d":2}]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":null,"y":[1,{"c":3,"d":2}]},"b":1}"#);
        assert_eq!(canonical_hash(&a), canonical_hash(&b));
    }

    #[test]
    fn sha256_known_value() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
