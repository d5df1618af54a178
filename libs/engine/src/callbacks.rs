//! callback_dispatcher: delivers the callback outbox — v3-signed POSTs (timestamp and nonce
//! fixed at enqueue, reused on every retry), 2xx = sent, anything else (3xx included; no
//! redirects are followed) = a failure with `last_error`, backoff `2^min(attempts,6)` s or
//! `Retry-After` within 64 s, `dlq` at `max_attempts`. An SSRF guard runs before every send.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use qtg_store::callbacks::{self, CallbackRow};

use crate::{Engine, Result};

/// Rows delivered per pass (seed: 5).
pub const CALLBACK_BATCH: i64 = 5;

#[derive(Clone, Default)]
pub struct CallbackSettings {
    /// `MG_CALLBACK_SECRET`: the v3 signing secret. Without it nothing is sent (each attempt
    /// fails with a clear `last_error`).
    pub secret: Option<Vec<u8>>,
    pub max_attempts: i32,
    pub timeout: Duration,
    /// `MG_CALLBACK_ALLOW_PRIVATE`: allow loopback/private/link-local destinations.
    pub allow_private: bool,
    /// `MG_CALLBACK_ALLOWED_HOSTS`: hosts allowed whatever they resolve to.
    pub allowed_hosts: Vec<String>,
}

impl std::fmt::Debug for CallbackSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackSettings")
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("max_attempts", &self.max_attempts)
            .field("timeout", &self.timeout)
            .field("allow_private", &self.allow_private)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

/// Addresses a callback may never reach unless explicitly allowed.
pub fn forbidden_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local() // includes 169.254.169.254, the cloud metadata service
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10, carrier-grade NAT
                || o[0] == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_ip(IpAddr::V4(v4));
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link local
        }
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
        return Err(format!("callback_url {url:?} must be an http(s) URL with a host"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("callback_url {url:?}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("callback_url scheme {:?} is not http or https", parsed.scheme()));
    }
    let host = parsed.host_str().ok_or_else(|| "callback_url has no host".to_string())?;
    let allowed = allow_private || allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(host));
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        if forbidden_ip(ip) && !allowed {
            return Err(format!("refused: callback_url host {host} is a private, loopback or link-local address"));
        }
    }
    Ok(parsed)
}

/// The SSRF guard: resolves the host and refuses if any address is forbidden (unless the
/// host is allowed). Returns the host and the address to connect to (pinned, so a second
/// resolution cannot differ).
pub async fn check_destination(url: &str, s: &CallbackSettings) -> std::result::Result<(String, SocketAddr), String> {
    let parsed = check_url_syntax(url, s.allow_private, &s.allowed_hosts)?;
    let host = parsed.host_str().unwrap_or_default().to_string();
    let port = parsed.port_or_known_default().unwrap_or(80);
    let allowed = s.allow_private || s.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(&host));
    let lookup = host.trim_matches(['[', ']']).to_string();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((lookup.as_str(), port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let first = *addrs.first().ok_or_else(|| format!("{host} resolves to no address"))?;
    if !allowed {
        if let Some(bad) = addrs.iter().find(|a| forbidden_ip(a.ip())) {
            return Err(format!(
                "refused: {host} resolves to {} (private, loopback, link-local or metadata)",
                bad.ip()
            ));
        }
    }
    Ok((host, first))
}

struct Failure {
    error: String,
    retry_after: Option<f64>,
}

impl Engine {
    /// Delivers up to five due callbacks. Returns how many were attempted.
    pub async fn deliver_callbacks_tick(&self) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let rows = callbacks::pickup(&mut tx, CALLBACK_BATCH).await?;
        let s = &self.settings.callbacks;
        for row in &rows {
            match self.send(row).await {
                Ok(()) => {
                    callbacks::mark_sent(&mut tx, row.id).await?;
                    qtg_telemetry::sink().callback_delivery("delivered");
                    tracing::info!(callback_id = %row.id, movement_id = %row.request_id, event_type = %row.event_type, sequence = row.sequence, "callback delivered");
                }
                Err(f) => {
                    let status =
                        callbacks::mark_failed(&mut tx, row.id, s.max_attempts, &f.error, f.retry_after).await?;
                    qtg_telemetry::sink().callback_delivery(if status == "dlq" { "dlq" } else { "retry" });
                    tracing::warn!(callback_id = %row.id, movement_id = %row.request_id, attempt = row.attempts + 1, status = %status, error = %f.error, "callback delivery failed");
                }
            }
        }
        tx.commit().await?;
        Ok(rows.len())
    }

    async fn send(&self, row: &CallbackRow) -> std::result::Result<(), Failure> {
        let s = &self.settings.callbacks;
        let fail = |error: String| Failure { error, retry_after: None };
        // The movement's own secret wins over the global one.
        let secret: &[u8] = match (&row.movement_secret, &s.secret) {
            (Some(own), _) => own.as_bytes(),
            (None, Some(global)) => global,
            (None, None) => return Err(fail("MG_CALLBACK_SECRET is not set; nothing is sent unsigned".into())),
        };
        let (host, addr) = check_destination(&row.callback_url, s).await.map_err(fail)?;
        let body = serde_json::to_vec(&row.payload).map_err(|e| fail(e.to_string()))?;
        let ts = row.callback_timestamp.to_string();
        qtg_executor::remote::install_tls_provider();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(s.timeout)
            .resolve(&host, addr)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let mut req = client.post(&row.callback_url).header("content-type", "application/json");
        // The receiver joins the trace of the step that produced the event.
        if let Some(tp) = &row.traceparent {
            req = req.header("traceparent", tp);
        }
        // The nonce and timestamp stay those of the event across retries (receivers dedupe).
        for (name, value) in qtg_wire_auth::signature_headers(secret, &ts, &row.callback_nonce, &body) {
            req = req.header(name, value);
        }
        let resp = req.body(body).send().await.map_err(|e| {
            fail(if e.is_timeout() { format!("timed out after {:?}", s.timeout) } else { e.to_string() })
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
        ] {
            assert!(forbidden_ip(bad.parse().unwrap()), "{bad}");
        }
        for ok in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            assert!(!forbidden_ip(ok.parse().unwrap()), "{ok}");
        }
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
