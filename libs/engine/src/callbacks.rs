//! callback_dispatcher: delivers the callback outbox — v3-signed POSTs (timestamp and nonce
//! fixed at enqueue, reused on every retry), 2xx = sent, anything else (3xx included; no
//! redirects are followed) = a failure with `last_error`, backoff `2^min(attempts,6)` s or
//! `Retry-After` within 64 s, `dlq` at `max_attempts`. An SSRF guard runs before every send.
//!
//! Delivery follows §2.2 like dispatch: *claim* (a short statement: lease, attempt counted,
//! at most `per_receiver` rows in flight per receiver host, round-robin across hosts, alerts
//! first) → *send* on a task of its own, outside any transaction, bounded by the per-send
//! deadline (which fits inside the lease) → *record* by compare-and-set on the claim. The loop
//! never waits on a receiver: it waits only for a free slot of the process' bounded
//! in-flight set. A receiver that is slow or down holds at most `per_receiver` rows (and
//! slots) at a time, each for at most the deadline; its rows back off on their own schedule
//! and reach the dead-letter queue on it, whatever the failure (a send that never records an
//! outcome is dead-lettered once its last lease has run out).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use qtg_store::callbacks::{self, CallbackRow};
pub use qtg_wire_auth::standard::{Scheme, WebhookSecret};
use tokio::sync::Semaphore;

use crate::{Engine, Result};

/// Rows claimed per pass at most (seed: 5).
pub const CALLBACK_BATCH: i64 = 5;

/// The process' in-flight sends, shared by the clones of one engine's settings (one engine
/// per worker in a process).
#[derive(Clone)]
pub struct Delivery {
    slots: Arc<Semaphore>,
    capacity: u32,
}

impl Delivery {
    /// At most `max_in_flight` sends at once in this process.
    pub fn new(max_in_flight: u32) -> Delivery {
        let capacity = max_in_flight.max(1);
        Delivery { slots: Arc::new(Semaphore::new(capacity as usize)), capacity }
    }
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery::new(16)
    }
}

#[derive(Clone, Default)]
pub struct CallbackSettings {
    /// `MG_CALLBACK_SECRET`: the v3 signing secret. Without it nothing is sent (each attempt
    /// fails with a clear `last_error`).
    pub secret: Option<Vec<u8>>,
    /// `MG_CALLBACK_SIGNATURE`: the scheme of callbacks whose movement did not choose one.
    pub signature: Scheme,
    /// `MG_CALLBACK_WEBHOOK_SECRETS`: the Standard Webhooks secrets (each signs).
    pub webhook_secrets: Vec<WebhookSecret>,
    pub max_attempts: i32,
    pub timeout: Duration,
    /// `MG_CALLBACK_ALLOW_PRIVATE`: allow loopback/private/link-local destinations.
    pub allow_private: bool,
    /// `MG_CALLBACK_ALLOWED_HOSTS`: hosts allowed whatever they resolve to.
    pub allowed_hosts: Vec<String>,
    /// `MG_CALLBACK_MAX_IN_FLIGHT_PER_RECEIVER` (2): rows of one receiver host in flight at
    /// once, across every replica.
    pub per_receiver: i64,
    /// The in-flight sends (`MG_CALLBACK_MAX_IN_FLIGHT`, 16 per process) and circuits.
    pub delivery: Delivery,
}

impl CallbackSettings {
    /// How long a claim holds a row: the per-send deadline and as much again, plus margin.
    pub fn lease_seconds(&self) -> f64 {
        2.0 * self.timeout.as_secs_f64() + 5.0
    }
}

impl std::fmt::Debug for CallbackSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackSettings")
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("signature", &self.signature)
            .field("webhook_secrets", &self.webhook_secrets.len())
            .field("max_attempts", &self.max_attempts)
            .field("timeout", &self.timeout)
            .field("allow_private", &self.allow_private)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("per_receiver", &self.per_receiver)
            .field("max_in_flight", &self.delivery.capacity)
            .finish()
    }
}

