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

use alloy::primitives::{keccak256, Bytes, B256, U256};
use async_trait::async_trait;
use qtg_core::hash::canonical_json;
use qtg_core::{
    AfterObserve, AfterSubmit, ExecutionContext, ExecutionResult, ObserveOutcome, PreparedAction, Refusal,
    SubmitOutcome,
};
use qtg_evm::calls::MessageV2;
use qtg_executor::{Executor, ExecutorError, Prepared, Submission};

use crate::domains::Version;
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
    /// A V2 Fast attestation that expires within this many blocks of the destination's head
    /// (default 2) is re-attested before it is handed to the mint.
    pub expiry_margin_blocks: Option<u64>,
}

pub struct AttestationObserver {
    config: AttestationConfig,
    http: reqwest::Client,
    /// The destinations' chains, to see a V2 attestation's expiry coming (none: not checked
    /// here; the mint refuses an expired one before sending).
    destinations: Option<(std::sync::Arc<crate::Domains>, std::sync::Arc<qtg_evm::Chains>)>,
    /// Where an attested V2 nonce is claimed for its movement (none: only the mint claims it).
    store: Option<sqlx::PgPool>,
}

impl AttestationObserver {
    pub fn new(config: AttestationConfig) -> Result<Self, String> {
        if config.poll_seconds.is_some_and(|s| !s.is_finite() || !(0.1..=3600.0).contains(&s)) {
            return Err("config.poll_seconds must be between 0.1 and 3600".into());
        }
        // The mint refuses an attestation expiring by the block it could land in (head + 1):
        // handing one over with less margin would fail the mint for good.
        if config.expiry_margin_blocks == Some(0) {
            return Err("config.expiry_margin_blocks must be at least 1".into());
        }
        let http = crate::service_client(
            "config.attestation_url",
            &config.attestation_url,
            config.insecure == Some(true),
            config.timeout_ms,
        )?;
        Ok(AttestationObserver { config, http, destinations: None, store: None })
    }

    /// Checks V2 expiries against the destination chains of `domains`.
    pub fn with_destinations(
        mut self,
        domains: std::sync::Arc<crate::Domains>,
        chains: std::sync::Arc<qtg_evm::Chains>,
    ) -> Self {
        self.destinations = Some((domains, chains));
        self
    }

    /// Claims each attested V2 nonce for its movement (`qtg_store::cctp`), so a message
    /// attested for another burn fails this step rather than reaching the mint.
    pub fn with_store(mut self, pool: sqlx::PgPool) -> Self {
        self.store = Some(pool);
        self
    }

