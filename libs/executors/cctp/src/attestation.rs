//! `exec.cctp.attestation[.<suffix>]`, the observe step between a burn and its mint. It polls an
//! attestation service in the shape of Circle's API
//! (`GET /v2/messages/{sourceDomain}?transactionHash=0x…`) by the burn's transaction hash until
//! the attestation is `complete`, honouring a 429's `Retry-After`, and hands the message and
//! attestation to the mint as provider refs.
//!
//! ```toml
//! [executors."exec.cctp.attestation"]
//! transport = "local"
//! impl = "cctp"
//! config = { attestation_url = "https://iris-api.circle.com", source_domain = 0 }
//! ```

use std::time::Duration;

use alloy::primitives::{keccak256, Bytes};
use async_trait::async_trait;
use qtg_core::hash::canonical_json;
use qtg_core::{
    AfterObserve, AfterSubmit, ExecutionContext, ExecutionResult, ObserveOutcome, PreparedAction, Refusal,
    SubmitOutcome,
};
use qtg_executor::{Executor, ExecutorError, Prepared, Submission};
use serde::Deserialize;
use serde_json::{json, Value};

/// The seed's `cctp_attestation` observe interval.
const POLL_SECONDS: f64 = 15.0;

/// An attestation-observe entry's `config`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestationConfig {
    /// The attestation service's base URL.
    pub attestation_url: String,
    /// The burn's chain (CCTP domain); a node's `config.source_domain` overrides it.
    pub source_domain: Option<u32>,
    /// Seconds between polls while the attestation is pending (default 15).
    pub poll_seconds: Option<f64>,
    /// Deadline of one request (default 5000 ms).
    pub timeout_ms: Option<u64>,
    /// `true` allows plain `http://` to a host that is not loopback.
    pub insecure: Option<bool>,
}

pub struct AttestationObserver {
    config: AttestationConfig,
    http: reqwest::Client,
}

impl AttestationObserver {
    pub fn new(config: AttestationConfig) -> Result<Self, String> {
        let url = &config.attestation_url;
        let loopback = ["http://127.", "http://localhost", "http://[::1]"].iter().any(|p| url.starts_with(p));
        if !url.starts_with("https://") && !(url.starts_with("http://") && (loopback || config.insecure == Some(true)))
        {
            return Err(format!(
                "config.attestation_url {url:?}: use https (plain http only to loopback, or insecure = true)"
            ));
        }
        if config.poll_seconds.is_some_and(|s| !s.is_finite() || !(0.1..=3600.0).contains(&s)) {
            return Err("config.poll_seconds must be between 0.1 and 3600".into());
        }
        qtg_executor::remote::install_tls_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(config.timeout_ms.unwrap_or(5000)))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(AttestationObserver { config, http })
    }

    fn poll(&self) -> f64 {
        self.config.poll_seconds.unwrap_or(POLL_SECONDS)
    }

    /// `(source domain, burn tx hash)` of the node: its config, else its predecessor's refs.
    fn target(&self, ctx: &ExecutionContext) -> Result<(u32, String), String> {
        let domain = ctx
            .node_config
            .get("source_domain")
            .and_then(Value::as_u64)
            .and_then(|d| u32::try_from(d).ok())
            .or(self.config.source_domain)
            .ok_or("no source_domain in the node's config or the entry's")?;
        let hash = ctx
            .node_config
            .get("burn_tx_hash")
            .or_else(|| ctx.provider_context.get("tx_hash"))
            .and_then(Value::as_str)
            .filter(|h| h.starts_with("0x") && h.len() == 66 && h[2..].bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or("no burn transaction hash (config.burn_tx_hash, or a predecessor's tx_hash)")?;
        Ok((domain, hash.to_ascii_lowercase()))
    }

    fn waiting(&self, state: &str, retry_after: f64) -> ObserveOutcome {
        let mut r = ExecutionResult::new(AfterObserve::Observing);
        r.provider_state = Some(state.into());
        r.retry_after_seconds = Some(retry_after);
        r
    }

    /// `GET /v2/messages/{domain}?transactionHash={hash}` (`hash` is checked hex: nothing to
    /// escape); no answer is `Unavailable`, never with the URL.
    async fn lookup(&self, domain: u32, hash: &str) -> Result<reqwest::Response, ExecutorError> {
        let url = format!(
            "{}/v2/messages/{domain}?transactionHash={hash}",
            self.config.attestation_url.trim_end_matches('/')
        );
        self.http
            .get(&url)
            .send()
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("attestation service: {}", e.without_url())))
    }

    async fn look(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        let (domain, hash) = self.target(ctx).map_err(ExecutorError::Protocol)?;
        let resp = self.lookup(domain, &hash).await?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0);
        match status {
            404 => return Ok(self.waiting("not_seen", self.poll())),
            429 => {
                let wait = retry_after.unwrap_or(self.poll()).clamp(0.0, 3600.0);
                tracing::info!(
                    source_domain = domain, burn_tx_hash = %hash, retry_after_seconds = wait,
                    "attestation service rate-limited; waiting as told"
                );
                return Ok(self.waiting("rate_limited", wait));
            }
            200..=299 => {}
            other => return Err(ExecutorError::Unavailable(format!("attestation service answered HTTP {other}"))),
        }
        let body: Value = resp
            .json()
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("attestation service: not JSON: {}", e.without_url())))?;
        let index = ctx.node_config.get("message_index").and_then(Value::as_u64).unwrap_or(0) as usize;
        let Some(m) = body.get("messages").and_then(Value::as_array).and_then(|a| a.get(index)) else {
            return Ok(self.waiting("not_seen", self.poll()));
        };
        if m.get("status").and_then(Value::as_str) != Some("complete") {
            return Ok(self.waiting("pending_confirmations", self.poll()));
        }
        let hex =
            |k: &str| m.get(k).and_then(Value::as_str).and_then(|s| s.parse::<Bytes>().ok()).filter(|b| !b.is_empty());
        let (Some(message), Some(attestation)) = (hex("message"), hex("attestation")) else {
            return Err(ExecutorError::Protocol("a complete attestation without message or attestation bytes".into()));
        };
        // The burn's own message (its hash from the burn's receipt), when the burn is a
        // predecessor: the service may not attest another one for this transaction.
        if let Some(want) = ctx.provider_context.get("message_hash").and_then(Value::as_str) {
            if !want.eq_ignore_ascii_case(&keccak256(&message).to_string()) {
                tracing::error!(
                    source_domain = domain, burn_tx_hash = %hash,
                    "the attestation service answered another message than the burn's"
                );
                return Ok(ExecutionResult::failed(
                    qtg_core::codes::CCTP_ATTESTATION_MISMATCH,
                    format!(
                        "the service attested message {} for this burn, whose message is {want}",
                        keccak256(&message)
                    ),
                ));
            }
        }
        let mut r = ExecutionResult::new(AfterObserve::Completed);
        r.provider_state = Some("complete".into());
        r.provider_ref_id = Some(keccak256(&message).to_string());
        r.provider_refs.insert("message".into(), json!(message.to_string()));
        r.provider_refs.insert("attestation".into(), json!(attestation.to_string()));
        r.provider_refs.insert("message_hash".into(), json!(keccak256(&message).to_string()));
        r.provider_refs.insert("event_nonce".into(), m.get("eventNonce").cloned().unwrap_or(Value::Null));
        r.provider_refs.insert("source_domain".into(), json!(domain));
        Ok(r)
    }
}

