//! How qtg's wire calls authenticate, defined once for every end: the executor/signer client
//! (`qtg-executor`), the SDK's server (`qtg-executor-sdk`) and the callbacks qtg sends.
//!
//! Two schemes:
//! - **bearer**: `authorization: Bearer <token>`;
//! - **v3 signature**: hex HMAC-SHA256(secret, `{timestamp}\n{nonce}\n{hex sha256(body)}`),
//!   sent as `x-qtg-callback-timestamp` (unix seconds), `x-qtg-callback-nonce`,
//!   `x-qtg-callback-signature-version: v3` and `x-qtg-callback-signature`. The body is the
//!   HTTP body; over gRPC it is [`grpc_signed_bytes`] of the request message. A receiver
//!   accepts a timestamp within [`TOLERANCE_SECONDS`] of its clock and any of its secrets
//!   (rotation).
//!
//! Clients hold [`Credentials`], servers a [`Verifier`]; callbacks are signed with [`sign`].
//! Header names are lower case (HTTP/2 and gRPC metadata require it; HTTP/1 is
//! case-insensitive).

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

pub const HEADER_AUTHORIZATION: &str = "authorization";
pub const HEADER_TIMESTAMP: &str = "x-qtg-callback-timestamp";
pub const HEADER_NONCE: &str = "x-qtg-callback-nonce";
pub const HEADER_VERSION: &str = "x-qtg-callback-signature-version";
pub const HEADER_SIGNATURE: &str = "x-qtg-callback-signature";
pub const VERSION: &str = "v3";
/// How far a signed request's timestamp may be from the receiver's clock.
pub const TOLERANCE_SECONDS: i64 = 300;

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// What a client sends. Debug never shows the secret.
#[derive(Clone, Default)]
pub enum Credentials {
    #[default]
    None,
    /// `authorization: Bearer <token>`.
    Bearer(String),
    /// The v3 signature under this secret.
    Hmac(Vec<u8>),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credentials::None => "none",
            Credentials::Bearer(_) => "bearer(***)",
            Credentials::Hmac(_) => "hmac(***)",
        })
    }
}

impl Credentials {
    /// Whether the headers depend on the body (then gRPC calls sign [`grpc_signed_bytes`]).
    pub fn signs_body(&self) -> bool {
        matches!(self, Credentials::Hmac(_))
    }

    /// The headers these credentials add to a request carrying `body`, signed now with a
    /// fresh nonce.
    pub fn headers(&self, body: &[u8]) -> Vec<(&'static str, String)> {
        match self {
            Credentials::None => Vec::new(),
            Credentials::Bearer(t) => vec![(HEADER_AUTHORIZATION, format!("Bearer {t}"))],
            Credentials::Hmac(secret) => {
                signature_headers(secret, &unix_now().to_string(), &uuid::Uuid::new_v4().to_string(), body)
            }
        }
    }
}

/// The four v3 headers for `body` at `timestamp` with `nonce` (callbacks keep their nonce
/// across retries).
pub fn signature_headers(secret: &[u8], timestamp: &str, nonce: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        (HEADER_TIMESTAMP, timestamp.to_string()),
        (HEADER_NONCE, nonce.to_string()),
        (HEADER_VERSION, VERSION.to_string()),
        (HEADER_SIGNATURE, sign(secret, timestamp, nonce, body)),
    ]
}

/// What a server accepts. Debug never shows a secret.
#[derive(Clone, Default)]
pub enum Verifier {
    #[default]
    None,
    Bearer(String),
    /// The v3 signature under the current secret or any previous one (rotation).
    Hmac(Vec<Vec<u8>>),
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verifier::None => "none",
            Verifier::Bearer(_) => "bearer(***)",
            Verifier::Hmac(_) => "hmac(***)",
        })
    }
}

impl Verifier {
    pub fn signs_body(&self) -> bool {
        matches!(self, Verifier::Hmac(_))
    }

    /// Checks a request's headers (`get` looks one up by its lower-case name) against `body`.
    pub fn check(&self, get: impl Fn(&str) -> Option<String>, body: &[u8]) -> Result<(), String> {
        match self {
            Verifier::None => Ok(()),
            Verifier::Bearer(token) => match get(HEADER_AUTHORIZATION) {
                Some(v) if constant_eq(v.as_bytes(), format!("Bearer {token}").as_bytes()) => Ok(()),
                _ => Err("a valid bearer token is required".into()),
            },
            Verifier::Hmac(secrets) => {
                let (Some(version), Some(timestamp), Some(nonce), Some(signature)) =
                    (get(HEADER_VERSION), get(HEADER_TIMESTAMP), get(HEADER_NONCE), get(HEADER_SIGNATURE))
                else {
                    return Err("signature headers are missing".into());
                };
                let secrets: Vec<&[u8]> = secrets.iter().map(Vec::as_slice).collect();
                let signed = Signed { version: &version, timestamp: &timestamp, nonce: &nonce, signature: &signature };
                verify(&signed, body, &secrets, unix_now(), TOLERANCE_SECONDS).map_err(|e| e.to_string())
            }
        }
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The bytes a gRPC call's signature covers: the canonical JSON (sorted keys) of the request
/// message, which both ends rebuild from the decoded message (protobuf encodings of maps need
/// not be byte-identical).
pub fn grpc_signed_bytes<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    serde_json::to_value(msg).map(|v| qtg_core::hash::canonical_json(&v).into_bytes()).unwrap_or_default()
}

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
    fn credentials_pass_their_verifier_and_nothing_else() {
        let body = br#"{"a":1}"#;
        let map =
            |h: Vec<(&'static str, String)>| move |k: &str| h.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        let signed = Credentials::Hmac(b"s3cret".to_vec()).headers(body);
        Verifier::Hmac(vec![b"old".to_vec(), b"s3cret".to_vec()]).check(map(signed.clone()), body).unwrap();
        assert!(Verifier::Hmac(vec![b"other".to_vec()]).check(map(signed.clone()), body).is_err());
        assert!(Verifier::Hmac(vec![b"s3cret".to_vec()]).check(map(signed), b"tampered").is_err());
        let bearer = Credentials::Bearer("t0k".into()).headers(body);
        Verifier::Bearer("t0k".into()).check(map(bearer.clone()), body).unwrap();
        assert!(Verifier::Bearer("t0k3n".into()).check(map(bearer), body).is_err());
        assert!(Verifier::Hmac(vec![b"s".to_vec()]).check(map(Vec::new()), body).is_err());
        Verifier::None.check(map(Vec::new()), body).unwrap();
        assert_eq!(format!("{:?}", Credentials::Bearer("t0k".into())), "bearer(***)");
    }

    #[test]
    /// Vectors computed outside the project (`tests/callback_v3.json`).
    fn matches_the_vectors() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/callback_v3.json"))
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