    /// Whether the attested V2 nonce is this movement's: claimed for it now or before. `None`
    /// when it is; the FAILED answer when another movement holds it.
    async fn claim(&self, ctx: &ExecutionContext, m: &MessageV2) -> Result<Option<ObserveOutcome>, ExecutorError> {
        let Some(pool) = &self.store else { return Ok(None) };
        let request = uuid::Uuid::parse_str(&ctx.request_id)
            .map_err(|e| ExecutorError::Protocol(format!("request id {:?}: {e}", ctx.request_id)))?;
        let owner = qtg_store::cctp::claim_nonce(pool, m.source_domain, &m.nonce.to_string(), request)
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("claim the attested nonce: {e}")))?;
        if owner == request {
            return Ok(None);
        }
        tracing::error!(
            source_domain = m.source_domain, message_nonce = %m.nonce, other_movement = %owner,
            "the attestation service answered a message whose nonce another movement holds"
        );
        Ok(Some(ExecutionResult::failed(
            qtg_core::codes::CCTP_ATTESTATION_MISMATCH,
            format!(
                "the service attested nonce {} (domain {}), which movement {owner} holds: the message is another \
                 burn's",
                m.nonce, m.source_domain
            ),
        )))
    }

    /// The destination chain's head, when its chain is known.
    async fn destination_head(&self, domain: u32) -> Result<Option<U256>, ExecutorError> {
        let Some((domains, chains)) = &self.destinations else { return Ok(None) };
        let Some(chain) = domains.get(domain).and_then(|d| chains.get(&d.chain_id)) else { return Ok(None) };
        let head = chain
            .rpc
            .call("eth_blockNumber", json!([]))
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("destination chain: {e}")))?;
        Ok(head.as_str().and_then(|h| U256::from_str_radix(h.trim_start_matches("0x"), 16).ok()))
    }

    /// Whether the destination's V2 transmitter already received the message with `nonce`
    /// (whoever sent it): then it needs no new attestation, and the mint completes by it.
    async fn received(&self, destination: u32, nonce: &B256) -> Result<bool, ExecutorError> {
        let Some((domains, chains)) = &self.destinations else { return Ok(false) };
        let Some((chain, transmitter)) =
            domains.get(destination).and_then(|d| Some((chains.get(&d.chain_id)?, d.v2.as_ref()?.message_transmitter)))
        else {
            return Ok(false);
        };
        let used = qtg_evm::call::call_word(&chain.rpc, transmitter, qtg_evm::calls::used_nonces_calldata(*nonce))
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("destination chain: {e}")))?;
        Ok(!used.is_zero())
    }

    /// `POST /v2/reattest/{nonce}`: the service signs the message again with a new expiry. A
    /// refusal (4xx: not eligible yet, already re-attested) is said and waited on: the next
    /// lookup tells.
    async fn reattest(&self, nonce: &B256) -> Result<(), ExecutorError> {
        let url = format!("{}/v2/reattest/{nonce}", self.config.attestation_url.trim_end_matches('/'));
        let resp = self
            .http
            .post(&url)
            .send()
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("attestation service: {}", e.without_url())))?;
        let status = resp.status().as_u16();
        if (400..500).contains(&status) {
            tracing::warn!(%nonce, http_status = status, "the attestation service refused the re-attestation; waiting");
            return Ok(());
        }
        if !resp.status().is_success() {
            return Err(ExecutorError::Unavailable(format!(
                "attestation service refused the re-attestation: HTTP {status}"
            )));
        }
        Ok(())
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
        let m_delay = m.get("delayReason").cloned().unwrap_or(Value::Null);
        if m.get("status").and_then(Value::as_str) != Some("complete") {
            // A Fast transfer that fell back to Standard (allowance exhausted, fee too low)
            // only waits longer; the reason is said, not acted on.
            if let Some(reason) = m_delay.as_str() {
                tracing::info!(
                    source_domain = domain, burn_tx_hash = %hash, delay_reason = reason,
                    "attestation pending; the service says why it is delayed"
                );
            }
            return Ok(self.waiting("pending_confirmations", self.poll()));
        }
        let hex =
            |k: &str| m.get(k).and_then(Value::as_str).and_then(|s| s.parse::<Bytes>().ok()).filter(|b| !b.is_empty());
        let (Some(message), Some(attestation)) = (hex("message"), hex("attestation")) else {
            return Err(ExecutorError::Protocol("a complete attestation without message or attestation bytes".into()));
        };
        let version = crate::domains::Version::of_message(&message);
        if let Some(refusal) = Self::bound_to_burn(ctx, domain, &hash, &message, version) {
            return Ok(refusal);
        }
        if let Some(m) = MessageV2::parse(&message).filter(|_| version == Some(Version::V2)) {
            if let Some(failed) = self.claim(ctx, &m).await? {
                return Ok(failed);
            }
            let expiry = m.burn().map_or(U256::ZERO, |b| b.expiration_block);
            if !expiry.is_zero() {
                let margin = U256::from(self.config.expiry_margin_blocks.unwrap_or(2));
                if let Some(head) = self.destination_head(m.destination_domain).await? {
                    if head + margin >= expiry && !self.received(m.destination_domain, &m.nonce).await? {
                        tracing::warn!(
                            source_domain = domain, burn_tx_hash = %hash, message_nonce = %m.nonce,
                            expiration_block = %expiry, destination_head = %head,
                            "the Fast attestation expires before a mint could land; asking for a re-attestation"
                        );
                        self.reattest(&m.nonce).await?;
                        return Ok(self.waiting("reattesting", self.poll()));
                    }
                }
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
        if let Some(v) = version {
            r.provider_refs.insert("cctp_version".into(), json!(v.number()));
        }
        if let Some(m) = MessageV2::parse(&message).filter(|_| version == Some(Version::V2)) {
            // The attester's fields: what the mint will receive and what it costs.
            r.provider_refs.insert("message_nonce".into(), json!(m.nonce.to_string()));
            r.provider_refs.insert("finality_threshold_executed".into(), json!(m.finality_threshold_executed));
            if let Some(b) = m.burn() {
                r.provider_refs.insert("fee_executed".into(), json!(b.fee_executed.to_string()));
                r.provider_refs.insert("expiration_block".into(), json!(b.expiration_block.to_string()));
            }
            r.provider_refs.insert("delay_reason".into(), m_delay.clone());
            tracing::info!(
                source_domain = domain, burn_tx_hash = %hash, message_nonce = %m.nonce,
                finality_threshold_executed = m.finality_threshold_executed, delay_reason = %m_delay,
                "V2 attestation complete"
            );
        }
        Ok(r)
    }

    /// The attested message is the burn's, when the burn is a predecessor: V1 by its hash (the
    /// burn's receipt's), V2 — whose attested message differs from the emitted one by the
    /// fields the attester fills — by [`MessageV2::same_transfer`] with the emitted bytes. A
    /// service that attests another message for this transaction fails the step.
    fn bound_to_burn(
        ctx: &ExecutionContext,
        domain: u32,
        hash: &str,
        message: &Bytes,
        version: Option<Version>,
    ) -> Option<ObserveOutcome> {
        let mismatch = |why: String| {
            tracing::error!(
                source_domain = domain, burn_tx_hash = %hash, %why,
                "the attestation service answered another message than the burn's"
            );
            Some(ExecutionResult::failed(qtg_core::codes::CCTP_ATTESTATION_MISMATCH, why))
        };
        let burned = ctx.provider_context.get("cctp_version").and_then(Value::as_u64);
        match version {
            Some(Version::V2) => {
                if burned == Some(1) {
                    return mismatch("the service attested a V2 message for a V1 burn".into());
                }
                let emitted = ctx
                    .provider_context
                    .get("message")
                    .and_then(Value::as_str)
                    .and_then(|h| h.parse::<Bytes>().ok())
                    .and_then(|b| MessageV2::parse(&b));
                let attested = MessageV2::parse(message)?;
                if attested.nonce.is_zero() {
                    return mismatch("the service answered a V2 message without an attested nonce".into());
                }
                match emitted {
                    Some(e) if !e.same_transfer(&attested) => mismatch(format!(
                        "the service attested message {} for this burn, which is not its transfer",
                        keccak256(message)
                    )),
                    _ => None,
                }
            }
            _ => {
                if burned == Some(2) {
                    return mismatch("the service attested a V1 message for a V2 burn".into());
                }
                let want = ctx.provider_context.get("message_hash").and_then(Value::as_str)?;
                if want.eq_ignore_ascii_case(&keccak256(message).to_string()) {
                    return None;
                }
                mismatch(format!(
                    "the service attested message {} for this burn, whose message is {want}",
                    keccak256(message)
                ))
            }
        }
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