#[async_trait]
impl Executor for AttestationObserver {
    async fn preflight(&self, ctx: &ExecutionContext) -> Result<Option<Refusal>, ExecutorError> {
        Ok(self.target(ctx).err().map(|why| ExecutionResult::failed(qtg_core::codes::CCTP_BURN_REFERENCE_MISSING, why)))
    }

    async fn prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError> {
        match self.target(ctx) {
            Ok((domain, hash)) => Ok(Prepared::Action(PreparedAction::new(
                &ctx.action_type,
                "json",
                canonical_json(&json!({"source_domain": domain, "burn_tx_hash": hash})),
                false,
            ))),
            Err(why) => {
                Ok(Prepared::Refused(ExecutionResult::failed(qtg_core::codes::CCTP_BURN_REFERENCE_MISSING, why)))
            }
        }
    }

    /// Observing moves nothing: its submit starts the watch.
    async fn submit(&self, _: &ExecutionContext, _: &Submission<'_>) -> Result<SubmitOutcome, ExecutorError> {
        let mut r = ExecutionResult::new(AfterSubmit::Submitted);
        r.retry_after_seconds = Some(1.0);
        Ok(r)
    }

    async fn observe(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        self.look(ctx).await
    }

    async fn recover(&self, ctx: &ExecutionContext, _: &str) -> Result<SubmitOutcome, ExecutorError> {
        Ok(self.look(ctx).await?.widen())
    }

    /// Up when the service answers a lookup (a 404 for an unknown burn is an answer; a 5xx or
    /// no answer is down), so the approval gate can vouch for it.
    async fn health(&self) -> Result<Option<serde_json::Value>, ExecutorError> {
        let resp = self.lookup(self.config.source_domain.unwrap_or(0), &format!("0x{}", "0".repeat(64))).await?;
        let status = resp.status().as_u16();
        if status >= 500 {
            return Err(ExecutorError::Unavailable(format!("attestation service answered HTTP {status}")));
        }
        Ok(Some(json!({"status": "ok", "attestation_http_status": status})))
    }
}
