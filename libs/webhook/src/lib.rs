//! qtg's v3 request signature (DESIGN.md §5), used for callbacks and for HMAC-authenticated
//! executor calls: hex HMAC-SHA256(secret, `{timestamp}\n{nonce}\n{hex sha256(body)}`), sent
//! as `X-QTG-Callback-Timestamp`, `X-QTG-Callback-Nonce`, `X-QTG-Callback-Signature-Version:
//! v3` and `X-QTG-Callback-Signature`. Receivers verify with [`verify`].

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

pub const HEADER_TIMESTAMP: &str = "X-QTG-Callback-Timestamp";
pub const HEADER_NONCE: &str = "X-QTG-Callback-Nonce";
pub const HEADER_VERSION: &str = "X-QTG-Callback-Signature-Version";
pub const HEADER_SIGNATURE: &str = "X-QTG-Callback-Signature";
pub const VERSION: &str = "v3";

type HmacSha256 = Hmac<Sha256>;

/// The signed message: `{timestamp}\n{nonce}\n{hex sha256(body)}`.
pub fn message(timestamp: &str, nonce: &str, body: &[u8]) -> String {
    format!("{timestamp}\n{nonce}\n{}", hex::encode(Sha256::digest(body)))
}

/// hex HMAC-SHA256 of the message under `secret`.
pub fn sign(secret: &[u8], timestamp: &str, nonce: &str, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(message(timestamp, nonce, body).as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("signature version {0:?} is not v3")]
    Version(String),
    #[error("timestamp is not a unix time in seconds")]
    BadTimestamp,
    #[error("timestamp is {0} s away from now, outside the tolerance")]
    Stale(i64),
    #[error("signature does not match any secret")]
    Mismatch,
}

/// The four signature headers' values.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub version: &'a str,
    pub timestamp: &'a str,
    pub nonce: &'a str,
    pub signature: &'a str,
}

/// Verifies a signed request. `secrets` may hold the current and previous secrets (rotation);
/// `now` and `tolerance_seconds` bound replay of old deliveries.
pub fn verify(
    signed: &Signed<'_>,
    body: &[u8],
    secrets: &[&[u8]],
    now: i64,
    tolerance_seconds: i64,
) -> Result<(), VerifyError> {
    if signed.version != VERSION {
        return Err(VerifyError::Version(signed.version.to_string()));
    }
    let ts: i64 = signed.timestamp.parse().map_err(|_| VerifyError::BadTimestamp)?;
    if (now - ts).abs() > tolerance_seconds {
        return Err(VerifyError::Stale(now - ts));
    }
    let Ok(given) = hex::decode(signed.signature) else { return Err(VerifyError::Mismatch) };
    let msg = message(signed.timestamp, signed.nonce, body);
    for secret in secrets {
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
        mac.update(msg.as_bytes());
        // Constant-time comparison.
        if mac.verify_slice(&given).is_ok() {
            return Ok(());
        }
    }
    Err(VerifyError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_shared_vectors() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/vectors/callback_v3.json"))
                .or_else(|_| std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/callback_v3.json")))
                .expect("callback_v3.json vectors");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for case in v["cases"].as_array().unwrap() {
            let s = |k: &str| case[k].as_str().unwrap();
            let body = s("body_utf8").as_bytes();
            assert_eq!(message(s("timestamp"), s("nonce"), body), s("signed_message_utf8"));
            let sig = sign(s("secret_utf8").as_bytes(), s("timestamp"), s("nonce"), body);
            assert_eq!(sig, s("signature_hex"));
            let ts: i64 = s("timestamp").parse().unwrap();
            let signed = Signed { version: "v3", timestamp: s("timestamp"), nonce: s("nonce"), signature: &sig };
            let secret = s("secret_utf8").as_bytes();
            verify(&signed, body, &[b"old", secret], ts, 300).unwrap();
            assert_eq!(verify(&signed, b"tampered", &[secret], ts, 300), Err(VerifyError::Mismatch));
            assert!(matches!(verify(&signed, body, &[secret], ts + 301, 300), Err(VerifyError::Stale(_))));
            let v2 = Signed { version: "v2", ..signed };
            assert!(matches!(verify(&v2, body, &[secret], ts, 300), Err(VerifyError::Version(_))));
        }
    }
}
