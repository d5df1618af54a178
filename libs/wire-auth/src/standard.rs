//! [Standard Webhooks](https://www.standardwebhooks.com/) signatures, the option beside v3
//! for callbacks and notification webhooks: `webhook-id` (the event's id, the same on every
//! retry and replay, so a receiver dedupes by it), `webhook-timestamp` (unix seconds of the
//! attempt: the reference libraries refuse one more than five minutes from their clock, so a
//! retry is signed again) and `webhook-signature`: `v1,<base64 HMAC-SHA256 of
//! "{id}.{timestamp}.{body}">`, one per secret separated by spaces while a key rotates.
//! Secrets are written `whsec_<base64 key>`.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";
/// The prefix of a Standard Webhooks secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// How a callback or a notification webhook is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scheme {
    /// qtg's own v3 signature (the default).
    #[default]
    V3,
    /// Standard Webhooks.
    StandardWebhooks,
}

impl Scheme {
    /// The names the API and the settings use: `v3`, `standard_webhooks`.
    pub fn parse(text: &str) -> Result<Scheme, String> {
        match text {
            "v3" => Ok(Scheme::V3),
            "standard_webhooks" => Ok(Scheme::StandardWebhooks),
            other => Err(format!("{other:?} is not v3|standard_webhooks")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::V3 => "v3",
            Scheme::StandardWebhooks => "standard_webhooks",
        }
    }
}

/// A Standard Webhooks signing key. Debug and Display never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("whsec_***")
    }
}

impl WebhookSecret {
    /// Reads `whsec_<base64>` (padded or not): the key must decode to 24 to 64 bytes (the
    /// specification recommends 24 to 64; a shorter key is refused, not stretched).
    pub fn parse(text: &str) -> Result<WebhookSecret, String> {
        let b64 = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| format!("a Standard Webhooks secret starts with {SECRET_PREFIX}"))?;
        let key = STANDARD
            .decode(b64)
            .or_else(|_| STANDARD_NO_PAD.decode(b64))
            .map_err(|_| "a Standard Webhooks secret is whsec_ followed by base64".to_string())?;
        if !(24..=64).contains(&key.len()) {
            return Err(format!("a Standard Webhooks secret's key is 24 to 64 bytes, not {}", key.len()));
        }
        Ok(WebhookSecret(key))
    }

    /// Reads one secret or several separated by spaces or commas (rotation: every one signs),
    /// at most four.
    pub fn parse_list(text: &str) -> Result<Vec<WebhookSecret>, String> {
        let secrets = text
            .split(|c: char| c == ',' || c.is_ascii_whitespace())
            .filter(|s| !s.is_empty())
            .map(WebhookSecret::parse)
            .collect::<Result<Vec<_>, _>>()?;
        match secrets.len() {
            0 => Err("no Standard Webhooks secret is given".into()),
            1..=4 => Ok(secrets),
            n => Err(format!("at most 4 Standard Webhooks secrets sign at once, not {n}")),
        }
    }

    /// A new random secret (32 bytes), as `whsec_<base64>`.
    pub fn generate() -> String {
        let key: Vec<u8> =
            uuid::Uuid::new_v4().into_bytes().into_iter().chain(uuid::Uuid::new_v4().into_bytes()).collect();
        format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
    }

    /// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    /// Whether `header` (a `webhook-signature` value) holds a `v1` signature of this key over
    /// `id`, `timestamp` and `body` (constant time per signature).
    pub fn verifies(&self, header: &str, id: &str, timestamp: i64, body: &[u8]) -> bool {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        let expected = mac.finalize().into_bytes();
        header.split(' ').filter_map(|s| s.strip_prefix("v1,")).any(|sig| {
            STANDARD
                .decode(sig)
                .is_ok_and(|given| given.len() == expected.len() && super::constant_eq(&given, &expected))
        })
    }
}

/// The three Standard Webhooks headers of a delivery of event `id` attempted at `timestamp`,
/// signed by every one of `secrets`.
pub fn headers(secrets: &[WebhookSecret], id: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let signatures: Vec<String> = secrets.iter().map(|s| s.sign(id, timestamp, body)).collect();
    vec![
        (HEADER_ID, id.to_string()),
        (HEADER_TIMESTAMP, timestamp.to_string()),
        (HEADER_SIGNATURE, signatures.join(" ")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors computed outside the project with the reference `standardwebhooks` library
    /// (`docs/vectors/standard_webhooks.json`; the first is the specification's own example).
    #[test]
    fn matches_the_reference_library() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/vectors/standard_webhooks.json"))
                .expect("standard_webhooks.json vectors");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cases = v["cases"].as_array().unwrap();
        assert!(cases.len() >= 2);
        for case in cases {
            let s = |k: &str| case[k].as_str().unwrap();
            let secret = WebhookSecret::parse(s("secret")).unwrap();
            let ts: i64 = s("webhook_timestamp").parse().unwrap();
            let body = s("body").as_bytes();
            assert_eq!(secret.sign(s("webhook_id"), ts, body), s("signature"));
            assert!(secret.verifies(s("signature"), s("webhook_id"), ts, body));
            assert!(!secret.verifies(s("signature"), s("webhook_id"), ts + 1, body));
        }
    }

    #[test]
    fn a_rotation_signs_with_every_secret() {
        let (old, new) = (WebhookSecret::generate(), WebhookSecret::generate());
        let both = WebhookSecret::parse_list(&format!("{new} {old}")).unwrap();
        let h = headers(&both, "evt_1", 1_796_000_000, b"{}");
        assert_eq!(h[0], (HEADER_ID, "evt_1".to_string()));
        assert_eq!(h[2].1.split(' ').count(), 2);
        for one in [&old, &new] {
            assert!(WebhookSecret::parse(one).unwrap().verifies(&h[2].1, "evt_1", 1_796_000_000, b"{}"));
        }
        let other = WebhookSecret::parse(&WebhookSecret::generate()).unwrap();
        assert!(!other.verifies(&h[2].1, "evt_1", 1_796_000_000, b"{}"));
    }

    #[test]
    fn bad_secrets_are_refused_and_never_shown() {
        for bad in ["", "whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!!", "whsec_c2hvcnQ="] {
            assert!(WebhookSecret::parse(bad).is_err(), "{bad}");
        }
        let many = (0..5).map(|_| WebhookSecret::generate()).collect::<Vec<_>>().join(",");
        assert!(WebhookSecret::parse_list(&many).is_err());
        assert!(WebhookSecret::parse_list(" , ").is_err());
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(format!("{s:?}"), "whsec_***");
    }
}