/// Why an address may not be called back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forbidden {
    /// Private, loopback, link-local, multicast, or a form that tunnels to such an address:
    /// allowed with `MG_CALLBACK_ALLOW_PRIVATE` or a host named in `MG_CALLBACK_ALLOWED_HOSTS`.
    Private,
    /// A cloud metadata service: allowed only for a host named in `MG_CALLBACK_ALLOWED_HOSTS`,
    /// never by `MG_CALLBACK_ALLOW_PRIVATE` alone.
    Metadata,
}

/// What forbids calling `ip`, if anything. IPv6 forms that carry an IPv4 address (mapped,
/// compatible, SIIT, NAT64, 6to4) are judged by that address, and the tunnelling prefixes
/// themselves (NAT64, 6to4, Teredo) and site-local are private.
pub fn forbidden(ip: IpAddr) -> Option<Forbidden> {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_link_local() || v4.octets() == [100, 100, 100, 200] {
                // 169.254.169.254 (AWS, GCP, Azure), 169.254.170.2 (ECS), 100.100.100.200 (Alibaba)
                return Some(Forbidden::Metadata);
            }
            let private = v4.is_loopback()
                || v4.is_private()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10, carrier-grade NAT
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0.0/24, IETF protocol assignments
                || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15, benchmarking
                || o[0] == 0
                || o[0] >= 240; // reserved
            private.then_some(Forbidden::Private)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let v4 = |hi: u16, lo: u16| IpAddr::V4(std::net::Ipv4Addr::from(((hi as u32) << 16) | lo as u32));
            // ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d (SIIT), ::a.b.c.d (IPv4-compatible).
            let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
            let siit = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
            let compatible = s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1);
            let embedded = (mapped || siit || compatible).then(|| v4(s[6], s[7]));
            if let Some(inner) = embedded {
                return forbidden(inner);
            }
            if s[..3] == [0xfd00, 0x0ec2, 0] {
                return Some(Forbidden::Metadata); // fd00:ec2::254 (AWS IPv6 metadata)
            }
            let nat64 = (s[0] == 0x64 && s[1] == 0xff9b && (s[2..6] == [0; 4] || s[2] == 1)).then(|| v4(s[6], s[7]));
            let six_to_four = (s[0] == 0x2002).then(|| v4(s[1], s[2]));
            if let Some(inner) = nat64.or(six_to_four) {
                return Some(forbidden(inner).unwrap_or(Forbidden::Private).max_with(Forbidden::Private));
            }
            let private = v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link local
                || (s[0] & 0xffc0) == 0xfec0 // site local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0) // Teredo
                || (s[0] == 0x2001 && s[1] == 0x0db8); // documentation
            private.then_some(Forbidden::Private)
        }
    }
}

impl Forbidden {
    /// The stricter of the two.
    fn max_with(self, other: Forbidden) -> Forbidden {
        if self == Forbidden::Metadata || other == Forbidden::Metadata {
            Forbidden::Metadata
        } else {
            Forbidden::Private
        }
    }

    /// Whether this deployment's settings allow calling `host` despite it.
    fn allowed(self, host: &str, allow_private: bool, allowed_hosts: &[String]) -> bool {
        let named = allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(host.trim_matches(['[', ']'])));
        named || (self == Forbidden::Private && allow_private)
    }
}

/// Why a URL may not be called, checked without resolving (scheme, host, literal address).
pub fn check_url_syntax(
    url: &str,
    allow_private: bool,
    allowed_hosts: &[String],
) -> std::result::Result<reqwest::Url, String> {
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("callback_url must be at most 2048 characters, without spaces or control characters".into());
    }
    // The host must be written out (the URL parser would read `https:///x` as host `x`).
    if url.split_once("://").is_none_or(|(_, rest)| rest.is_empty() || rest.starts_with(['/', '?', '#', ':'])) {
        return Err(format!("callback_url {:?} must be an http(s) URL with a host", qtg_core::urls::redact(url)));
    }
    let parsed =
        reqwest::Url::parse(url).map_err(|e| format!("callback_url {:?}: {e}", qtg_core::urls::redact(url)))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("callback_url scheme {:?} is not http or https", parsed.scheme()));
    }
    // Credentials in the URL cross the network in the clear over plain http.
    if parsed.scheme() == "http" && (!parsed.username().is_empty() || parsed.password().is_some()) {
        return Err("callback_url carries credentials over plain http: use https".into());
    }
    let host = parsed.host_str().ok_or_else(|| "callback_url has no host".to_string())?;
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        if let Some(why) = forbidden(ip).filter(|f| !f.allowed(host, allow_private, allowed_hosts)) {
            return Err(refusal(host, ip, why));
        }
    }
    Ok(parsed)
}

