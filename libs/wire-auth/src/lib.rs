//! How qtg's wire calls authenticate, defined once for every end: the executor/signer client
//! (`qtg-executor`), the SDK's server (`qtg-executor-sdk`) and the callbacks qtg sends.
//!
//! Three schemes:
//! - **bearer**: `authorization: Bearer <token>`;
//! - **v4 signature** (calls to executors and signers): hex HMAC-SHA256(secret,
//!   `{timestamp}\n{nonce}\n{target}\n{hex sha256(body)}`) where `target` is the operation,
//!   `qtg.executor.v1.ExecutorService/Submit` (the gRPC method, also for the HTTP transport),
//!   sent with `x-qtg-callback-signature-version: v4`: a signed request cannot be re-targeted
//!   to another operation, and a receiver refuses a nonce it has seen within the window
//!   ([`NonceCache`]);
//! - **v3 signature**: hex HMAC-SHA256(secret, `{timestamp}\n{nonce}\n{hex sha256(body)}`),
//!   sent as `x-qtg-callback-timestamp` (unix seconds), `x-qtg-callback-nonce`,
//!   `x-qtg-callback-signature-version: v3` and `x-qtg-callback-signature`. The body is the
//!   HTTP body; over gRPC it is [`grpc_signed_bytes`] of the request message. A receiver
//!   accepts a timestamp within [`TOLERANCE_SECONDS`] of its clock and any of its secrets
//!   (rotation).
//!
//! Callbacks and notification webhooks may instead be signed as [Standard Webhooks](standard).
//!
//! Clients hold [`Credentials`], servers a [`Verifier`]; callbacks are signed with [`sign`].
//! Header names are lower case (HTTP/2 and gRPC metadata require it; HTTP/1 is
//! case-insensitive).

pub mod standard;

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

pub const HEADER_AUTHORIZATION: &str = "authorization";
pub const HEADER_TIMESTAMP: &str = "x-qtg-callback-timestamp";
pub const HEADER_NONCE: &str = "x-qtg-callback-nonce";
pub const HEADER_VERSION: &str = "x-qtg-callback-signature-version";
pub const HEADER_SIGNATURE: &str = "x-qtg-callback-signature";
pub const VERSION: &str = "v3";
/// The signature version of calls to executors and signers (covers the operation).
pub const EXECUTOR_VERSION: &str = "v4";
pub const EXECUTOR_SERVICE: &str = "qtg.executor.v1.ExecutorService";
pub const SIGNER_SERVICE: &str = "qtg.signer.v1.SignerService";

/// The operation a v4 signature covers: `{service}/{Operation}`, e.g.
/// `qtg.executor.v1.ExecutorService/Submit` for `("…ExecutorService", "submit")`.
pub fn target(service: &str, operation: &str) -> String {
    let mut chars = operation.chars();
    let op: String = chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default();
    format!("{service}/{op}")
}
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
    /// The v4 signature (covering the operation) under this secret.
    Hmac(Vec<u8>),
    /// The previous signature, v3 (without the operation), under this secret: for an
    /// executor or signer built before v4, through the deprecation window
    /// ([`V3_ACCEPTED_UNTIL`]); every call signed so is counted and the entry is flagged.
    HmacV3(Vec<u8>),
}

/// The last day qtg signs calls to executors and signers with the deprecated v3 signature
/// (`auth = { …, signature = "v3" }`); after it a registry naming v3 is refused at start.
pub const V3_ACCEPTED_UNTIL: &str = "2027-06-30";

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credentials::None => "none",
            Credentials::Bearer(_) => "bearer(***)",
            Credentials::Hmac(_) => "hmac(***)",
            Credentials::HmacV3(_) => "hmac-v3-deprecated(***)",
        })
    }
}

impl Credentials {
    /// Whether the headers depend on the body (then gRPC calls sign [`grpc_signed_bytes`]).
    pub fn signs_body(&self) -> bool {
        matches!(self, Credentials::Hmac(_) | Credentials::HmacV3(_))
    }