fn refusal(host: &str, ip: IpAddr, why: Forbidden) -> String {
    match why {
        Forbidden::Private => {
            format!("refused: callback_url host {host} is {ip}, a private, loopback or link-local address")
        }
        Forbidden::Metadata => format!("refused: callback_url host {host} is {ip}, a cloud metadata service"),
    }
}

/// The SSRF guard: resolves the host and refuses if any address is forbidden (unless the
/// host is allowed). Returns the host and the address to connect to (pinned, so a second
/// resolution cannot differ).
pub async fn check_destination(url: &str, s: &CallbackSettings) -> std::result::Result<(String, SocketAddr), String> {
    let parsed = check_url_syntax(url, s.allow_private, &s.allowed_hosts)?;
    let host = parsed.host_str().unwrap_or_default().to_string();
    let port = parsed.port_or_known_default().unwrap_or(80);
    let lookup = host.trim_matches(['[', ']']).to_string();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((lookup.as_str(), port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let first = *addrs.first().ok_or_else(|| format!("{host} resolves to no address"))?;
    for a in &addrs {
        if let Some(why) = forbidden(a.ip()).filter(|f| !f.allowed(&host, s.allow_private, &s.allowed_hosts)) {
            return Err(refusal(&host, a.ip(), why));
        }
    }
    Ok((host, first))
}

/// How one callback is signed: the movement's scheme (else the deployment's) with the
/// movement's own secret (else the deployment's).
enum Signing<'a> {
    V3(&'a [u8]),
    Standard(Vec<WebhookSecret>),
}

/// Why a POST did not deliver: the error (never the URL, which may be a credential) and the
/// receiver's `Retry-After` in seconds, when it gave one.
pub(crate) struct Failure {
    pub(crate) error: String,
    pub(crate) retry_after: Option<f64>,
}

impl Failure {
    pub(crate) fn new(error: impl Into<String>) -> Failure {
        Failure { error: error.into(), retry_after: None }
    }
}

/// POSTs a JSON `body` with `headers` to `url` through the destination guard (`s`): the host
/// resolved and checked once and the connection pinned to that address, no proxy (it would
/// resolve the host itself), no redirect followed, all within `timeout`. 2xx delivers; any
/// other answer is a failure with its `Retry-After`.
pub(crate) async fn post_guarded(
    s: &CallbackSettings,
    url: &str,
    timeout: Duration,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
) -> std::result::Result<(), Failure> {
    let (host, addr) = check_destination(url, s).await.map_err(Failure::new)?;
    qtg_executor::remote::install_tls_provider();
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .resolve(&host, addr)
        .build()
        .map_err(|e| Failure::new(e.to_string()))?;
    let mut req = client.post(url).header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(name, value);
    }
    let resp = req.body(body).send().await.map_err(|e| {
        // Never the URL: it may carry credentials.
        Failure::new(if e.is_timeout() { format!("timed out after {timeout:?}") } else { e.without_url().to_string() })
    })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0);
    Err(Failure { error: format!("HTTP {status}"), retry_after })
}

impl Engine {
    /// Claims up to five due callbacks (as many as there are free send slots; waits for one
    /// when all are busy) and starts sending each on its own task. Returns how many.
    pub async fn deliver_callbacks_tick(&self) -> Result<usize> {
        let s = &self.settings.callbacks;
        let slots = &s.delivery.slots;
        let mut permits = vec![slots.clone().acquire_owned().await.expect("the slots are never closed")];
        while permits.len() < CALLBACK_BATCH as usize {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let rows = {
            let mut conn = self.pool.acquire().await?;
            let abandoned = callbacks::dead_letter_abandoned(&mut conn).await?;
            if abandoned > 0 {
                qtg_telemetry::sink().callback_delivery("dlq");
                tracing::warn!(
                    rows = abandoned,
                    "callbacks dead-lettered: no outcome was recorded within their last lease"
                );
            }
            callbacks::claim(&mut conn, permits.len() as i64, s.per_receiver.max(1), s.lease_seconds()).await?
        };
        let claimed = rows.len();
        for (row, permit) in rows.into_iter().zip(permits) {
            let engine = self.clone();
            tokio::spawn(async move {
                engine.deliver(row).await;
                drop(permit);
            });
        }
        Ok(claimed)
    }

    /// Waits for the sends in flight to record their outcome (at shutdown; bounded by the
    /// process' shutdown grace).
    pub async fn finish_in_flight(&self) {
        let d = &self.settings.callbacks.delivery;
        let _all = d.slots.acquire_many(d.capacity).await;
    }

    /// How `row` is signed, or why it cannot be (then nothing is sent).
    fn signing<'a>(&'a self, row: &'a CallbackRow) -> std::result::Result<Signing<'a>, String> {
        let s = &self.settings.callbacks;
        let scheme = match (row.request_id, row.movement_signature.as_deref()) {
            (_, Some(name)) => Scheme::parse(name)?,
            // A movement created before the scheme was recorded: v3, as it was then.
            (Some(_), None) => Scheme::V3,
            // An alert of no movement: the deployment's scheme.
            (None, None) => s.signature,
        };
        match (scheme, &row.movement_secret) {
            (Scheme::V3, Some(own)) => Ok(Signing::V3(own.as_bytes())),
            (Scheme::V3, None) => match &s.secret {
                Some(global) => Ok(Signing::V3(global)),
                None => Err("MG_CALLBACK_SECRET is not set; nothing is sent unsigned".into()),
            },
            (Scheme::StandardWebhooks, Some(own)) => WebhookSecret::parse_list(own)
                .map(Signing::Standard)
                .map_err(|e| format!("the movement's callback_secret cannot sign Standard Webhooks: {e}")),
            (Scheme::StandardWebhooks, None) if s.webhook_secrets.is_empty() => {
                Err("MG_CALLBACK_WEBHOOK_SECRETS is not set; nothing is sent unsigned".into())
            }
            (Scheme::StandardWebhooks, None) => Ok(Signing::Standard(s.webhook_secrets.clone())),
        }
    }

    /// Sends one claimed row and records the outcome by its claim.
    async fn deliver(&self, row: CallbackRow) {
        let s = &self.settings.callbacks;
        let Some(token) = row.claim_token else { return };
        let host = reqwest::Url::parse(&row.callback_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
            .unwrap_or_default();
        // The whole send — resolving, connecting, the answer's head — within the deadline.
        let outcome = match tokio::time::timeout(s.timeout, self.send(&row)).await {
            Ok(r) => r,
            Err(_) => Err(Failure { error: format!("no answer within {:?}", s.timeout), retry_after: None }),
        };
        let recorded = async {
            let mut conn = self.pool.acquire().await?;
            match &outcome {
                Ok(()) => callbacks::record_sent(&mut conn, row.id).await.map(|()| Some("sent".to_string())),
                Err(f) => {
                    callbacks::record_failed(&mut conn, row.id, token, s.max_attempts, &f.error, f.retry_after).await
                }
            }
        };
        match (recorded.await, &outcome) {
            (Ok(Some(_)), Ok(())) => {
                qtg_telemetry::sink().callback_delivery("delivered");
                tracing::info!(
                    callback_id = %row.id, movement_id = ?row.request_id, event_type = %row.event_type,
                    sequence = row.sequence, receiver = %host,
                    "callback delivered"
                );
            }
            (Ok(Some(status)), Err(f)) => {
                qtg_telemetry::sink().callback_delivery(if status == "dlq" { "dlq" } else { "retry" });
                tracing::warn!(
                    callback_id = %row.id, movement_id = ?row.request_id, attempt = row.attempts, status = %status,
                    receiver = %host, error = %f.error,
                    "callback delivery failed"
                );
            }
            (Ok(None), _) => {
                tracing::warn!(
                    callback_id = %row.id, receiver = %host,
                    "callback outcome not recorded: its lease ran out and another claim holds the row"
                );
            }
            (Err(e), _) => {
                tracing::error!(
                    callback_id = %row.id, receiver = %host, error = %e,
                    "could not record a callback's outcome; it is retried after its lease"
                );
            }
        }
    }

    async fn send(&self, row: &CallbackRow) -> std::result::Result<(), Failure> {
        let s = &self.settings.callbacks;
        let signing = self.signing(row).map_err(Failure::new)?;
        let body = serde_json::to_vec(&row.payload).map_err(|e| Failure::new(e.to_string()))?;
        let mut headers = match signing {
            // The nonce and timestamp stay those of the event across retries (receivers dedupe).
            Signing::V3(secret) => qtg_wire_auth::signature_headers(
                secret,
                &row.callback_timestamp.to_string(),
                &row.callback_nonce,
                &body,
            ),
            // The event's id on every attempt and replay (receivers dedupe by it); the
            // attempt's own time, which the reference libraries hold within five minutes.
            Signing::Standard(secrets) => qtg_wire_auth::standard::headers(
                &secrets,
                &row.event_id.to_string(),
                chrono::Utc::now().timestamp(),
                &body,
            ),
        };
        // The receiver joins the trace of the step that produced the event.
        if let Some(tp) = &row.traceparent {
            headers.push(("traceparent", tp.clone()));
        }
        post_guarded(s, &row.callback_url, s.timeout, headers, body).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_metadata_addresses_are_forbidden() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            // Forms that carry or tunnel to an IPv4 address, and site-local.
            "::ffff:0:10.0.0.1",   // SIIT
            "::10.0.0.1",          // IPv4-compatible
            "64:ff9b::a00:1",      // NAT64 of 10.0.0.1
            "64:ff9b::808:808",    // NAT64 prefix itself, whatever it embeds
            "64:ff9b:1::1",        // local-use NAT64
            "2002:a00:1::1",       // 6to4 of 10.0.0.1
            "2002:808:808::1",     // 6to4 prefix itself
            "fec0::1",             // site-local
            "2001:0:4136:e378::1", // Teredo
            "198.18.0.1",
            "240.0.0.1",
        ] {
            assert!(forbidden(bad.parse().unwrap()).is_some(), "{bad}");
        }
        for metadata in [
            "169.254.169.254",
            "169.254.170.2",
            "100.100.100.200",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
        ] {
            assert_eq!(forbidden(metadata.parse().unwrap()), Some(Forbidden::Metadata), "{metadata}");
        }
        for ok in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert_eq!(forbidden(ok.parse().unwrap()), None, "{ok}");
        }
    }