    /// The deprecated signature version these credentials sign with, if any.
    pub fn deprecated_version(&self) -> Option<&'static str> {
        matches!(self, Credentials::HmacV3(_)).then_some(VERSION)
    }

    /// The headers these credentials add to a call of operation `target` (see [`target`])
    /// carrying `body`, signed (v4) now with a fresh nonce.
    pub fn headers(&self, target: &str, body: &[u8]) -> Vec<(&'static str, String)> {
        match self {
            Credentials::None => Vec::new(),
            Credentials::Bearer(t) => vec![(HEADER_AUTHORIZATION, format!("Bearer {t}"))],
            Credentials::Hmac(secret) => {
                let (timestamp, nonce) = (unix_now().to_string(), uuid::Uuid::new_v4().to_string());
                let signature = sign_v4(secret, &timestamp, &nonce, target, body);
                headers(timestamp, nonce, EXECUTOR_VERSION, signature)
            }
            Credentials::HmacV3(secret) => {
                let (timestamp, nonce) = (unix_now().to_string(), uuid::Uuid::new_v4().to_string());
                signature_headers(secret, &timestamp, &nonce, body)
            }
        }
    }
}

/// The four v3 headers for `body` at `timestamp` with `nonce` (callbacks keep their nonce
/// across retries).
pub fn signature_headers(secret: &[u8], timestamp: &str, nonce: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    headers(timestamp.to_string(), nonce.to_string(), VERSION, sign(secret, timestamp, nonce, body))
}

/// The four signature headers.
fn headers(timestamp: String, nonce: String, version: &str, signature: String) -> Vec<(&'static str, String)> {
    vec![
        (HEADER_TIMESTAMP, timestamp),
        (HEADER_NONCE, nonce),
        (HEADER_VERSION, version.to_string()),
        (HEADER_SIGNATURE, signature),
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

    /// Checks a call of operation `target` (see [`target`]): its headers (`get` looks one up
    /// by its lower-case name) against `body`, a v4 signature's nonce against `nonces`.
    pub fn check(
        &self,
        get: impl Fn(&str) -> Option<String>,
        target: &str,
        body: &[u8],
        nonces: &NonceCache,
    ) -> Result<(), String> {
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
                if version != EXECUTOR_VERSION {
                    return Err(format!("signature version {version:?} is not {EXECUTOR_VERSION}"));
                }
                let secrets: Vec<&[u8]> = secrets.iter().map(Vec::as_slice).collect();
                let now = unix_now();
                let ts: i64 = timestamp.parse().map_err(|_| VerifyError::BadTimestamp.to_string())?;
                if (now - ts).abs() > TOLERANCE_SECONDS {
                    return Err(VerifyError::Stale(now - ts).to_string());
                }
                let msg = message_v4(&timestamp, &nonce, target, body);
                if !matches_any(&msg, &signature, &secrets) {
                    return Err(VerifyError::Mismatch.to_string());
                }
                nonces.admit(&nonce, ts, now)
            }
        }
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The bytes a gRPC call's signature covers: the RFC 8785 canonical JSON of the request
/// message's proto3 JSON form, which both ends rebuild from the decoded message (protobuf
/// encodings of maps need not be byte-identical). The `submitBy` timestamp is written as the
/// proto3 JSON mapping says (`Z`, not `+00:00`), as every language's protobuf library does.
pub fn grpc_signed_bytes<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    let Ok(mut v) = serde_json::to_value(msg) else { return Vec::new() };
    if let Some(serde_json::Value::String(ts)) = v.get_mut("submitBy") {
        if let Some(utc) = ts.strip_suffix("+00:00") {
            *ts = format!("{utc}Z");
        }
    }
    qtg_core::hash::canonical_json(&v).into_bytes()
}

type HmacSha256 = Hmac<Sha256>;

/// The v4 signed message: `{timestamp}\n{nonce}\n{target}\n{hex sha256(body)}`.
pub fn message_v4(timestamp: &str, nonce: &str, target: &str, body: &[u8]) -> String {
    format!("{timestamp}\n{nonce}\n{target}\n{}", hex::encode(Sha256::digest(body)))
}