    #[test]
    fn metadata_needs_the_host_named_even_when_private_is_allowed() {
        assert!(check_url_syntax("http://169.254.169.254/latest", true, &[]).is_err());
        assert!(check_url_syntax("http://[fd00:ec2::254]/latest", true, &[]).is_err());
        assert!(check_url_syntax("http://[64:ff9b::a9fe:a9fe]/", true, &[]).is_err());
        assert!(check_url_syntax("http://169.254.169.254/latest", false, &["169.254.169.254".into()]).is_ok());
        assert!(check_url_syntax("http://[64:ff9b::a00:1]/x", false, &[]).is_err());
        assert!(check_url_syntax("http://[64:ff9b::a00:1]/x", true, &[]).is_ok());
        assert!(check_url_syntax("http://[fec0::1]/x", false, &[]).is_err());
    }

    #[test]
    fn urls_that_can_never_pass_are_refused_without_resolving() {
        assert!(check_url_syntax("ftp://example.com/x", false, &[]).is_err());
        assert!(check_url_syntax("http://127.0.0.1:8080/x", false, &[]).is_err());
        assert!(check_url_syntax("http://[::1]/x", false, &[]).is_err());
        assert!(check_url_syntax("http://169.254.169.254/latest", false, &[]).is_err());
        assert!(check_url_syntax("http://127.0.0.1:8080/x", true, &[]).is_ok());
        assert!(check_url_syntax("http://10.0.0.5/x", false, &["10.0.0.5".into()]).is_ok());
        assert!(check_url_syntax("https://hooks.example.com/x", false, &[]).is_ok());
        // What the API used to check on its own: a host, no spaces, a bounded length.
        for bad in ["https://", "https:///x", "example.com", "https://a b", "https://h/a b", "http://h/\u{7f}"] {
            assert!(check_url_syntax(bad, true, &[]).is_err(), "{bad}");
        }
        assert!(check_url_syntax(&format!("https://h/{}", "a".repeat(2048)), true, &[]).is_err());
    }
}