/// hex HMAC-SHA256 of the v4 message under `secret`.
pub fn sign_v4(secret: &[u8], timestamp: &str, nonce: &str, target: &str, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(message_v4(timestamp, nonce, target, body).as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Whether hex `signature` is the HMAC of `msg` under one of `secrets` (constant time).
fn matches_any(msg: &str, signature: &str, secrets: &[&[u8]]) -> bool {
    let Ok(given) = hex::decode(signature) else { return false };
    secrets.iter().any(|secret| {
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
        mac.update(msg.as_bytes());
        mac.verify_slice(&given).is_ok()
    })
}

/// The nonces a receiver has accepted within the timestamp window: a repeated one is a
/// replay. Bounded: past [`NonceCache::MAX`] live entries new ones are refused (fail closed).
#[derive(Default)]
pub struct NonceCache {
    seen: std::sync::Mutex<std::collections::HashMap<String, i64>>,
}

impl NonceCache {
    pub const MAX: usize = 100_000;

    /// Admits `nonce` (of a request stamped `ts`) once.
    pub fn admit(&self, nonce: &str, ts: i64, now: i64) -> Result<(), String> {
        let mut seen = self.seen.lock().map_err(|_| "nonce cache poisoned".to_string())?;
        if seen.len() >= Self::MAX {
            seen.retain(|_, t| (now - *t).abs() <= TOLERANCE_SECONDS);
        }
        if seen.contains_key(nonce) {
            return Err("this nonce was already used: a replayed request".into());
        }
        if seen.len() >= Self::MAX {
            return Err("too many requests in the signature window".into());
        }
        seen.insert(nonce.to_string(), ts);
        Ok(())
    }
}

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
    if matches_any(&message(signed.timestamp, signed.nonce, body), signed.signature, secrets) {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// v4 vectors computed outside the project (Python's hmac and hashlib).
    #[test]
    fn matches_the_v4_vectors() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/vectors/executor_v4.json"))
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for case in v["cases"].as_array().unwrap() {
            let s = |k: &str| case[k].as_str().unwrap();
            let body = s("body_utf8").as_bytes();
            assert_eq!(message_v4(s("timestamp"), s("nonce"), s("target"), body), s("signed_message_utf8"));
            assert_eq!(
                sign_v4(s("secret_utf8").as_bytes(), s("timestamp"), s("nonce"), s("target"), body),
                s("signature_hex")
            );
        }
    }

    #[test]
    fn credentials_pass_their_verifier_and_nothing_else() {
        let body = br#"{"a":1}"#;
        let map =
            |h: Vec<(&'static str, String)>| move |k: &str| h.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        let submit = target(EXECUTOR_SERVICE, "submit");
        assert_eq!(submit, "qtg.executor.v1.ExecutorService/Submit");
        let n = || NonceCache::default();
        let signed = Credentials::Hmac(b"s3cret".to_vec()).headers(&submit, body);
        let both = Verifier::Hmac(vec![b"old".to_vec(), b"s3cret".to_vec()]);
        let cache = n();
        both.check(map(signed.clone()), &submit, body, &cache).unwrap();
        // The same request again is a replay; re-targeted to another operation it fails.
        assert!(both.check(map(signed.clone()), &submit, body, &cache).unwrap_err().contains("replayed"));
        let recover = target(EXECUTOR_SERVICE, "recover");
        assert!(both.check(map(signed.clone()), &recover, body, &n()).is_err());
        assert!(Verifier::Hmac(vec![b"other".to_vec()]).check(map(signed.clone()), &submit, body, &n()).is_err());
        assert!(Verifier::Hmac(vec![b"s3cret".to_vec()]).check(map(signed), &submit, b"tampered", &n()).is_err());
        let bearer = Credentials::Bearer("t0k".into()).headers(&submit, body);
        Verifier::Bearer("t0k".into()).check(map(bearer.clone()), &submit, body, &n()).unwrap();
        assert!(Verifier::Bearer("t0k3n".into()).check(map(bearer), &submit, body, &n()).is_err());
        assert!(Verifier::Hmac(vec![b"s".to_vec()]).check(map(Vec::new()), &submit, body, &n()).is_err());
        Verifier::None.check(map(Vec::new()), &submit, body, &n()).unwrap();
        assert_eq!(format!("{:?}", Credentials::Bearer("t0k".into())), "bearer(***)");
    }

    #[test]
    /// Vectors computed outside the project (`docs/vectors/callback_v3.json`).
    fn matches_the_vectors() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/vectors/callback_v3.json"))
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
