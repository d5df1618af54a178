//! The lane's three executors, the seed's relay: `withdrawal_action` sends the withdrawal
//! and answers the venue's withdrawal id; `withdrawal_observe` follows it to completion and
//! answers the `txid`; `deposit_observe` finds the deposit on the destination account by
//! txid, amount and address.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use qtg_core::hash::canonical_json;
use qtg_core::markers::{
    LEGACY_RECONCILIATION_GATED, MANUAL_REVIEW_REQUIRED, RECONCILIATION, STATUS_UNMAPPED, SUBMIT_ATTEMPT_PENDING,
    SUBMIT_ATTEMPT_STARTED_AT,
};
use qtg_core::risk::Amount;
use qtg_core::{ExecutionContext, ExecutionResult, NodeState, PreparedAction};
use qtg_executor::{Executor, ExecutorError, Prepared, Submission};
use qtg_store::cex::{self as keys, Recorded};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::config::{EntryConfig, Role};
use crate::fees::{self, AmountIs, FeeModel, Priced};
use crate::reconcile::{candidates, Candidate, Target};
use crate::venue::{
    deposit_phase, withdrawal_phase, DepositPhase, Fencing, Stamp, Venue, VenueError, WithdrawRequest, WithdrawalPhase,
};

/// Seconds between polls of a withdrawal and of a deposit (the seed's `cex_withdrawal_status`
/// and `cex_deposit_status` intervals).
const WITHDRAWAL_POLL_SECONDS: f64 = 5.0;
const DEPOSIT_POLL_SECONDS: f64 = 10.0;

/// One executor of the lane: its role, its venue account, the key store.
pub struct CexExecutor {
    key: String,
    role: Role,
    config: EntryConfig,
    venue: Arc<dyn Venue>,
    pool: PgPool,
    /// `MG_CLOCK_SKEW_MARGIN_SECONDS`.
    skew: chrono::Duration,
}

impl CexExecutor {
    pub fn new(
        key: &str,
        role: Role,
        config: EntryConfig,
        venue: Arc<dyn Venue>,
        pool: PgPool,
        skew: chrono::Duration,
    ) -> Self {
        CexExecutor { key: key.to_string(), role, config, venue, pool, skew }
    }

    fn result(&self, state: NodeState) -> ExecutionResult {
        let mut r = ExecutionResult::new(state);
        r.provider_refs.insert("venue".into(), json!(self.config.venue));
        r
    }

    fn failed(&self, code: &str, detail: impl Into<String>) -> ExecutionResult {
        ExecutionResult {
            error_code: Some(code.into()),
            error_detail: Some(detail.into()),
            ..self.result(NodeState::Failed)
        }
    }

    fn unknown_status(&self, kind: &'static str, code: i64, id: &str) -> ExecutionResult {
        // Runbook C5: never guess a status; a person adds it to the mapping.
        tracing::warn!(venue = %self.config.venue, executor_key = %self.key, kind, code, id, "unknown_code: the venue reported a status the mapping does not know; still observing");
        qtg_telemetry::sink().venue_unknown_status(&self.config.venue, kind, code);
        let mut r = self.result(NodeState::Observing);
        r.provider_refs.insert(STATUS_UNMAPPED.into(), json!({"kind": kind, "code": code}));
        r.provider_state = Some(format!("unmapped_status_{code}"));
        r.retry_after_seconds = Some(WITHDRAWAL_POLL_SECONDS * 6.0);
        r.error_code = Some("CEX_STATUS_UNMAPPED".into());
        r.error_detail = Some(format!("the venue reports {kind} status {code}, which qtg does not map (runbook C5)"));
        r
    }

    /// A venue failure on a read: auth → the node's FAILED before anything left (preflight);
    /// anything else → no answer (nothing changes; the engine backs off).
    fn unavailable(&self, e: VenueError) -> ExecutorError {
        ExecutorError::Unavailable(format!("venue {}: {e}", self.config.venue))
    }

    fn store(e: qtg_store::StoreError) -> ExecutorError {
        ExecutorError::Unavailable(format!("the cex key store: {e}"))
    }
}

/// What a withdrawal node moves, read from its intent and config the same way at prepare and
/// at recover.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WithdrawPayload {
    pub venue: String,
    pub coin: String,
    pub network: Option<String>,
    pub address: String,
    pub address_tag: Option<String>,
    /// What the withdraw request says: the intent's amount, grossed up by the fee when the
    /// intent's amount is what must arrive at a venue that deducts it.
    pub amount: String,
    /// The withdrawal's amounts under the venue's fee model, as prepared (absent in a payload
    /// prepared before fee models, and before pricing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priced: Option<Priced>,
    /// The withdrawal key that pays the address, at a venue that pays by key (Kraken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A refusal before anything is sent: an error code and why.
type Refusal = (&'static str, String);

/// The destination (and memo) against the formats the venue documents for the network
/// (`addressRegex`, `memoRegex`), before anything is sent. A venue format that does not compile
/// refuses too (fail closed): nothing is withdrawn to an address qtg cannot check.
fn format_refusal(net: &crate::venue::NetworkInfo, p: &WithdrawPayload) -> Option<(&'static str, String)> {
    let check = |what: &str, pattern: Option<&str>, value: &str| -> Option<(&'static str, String)> {
        let pattern = pattern.filter(|r| !r.is_empty())?;
        match regex::RegexBuilder::new(pattern).size_limit(1 << 20).build() {
            Ok(re) if re.is_match(value) => None,
            Ok(_) => Some((
                "CEX_ADDRESS_INVALID",
                format!(
                    "{what} {value:?} is not in {}'s format for {} on {} ({pattern})",
                    p.venue, p.coin, net.network
                ),
            )),
            Err(e) => Some((
                "CEX_ADDRESS_INVALID",
                format!(
                    "{}'s {what} format for {} ({pattern:?}) does not compile ({e}); nothing is sent",
                    p.venue, net.network
                ),
            )),
        }
    };
    check("address", net.address_regex.as_deref(), &p.address).or_else(|| match &p.address_tag {
        Some(tag) => check("memo", net.memo_regex.as_deref(), tag),
        None => None,
    })
}

/// The address a withdrawal pays: the node config's `address` (fixed by the template), else
/// the intent's `destination` — the value approvers are shown and allow-lists check. It is a
/// string; a memo or tag goes in `intent.memo` (or `address_tag`), the network in
/// `intent.network` or the entry's config. An intent `address` beside it must say the same.
fn destination_of(node_config: &Value, intent: &Value) -> Result<String, String> {
    let expects = "intent.destination must be the withdrawal address as a string (a memo or tag goes in \
                   intent.memo, the network in intent.network)";
    let fixed = node_config.get("address").and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let address = match (fixed, intent.get("destination")) {
        // The template fixes the address: an intent naming another would show the approver
        // an address that is not paid.
        (Some(a), Some(Value::String(d))) if d.trim() != a => {
            return Err(format!("intent.destination {d:?} is not the address this template pays ({a:?})"))
        }
        (Some(a), _) => a.to_string(),
        (None, Some(Value::String(d))) if !d.trim().is_empty() => d.trim().to_string(),
        (None, Some(Value::Object(_))) => return Err(format!("{expects}, not an object")),
        (None, _) => return Err(format!("the intent has no destination: {expects}")),
    };
    match intent.get("address") {
        None | Some(Value::Null) => Ok(address),
        Some(Value::String(a)) if a.trim() == address => Ok(address),
        Some(other) => Err(format!(
            "intent.address {other} is not the address paid ({address:?}): give the destination once, in \
             intent.destination"
        )),
    }
}

impl WithdrawPayload {
    fn of(ctx: &ExecutionContext, config: &EntryConfig) -> Result<WithdrawPayload, String> {
        let field = |name: &str| -> Option<String> {
            ctx.node_config
                .get(name)
                .or_else(|| ctx.intent.get(name))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let coin = field("asset").ok_or("the intent has no asset")?;
        let amount = field("amount").ok_or("the intent has no amount")?;
        if Amount::parse(&amount).is_none_or(|a| a.is_zero()) {
            return Err(format!("amount {amount:?} is not a positive decimal"));
        }
        let address = destination_of(&ctx.node_config, &ctx.intent)?;
        Ok(WithdrawPayload {
            venue: config.venue.clone(),
            coin,
            network: field("network").or_else(|| config.network.clone()),
            address,
            address_tag: field("address_tag").or_else(|| field("memo")),
            amount,
            priced: None,
            key: None,
        })
    }

    /// The payload with its amounts under `model`, at the fee the venue states for `net`,
    /// within the template's fee cap. Refused when the venue states no fee (what arrives
    /// could not be known), the fee is over the cap, or nothing would arrive.
    fn priced(
        mut self,
        net: &crate::venue::NetworkInfo,
        model: FeeModel,
        amount_is: AmountIs,
        risk_controls: &Value,
    ) -> Result<WithdrawPayload, Refusal> {
        let fee = net.withdraw_fee.as_deref().and_then(Amount::parse_any).ok_or_else(|| {
            (
                "CEX_FEE_UNKNOWN",
                format!(
                    "{} states no withdrawal fee for {} on {}: what would arrive cannot be known; nothing is sent",
                    self.venue, self.coin, net.network
                ),
            )
        })?;
        let cap = fees::fee_cap(risk_controls, &self.coin).map_err(|e| ("CEX_INTENT_INVALID", e))?;
        match &cap {
            Some(cap) if &fee > cap => {
                return Err((
                    "CEX_FEE_OVER_CAP",
                    format!(
                        "{}'s fee for {} on {} is {fee}, over the template's cap of {cap} (risk_controls.max_fee)",
                        self.venue, self.coin, net.network
                    ),
                ))
            }
            None if amount_is == AmountIs::Received && model == FeeModel::Deducted => {
                return Err((
                    "CEX_FEE_CAP_REQUIRED",
                    "an amount that must arrive is grossed up by the venue's fee: the template must cap the fee \
                     (risk_controls.max_fee)"
                        .to_string(),
                ))
            }
            _ => {}
        }
        let requested = Amount::parse_any(&self.amount).unwrap_or(Amount::ZERO);
        let priced = fees::price(model, amount_is, &requested, &fee).map_err(|e| ("CEX_AMOUNT_BELOW_FEE", e))?;
        self.network = Some(net.network.clone());
        self.amount = priced.applied.clone();
        self.priced = Some(priced);
        Ok(self)
    }

    fn request(&self, client_id: &str) -> WithdrawRequest {
        WithdrawRequest {
            coin: self.coin.clone(),
            network: self.network.clone(),
            address: self.address.clone(),
            address_tag: self.address_tag.clone(),
            amount: self.amount.clone(),
            client_id: client_id.to_string(),
            key: self.key.clone(),
            max_fee: self.priced.as_ref().map(|p| p.fee.clone()),
        }
    }

    fn target<'a>(&'a self, client_id: &'a str) -> Target<'a> {
        Target {
            coin: &self.coin,
            address: &self.address,
            address_tag: self.address_tag.as_deref(),
            amount: &self.amount,
            client_id,
            key: self.key.as_deref(),
        }
    }
}

fn node_id(ctx: &ExecutionContext) -> Result<Uuid, ExecutorError> {
    ctx.request_node_id.parse().map_err(|_| ExecutorError::Protocol("request_node_id is not a uuid".into()))
}

/// A value the node's config or its predecessors' refs carry.
fn carried(ctx: &ExecutionContext, config_key: &str, context_key: &str) -> Option<String> {
    let text = |v: &Value| match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    ctx.node_config.get(config_key).and_then(text).or_else(|| ctx.provider_context.get(context_key).and_then(text))
}

/// The venue's withdrawal id this node recorded.
fn recorded_withdrawal_id(ctx: &ExecutionContext) -> Option<String> {
    ctx.provider_ref_id
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| ctx.provider_refs.get("exchange_withdrawal_id").and_then(Value::as_str).map(str::to_string))
}

/// Where an attempt's key stands against the venue ([`CexExecutor::fence`]).
enum Fence {
    /// Never sent, and voided: it never will be.
    NeverSent,
    /// It may still reach the venue (or its effect not yet show in the history) until then.
    Pending(DateTime<Utc>),
    /// Past this time the venue's history shows whatever the key did.
    Closed(DateTime<Utc>),
}

/// Where the nonce fence of a sent key stands.
enum NonceFence {
    /// Fenced before a request was signed with the key: nothing can have left.
    NeverSigned,
    /// A call above the request's nonce was accepted at this (venue) time.
    Fenced(DateTime<Utc>),
}

/// What one withdraw request on the wire came to.
enum Sent {
    Booked {
        id: String,
        signed_at: DateTime<Utc>,
        recv_window_ms: u32,
    },
    /// The venue's time was too close to `submit_by`: nothing sent, the key is void.
    TooLate {
        venue_time: DateTime<Utc>,
    },
    /// The key was voided (by recovery) before the request left: nothing sent.
    Voided,
    /// The venue's time could not be read: nothing sent, the key is void.
    NoTime(VenueError),
    /// The venue stated it did not act: the key is void.
    Refused(VenueError),
    /// The request may have reached the venue and no answer says what it did.
    Unknown(VenueError),
}

impl CexExecutor {
    /// The withdraw request on the wire: the key marked sent, the venue's time T, the fence's
    /// last check (`T + 1 s ≤ submit_by`), `recvWindow = submit_by − T` (capped), the signed
    /// request. Runs to its end as its own task even if the caller gives up; the venue refuses
    /// it once its clock is past T + `recvWindow` — however long this process was frozen.
    async fn send(
        venue: Arc<dyn Venue>,
        pool: PgPool,
        payload: WithdrawPayload,
        key: String,
        submit_by: DateTime<Utc>,
        max_window_ms: u32,
        (node, attempt): (Uuid, i32),
    ) -> Result<Sent, qtg_store::StoreError> {
        let req = payload.request(&key);
        let name = venue.name().to_string();
        if !keys::mark_sent(&pool, &key, &serde_json::to_value(&payload).unwrap_or(Value::Null)).await? {
            // Voided by recovery — or marked sent by a concurrent submit of the same key,
            // whose request may be on its way: then this call knows nothing for sure.
            return Ok(match keys::get(&pool, &key).await?.map(|k| k.status) {
                Some(keys::KeyStatus::Sent) => {
                    Sent::Unknown(VenueError::NoAnswer("another call is sending this key".into()))
                }
                _ => Sent::Voided,
            });
        }
        // Nothing left yet: a key this call voids is its own.
        let t = match venue.server_time().await {
            Ok(t) => t,
            Err(e) => {
                keys::void(&pool, &key, &name, node, attempt, "the venue's time could not be read; nothing was sent")
                    .await?;
                return Ok(Sent::NoTime(e));
            }
        };
        let left = (submit_by - t).num_milliseconds();
        if left < 1000 {
            keys::void(
                &pool,
                &key,
                &name,
                node,
                attempt,
                "the venue's time was within 1 s of submit_by; nothing was sent",
            )
            .await?;
            return Ok(Sent::TooLate { venue_time: t });
        }
        let window = u32::try_from(left).unwrap_or(u32::MAX).min(max_window_ms);
        let nonce = match venue.fencing() {
            Fencing::RecvWindow => {
                keys::note_signature(&pool, &key, t, window as i32).await?;
                None
            }
            Fencing::Nonce => {
                // The nonce is noted before the request is signed with it, and only while
                // recovery has not asked for the fence: recovery then raises the key's nonce
                // above it, or knows nothing was signed.
                let n = venue.reserve_nonce().unwrap_or(0);
                if !keys::note_nonce(&pool, &key, t, i64::try_from(n).unwrap_or(i64::MAX)).await? {
                    return Ok(Sent::Voided);
                }
                Some(n)
            }
        };
        tracing::info!(venue = %name, idempotency_key = %key, venue_time = %t, recv_window_ms = window, nonce, "sending withdraw request");
        match venue.submit_withdrawal(&req, Stamp { signed_at: t, recv_window_ms: window, nonce }).await {
            Ok(id) => Ok(Sent::Booked { id, signed_at: t, recv_window_ms: window }),
            Err(e) if e.not_executed() => {
                keys::void(&pool, &key, &name, node, attempt, &format!("the venue refused the request: {e}")).await?;
                Ok(Sent::Refused(e))
            }
            Err(e) => Ok(Sent::Unknown(e)),
        }
    }

    /// The venue holds withdrawal `id` for key `key`: its refs carry what was priced (the fee
    /// model, the fee, what was applied for, what leaves the account and what must arrive),
    /// which the observe nodes after it check the venue against.
    fn booked(&self, id: &str, key: &str, p: &WithdrawPayload) -> ExecutionResult {
        let mut r = self.result(NodeState::Submitted);
        r.provider_state = Some("accepted".into());
        r.provider_ref_id = Some(id.to_string());
        r.provider_refs.insert("exchange_withdrawal_id".into(), json!(id));
        r.provider_refs.insert("withdraw_order_id".into(), json!(key));
        if let Some(priced) = &p.priced {
            r.provider_refs.insert("fee_model".into(), json!(priced.fee_model));
            r.provider_refs.insert("amount_is".into(), json!(priced.amount_is));
            r.provider_refs.insert("withdrawal_fee".into(), json!(priced.fee));
            r.provider_refs.insert("amount_applied".into(), json!(priced.applied));
            r.provider_refs.insert("debit".into(), json!(priced.debit));
            r.provider_refs.insert("expected_arrival".into(), json!(priced.arrival));
        }
        r.retry_after_seconds = Some(1.0);
        r
    }

    async fn submit_withdrawal(
        &self,
        ctx: &ExecutionContext,
        s: &Submission<'_>,
    ) -> Result<ExecutionResult, ExecutorError> {
        // What was prepared is what is sent.
        let payload: WithdrawPayload = serde_json::from_str(&s.prepared.payload)
            .map_err(|e| ExecutorError::Protocol(format!("the prepared withdrawal does not parse: {e}")))?;
        if payload.venue != self.config.venue {
            return Ok(self.failed(
                "CEX_VENUE_MISMATCH",
                format!("prepared for venue {:?}, this entry is {:?}", payload.venue, self.config.venue),
            ));
        }
        let key = s.idempotency_key;
        let node = node_id(ctx)?;
        match keys::record(&self.pool, key, &self.config.venue, node, ctx.attempt_no, s.submit_by)
            .await
            .map_err(Self::store)?
        {
            Recorded::Fresh => {}
            Recorded::Void(reason) => {
                return Ok(self.failed(
                    "CEX_KEY_VOID",
                    format!("the idempotency key is void ({}); nothing was sent", reason.unwrap_or_default()),
                ))
            }
            Recorded::Superseded { newest } => {
                return Ok(self.failed(
                    "CEX_KEY_SUPERSEDED",
                    format!("attempt {newest} of this node was already seen; nothing was sent"),
                ))
            }
            Recorded::Late => {
                return Ok(
                    self.failed("CEX_SUBMIT_LATE", "received after submit_by; the key is void and nothing was sent")
                )
            }
            Recorded::AlreadySent(_) => {
                // Never sent twice: what the venue has under this key is the answer.
                let found =
                    self.venue.withdrawals_by_client_id(&payload.coin, key).await.map_err(|e| self.unavailable(e))?;
                return Ok(match found.as_slice() {
                    [w] => self.booked(&w.id, key, &payload),
                    _ => ExecutionResult {
                        error_code: Some("CEX_KEY_ALREADY_SENT".into()),
                        error_detail: Some(
                            "this key was sent before and the venue does not show it (yet); recovery decides".into(),
                        ),
                        ..self.result(NodeState::Unknown)
                    },
                });
            }
        }
        let call = tokio::spawn(Self::send(
            self.venue.clone(),
            self.pool.clone(),
            payload.clone(),
            key.to_string(),
            s.submit_by,
            self.config.max_recv_window_ms(),
            (node, ctx.attempt_no),
        ));
        let sent = call
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("the withdraw task: {e}")))?
            .map_err(Self::store)?;
        Ok(match sent {
            Sent::Booked { id, signed_at, recv_window_ms } => {
                let mut r = self.booked(&id, key, &payload);
                r.provider_refs.insert("venue_signed_at".into(), json!(signed_at.to_rfc3339()));
                r.provider_refs.insert("recv_window_ms".into(), json!(recv_window_ms));
                r
            }
            Sent::TooLate { venue_time } => self.failed(
                "CEX_SUBMIT_LATE",
                format!(
                    "the venue's time {venue_time} is within 1 s of submit_by {}; nothing was sent, the key is void",
                    s.submit_by
                ),
            ),
            Sent::Voided => self.failed("CEX_KEY_VOID", "the key was voided before the request left; nothing was sent"),
            Sent::NoTime(e) => {
                self.failed("CEX_VENUE_TIME_UNAVAILABLE", format!("{e}; nothing was sent, the key is void"))
            }
            Sent::Refused(e) => {
                let code = match e {
                    VenueError::Auth { .. } => "CEX_AUTH_FAILED",
                    VenueError::RateLimited { .. } => "CEX_RATE_LIMITED",
                    VenueError::Unreachable(_) => "CEX_VENUE_UNREACHABLE",
                    _ => "CEX_WITHDRAWAL_REFUSED",
                };
                self.failed(code, e.to_string())
            }
            Sent::Unknown(e) => {
                tracing::warn!(venue = %self.config.venue, idempotency_key = %key, error = %e, "withdraw request without an answer; recovery reconciles it");
                ExecutionResult {
                    error_code: Some(match e {
                        VenueError::Server { .. } => "CEX_VENUE_ERROR".into(),
                        _ => "CEX_NO_ANSWER".into(),
                    }),
                    error_detail: Some(e.to_string()),
                    ..self.result(NodeState::Unknown)
                }
            }
        })
    }

    /// Preflight of a withdrawal: whitelisted address, asset and network open for
    /// withdrawals, the fee known and within the cap, amount within the venue's limits,
    /// balance for what the withdrawal debits under the venue's fee model.
    async fn preflight_withdrawal(&self, ctx: &ExecutionContext) -> Result<Option<ExecutionResult>, ExecutorError> {
        let checked = match self.quote(ctx).await {
            Ok(Ok((p, net))) => self.check_withdrawal(&p, &net).await,
            Ok(Err(refusal)) => Ok(Some(refusal)),
            Err(e) => Err(e),
        };
        match checked {
            Ok(None) => Ok(None),
            Ok(Some((code, detail))) => Ok(Some(self.failed(code, detail))),
            Err(e @ VenueError::Auth { .. }) => Ok(Some(self.failed("CEX_AUTH_FAILED", e.to_string()))),
            Err(e) => Err(self.unavailable(e)),
        }
    }

    /// The withdrawal as the intent asks for it, on the network it uses, priced at the fee
    /// the venue states now (what prepare fixes, approvers see and submit sends).
    async fn quote(
        &self,
        ctx: &ExecutionContext,
    ) -> Result<Result<(WithdrawPayload, crate::venue::NetworkInfo), Refusal>, VenueError> {
        let p = match WithdrawPayload::of(ctx, &self.config) {
            Ok(p) => p,
            Err(why) => return Ok(Err(("CEX_INTENT_INVALID", why))),
        };
        let amount_is = match AmountIs::of_intent(&ctx.intent) {
            Ok(a) => a,
            Err(why) => return Ok(Err(("CEX_INTENT_INVALID", why))),
        };
        let networks = self.venue.networks(&p.coin).await?;
        if networks.is_empty() {
            return Ok(Err(("CEX_ASSET_UNAVAILABLE", format!("{} does not list asset {}", p.venue, p.coin))));
        }
        let net = match &p.network {
            Some(n) => networks.iter().find(|x| &x.network == n),
            None if networks.len() == 1 => networks.first(),
            None => {
                let names: Vec<_> = networks.iter().map(|n| n.network.as_str()).collect();
                return Ok(Err(("CEX_NETWORK_REQUIRED", format!("{} moves on {names:?}: name the network", p.coin))));
            }
        };
        let Some(net) = net.filter(|n| n.withdraw_enable).cloned() else {
            return Ok(Err((
                "CEX_NETWORK_UNAVAILABLE",
                format!(
                    "{} on {} is not open for withdrawals at {}",
                    p.coin,
                    p.network.as_deref().unwrap_or("?"),
                    p.venue
                ),
            )));
        };
        let model = self.config.fee_model(&p.coin, Some(&net.network));
        let mut p = match p.priced(&net, model, amount_is, &ctx.risk_controls) {
            Ok(p) => p,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if self.venue.pays_by_key() {
            // The venue pays a saved withdrawal key, not an address: the key that holds exactly
            // this address (and memo) for the asset and network.
            let saved = self.venue.whitelist().await?;
            let found = saved.iter().find(|w| {
                w.address.eq_ignore_ascii_case(&p.address)
                    && w.address_tag.as_deref().filter(|t| !t.is_empty()) == p.address_tag.as_deref()
                    && w.coin.as_deref().is_none_or(|c| c.eq_ignore_ascii_case(&p.coin))
                    && w.network.as_deref().is_none_or(|n| n == net.network)
            });
            match found.and_then(|w| w.key.clone()) {
                Some(key) => p.key = Some(key),
                None => {
                    return Ok(Err((
                        "CEX_ADDRESS_NOT_WHITELISTED",
                        format!("{} has no withdrawal key for {} {} on {}", p.venue, p.coin, p.address, net.network),
                    )))
                }
            }
        }
        Ok(Ok((p, net)))
    }

    async fn check_withdrawal(
        &self,
        p: &WithdrawPayload,
        net: &crate::venue::NetworkInfo,
    ) -> Result<Option<Refusal>, VenueError> {
        let whitelist = self.venue.whitelist().await?;
        let listed = whitelist.iter().any(|w| {
            w.address.eq_ignore_ascii_case(&p.address)
                && w.address_tag.as_deref().filter(|t| !t.is_empty()) == p.address_tag.as_deref()
                && w.coin.as_deref().is_none_or(|c| c.is_empty() || c.eq_ignore_ascii_case(&p.coin))
                && w.network.as_deref().is_none_or(|n| n.is_empty() || p.network.as_deref().is_none_or(|m| m == n))
        });
        if !listed {
            return Ok(Some((
                "CEX_ADDRESS_NOT_WHITELISTED",
                format!("{} is not on the withdrawal whitelist of {}", p.address, p.venue),
            )));
        }
        if let Some(refusal) = format_refusal(net, p) {
            return Ok(Some(refusal));
        }
        let amount = Amount::parse_any(&p.amount).unwrap_or(Amount::ZERO);
        let bound = |v: &Option<String>| v.as_deref().and_then(Amount::parse_any).filter(|a| !a.is_zero());
        if bound(&net.withdraw_min).is_some_and(|min| amount < min)
            || bound(&net.withdraw_max).is_some_and(|max| amount > max)
        {
            return Ok(Some((
                "CEX_AMOUNT_OUT_OF_RANGE",
                format!(
                    "{} {} is outside the venue's limits [{}, {}]",
                    p.amount,
                    p.coin,
                    net.withdraw_min.as_deref().unwrap_or("-"),
                    net.withdraw_max.as_deref().unwrap_or("-")
                ),
            )));
        }
        let Some(priced) = &p.priced else {
            return Ok(Some(("CEX_INTENT_INVALID", "the withdrawal was not priced".into())));
        };
        let needed = Amount::parse_any(&priced.debit).unwrap_or(Amount::ZERO);
        let balances = self.venue.balances().await?;
        let free = balances
            .iter()
            .find(|b| b.asset.eq_ignore_ascii_case(&p.coin))
            .and_then(|b| Amount::parse_any(&b.free))
            .unwrap_or(Amount::ZERO);
        if free < needed {
            return Ok(Some((
                "CEX_INSUFFICIENT_BALANCE",
                format!(
                    "{} has {free} {} free; the withdrawal debits {needed} ({} applied for, fee {} {})",
                    p.venue,
                    p.coin,
                    priced.applied,
                    priced.fee,
                    priced.fee_model.as_str()
                ),
            )));
        }
        Ok(None)
    }

    /// A withdrawal by the venue's id, as observe answers it. `action`: the action node only
    /// waits for the venue to hold it; the observe node waits for it to be sent on chain.
    async fn follow(&self, ctx: &ExecutionContext, id: &str, action: bool) -> Result<ExecutionResult, ExecutorError> {
        let Some(w) = self.venue.withdrawal_by_id(id).await.map_err(|e| self.unavailable(e))? else {
            // The venue gave this id; its history may lag.
            let mut r = self.result(NodeState::Observing);
            r.provider_state = Some("not_in_history_yet".into());
            r.retry_after_seconds = Some(WITHDRAWAL_POLL_SECONDS);
            return Ok(r);
        };
        let phase = withdrawal_phase(w.status);
        let mut r = match phase {
            WithdrawalPhase::Unmapped => return Ok(self.unknown_status("withdrawal", w.status, id)),
            WithdrawalPhase::Ended(code) => self.failed(
                code,
                format!(
                    "the venue ended withdrawal {id} with status {}{}",
                    w.status,
                    w.info.as_deref().map(|i| format!(": {i}")).unwrap_or_default()
                ),
            ),
            WithdrawalPhase::Pending if !action => {
                let mut r = self.result(NodeState::Observing);
                r.retry_after_seconds = Some(WITHDRAWAL_POLL_SECONDS);
                r
            }
            WithdrawalPhase::Completed if !action && w.tx_id.as_deref().is_none_or(str::is_empty) => {
                let mut r = self.result(NodeState::Observing);
                r.provider_state = Some("completed_without_txid".into());
                r.retry_after_seconds = Some(WITHDRAWAL_POLL_SECONDS);
                r
            }
            _ => {
                let mut r = self.result(NodeState::Completed);
                if let Some(tx) = w.tx_id.clone().filter(|t| !t.is_empty()) {
                    r.provider_refs.insert("txid".into(), json!(tx));
                }
                if !action {
                    self.arrival_refs(ctx, &w, &mut r);
                }
                r.generated_artifacts
                    .push(json!({"kind": "cex_withdrawal", "venue": self.config.venue, "withdrawal": w}));
                r
            }
        };
        r.provider_state.get_or_insert_with(|| format!("status_{}", w.status));
        r.provider_refs.insert("exchange_withdrawal_id".into(), json!(id));
        r.provider_refs.insert("withdrawal_status".into(), json!(w.status));
        if !action {
            r.provider_ref_id = Some(id.to_string());
        }
        Ok(r)
    }

    /// What the deposit must bring, for the deposit observe after this node: the arrival
    /// priced at prepare (carried from the action node), and what the venue's own record of the
    /// withdrawal — the amount it booked, the fee it charged — says arrives under the fee model.
    /// When the two differ (the venue's fee changed after prepare) the deposit check fails on the
    /// priced amount and a person sees both: never a silent tolerance.
    fn arrival_refs(&self, ctx: &ExecutionContext, w: &crate::venue::Withdrawal, r: &mut ExecutionResult) {
        let carried_model = ctx.provider_context.get("fee_model").cloned().and_then(|v| serde_json::from_value(v).ok());
        let model = carried_model.unwrap_or_else(|| self.config.fee_model(&w.coin, w.network.as_deref()));
        let charged = w.fee.as_deref().and_then(Amount::parse_any);
        let venue_arrival = Amount::parse_any(&w.amount)
            .zip(charged.clone())
            .and_then(|(amount, fee)| fees::arrival(model, &amount, &fee));
        let priced = carried(ctx, "expected_arrival", "expected_arrival");
        let expected = priced.or_else(|| venue_arrival.as_ref().map(ToString::to_string));
        r.provider_refs.insert("fee_model".into(), json!(model));
        r.provider_refs.insert("withdrawal_amount".into(), json!(w.amount));
        if let Some(fee) = charged {
            r.provider_refs.insert("withdrawal_fee_charged".into(), json!(fee.to_string()));
        }
        if let Some(a) = venue_arrival {
            r.provider_refs.insert("venue_arrival".into(), json!(a.to_string()));
        }
        if let Some(e) = expected {
            r.provider_refs.insert("expected_arrival".into(), json!(e));
        }
    }

    /// Recovery of a withdrawal attempt (runbook C1/C2/C3): by the venue's id if one was
    /// recorded; otherwise only with both submit markers, by client id, then by amount,
    /// address and memo inside the lookback window; absence is conclusive only once the key
    /// can no longer reach the venue.
    async fn recover_withdrawal(&self, ctx: &ExecutionContext, key: &str) -> Result<ExecutionResult, ExecutorError> {
        if let Some(id) = recorded_withdrawal_id(ctx) {
            return self.follow(ctx, &id, true).await;
        }
        let refs = &ctx.provider_refs;
        let pending = refs.get(SUBMIT_ATTEMPT_PENDING).is_some_and(|v| v == &Value::Bool(true));
        let started = refs
            .get(SUBMIT_ATTEMPT_STARTED_AT)
            .and_then(Value::as_str)
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc));
        let (true, Some(started_at)) = (pending, started) else {
            // C3a: without both markers the matcher is never entered.
            tracing::warn!(node_id = %ctx.request_node_id, idempotency_key = key, "legacy UNKNOWN gate: submit markers missing; the matcher is not entered");
            let mut r = self.result(NodeState::Unknown);
            r.provider_refs.insert(LEGACY_RECONCILIATION_GATED.into(), json!(true));
            r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("reconciliation_markers_missing"));
            r.error_code = Some("RECONCILIATION_GATED".into());
            r.error_detail = Some(
                "the submit markers are missing: recovery cannot tell what was sent; a person decides (runbook C3a)"
                    .into(),
            );
            return Ok(r);
        };
        let payload = WithdrawPayload::of(ctx, &self.config)
            .map_err(|e| ExecutorError::Protocol(format!("the node's intent: {e}")))?;
        match self.reconcile(ctx, key, payload, started_at).await {
            Err(e @ VenueError::Auth { .. }) => {
                // C3b: stuck on purpose; the key stays as it is (never voided on an auth failure).
                tracing::error!(node_id = %ctx.request_node_id, idempotency_key = key, error = %e, "RECONCILIATION_AUTH_FAILED");
                let mut r = self.result(NodeState::Unknown);
                r.provider_refs.insert(LEGACY_RECONCILIATION_GATED.into(), json!(true));
                r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("reconciliation_auth_failed"));
                r.error_code = Some("RECONCILIATION_AUTH_FAILED".into());
                r.error_detail = Some(format!(
                    "{e}; fix the credentials (qtgctl venues drill), then a person decides (runbook C3b)"
                ));
                Ok(r)
            }
            Err(e) => Err(self.unavailable(e)),
            Ok(r) => Ok(r),
        }
    }

    async fn reconcile(
        &self,
        ctx: &ExecutionContext,
        key: &str,
        intended: WithdrawPayload,
        started_at: DateTime<Utc>,
    ) -> Result<ExecutionResult, VenueError> {
        // The venue's time before its history: absence is judged by a history read after it.
        let now = self.venue.server_time().await?;
        // What may have reached the venue is what the history is matched against: the request
        // as the key store recorded it when the key was marked sent (its amount may be grossed
        // up by the fee); the intent's payload only if the key never got that far.
        let sent = keys::get(&self.pool, key)
            .await
            .map_err(|e| VenueError::NoAnswer(format!("the cex key store: {e}")))?
            .and_then(|k| k.request)
            .and_then(|v| serde_json::from_value::<WithdrawPayload>(v).ok());
        let p = &sent.unwrap_or(intended);
        let by_id = self.venue.withdrawals_by_client_id(&p.coin, key).await?;
        if let [w] = by_id.as_slice() {
            tracing::info!(idempotency_key = key, withdrawal_id = %w.id, "reconciled by client id");
            let mut r = self.booked(&w.id, key, p);
            r.provider_refs
                .insert(RECONCILIATION.into(), json!({"outcome": "matched", "by": "client_id", "withdrawal_id": w.id}));
            return Ok(r);
        }
        let from = started_at - chrono::Duration::seconds(60);
        let until = started_at + self.config.lookback();
        // On a venue that keeps our client id on every withdrawal, one without it is never ours
        // to claim: a lone lookalike goes to a person like several do.
        let claimable = !self.config.client_ids();
        let mut evidence = json!({
            "window_from": from.to_rfc3339(), "window_to": until.to_rfc3339(), "venue_time": now.to_rfc3339(),
            "client_id": key, "amount": p.amount, "address": p.address, "address_tag": p.address_tag,
            "matching": (if claimable { "amount_address" } else { "client_id_only" }),
        });
        // Without a client id, a withdrawal of the same shape is ours only once ours can no
        // longer arrive: the fence is decided first (and the history read after it, up to now —
        // a request that executed late is in it), never a lookalike claimed while ours is in
        // flight.
        if claimable && by_id.is_empty() {
            match self.fence(ctx, key, now, &mut evidence).await? {
                Fence::NeverSent => {
                    tracing::info!(
                        idempotency_key = key,
                        "the key never left: voided, FAILED (a withdrawal of the same shape is not ours)"
                    );
                    evidence["outcome"] = json!("absent_never_sent");
                    let mut r = self.failed(
                        "CEX_WITHDRAWAL_NOT_SENT",
                        "this key was never sent (a withdrawal of the same shape is someone else's); the key is void",
                    );
                    r.provider_refs.insert(RECONCILIATION.into(), evidence);
                    return Ok(r);
                }
                Fence::Pending(at) => {
                    evidence["outcome"] = json!("fencing");
                    evidence["fence_at"] = json!(at.to_rfc3339());
                    let mut r = self.result(NodeState::Unknown);
                    r.error_code = Some("RECONCILIATION_FENCING".into());
                    r.error_detail = Some(format!(
                        "the request may still reach the venue until {at}; its history is matched only then"
                    ));
                    r.retry_after_seconds = Some(((at - now).num_milliseconds() as f64 / 1000.0).clamp(1.0, 60.0));
                    r.provider_refs.insert(RECONCILIATION.into(), evidence);
                    return Ok(r);
                }
                Fence::Closed(at) => evidence["fence_at"] = json!(at.to_rfc3339()),
            }
        }
        let history = if by_id.is_empty() {
            let to = if claimable { now } else { now.min(until) };
            self.venue.withdrawals(&p.coin, from, to.max(from)).await?
        } else {
            by_id
        };
        let found: Vec<Candidate> = candidates(&history, &p.target(key)).into_iter().map(Candidate::from).collect();
        evidence["history_rows"] = json!(history.len());
        evidence["candidates"] = json!(found);
        // Past the fence nothing more of ours can appear: decided now.
        let lookback_closed = now > until || claimable;
        match found.as_slice() {
            [] if claimable => {
                let store = |e: qtg_store::StoreError| VenueError::NoAnswer(format!("the cex key store: {e}"));
                keys::void_sent(&self.pool, key, "recovery: absent at the venue once the request was fenced")
                    .await
                    .map_err(store)?;
                tracing::info!(idempotency_key = key, venue_time = %now, "no withdrawal once the request was fenced: voided, FAILED");
                evidence["outcome"] = json!("absent_fenced");
                let mut r = self.failed(
                    "CEX_WITHDRAWAL_NOT_FOUND",
                    format!(
                        "the venue has no withdrawal for {key} and the request can no longer reach it; the key is void"
                    ),
                );
                r.provider_refs.insert(RECONCILIATION.into(), evidence);
                Ok(r)
            }
            [one] if claimable => {
                tracing::info!(idempotency_key = key, withdrawal_id = %one.id, "reconciled by amount/address/memo inside the lookback window");
                evidence["outcome"] = json!("matched");
                evidence["by"] = json!("amount_address");
                let mut r = self.booked(&one.id, key, p);
                r.provider_refs.insert(RECONCILIATION.into(), evidence);
                Ok(r)
            }
            [] => self.no_match(ctx, key, evidence, now, lookback_closed).await,
            many => {
                tracing::warn!(
                    idempotency_key = key,
                    candidates = many.len(),
                    lookback_closed,
                    "RECONCILIATION_AMBIGUOUS"
                );
                evidence["outcome"] = json!("ambiguous");
                let mut r = self.result(NodeState::Unknown);
                r.error_code = Some("RECONCILIATION_AMBIGUOUS".into());
                r.error_detail = Some(format!(
                    "{} withdrawal(s) match amount {} to {} inside the lookback window; none carries client id {key}{}{}",
                    many.len(),
                    p.amount,
                    p.address,
                    if claimable {
                        ""
                    } else {
                        " (this venue keeps client ids: a withdrawal without ours is not claimed; it may be someone \
                         else's, or ours with its id lost)"
                    },
                    if lookback_closed { "; the window is closed: a person decides (runbook C2)" } else { "" }
                ));
                if lookback_closed {
                    r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("reconciliation_ambiguous"));
                } else {
                    r.retry_after_seconds = Some(((until - now).num_seconds() as f64).clamp(1.0, 60.0));
                }
                r.provider_refs.insert(RECONCILIATION.into(), evidence);
                Ok(r)
            }
        }
    }

    /// Where the key of an attempt stands against the venue: never sent (voided now, so it
    /// never will be), still able to reach the venue until a time, or past that (the history
    /// read after it shows everything the key can have done). A venue with a deadline: the
    /// key's `submit_by` + the skew margin + the history lag; a venue fenced by nonce: the
    /// nonce fence + the history lag.
    async fn fence(
        &self,
        ctx: &ExecutionContext,
        key: &str,
        now: DateTime<Utc>,
        evidence: &mut Value,
    ) -> Result<Fence, VenueError> {
        let store = |e: qtg_store::StoreError| VenueError::NoAnswer(format!("the cex key store: {e}"));
        let node = ctx.request_node_id.parse::<Uuid>().map_err(|_| VenueError::Protocol("request_node_id".into()))?;
        let reason = "recovery: the key was never sent";
        let Some(sent) = keys::void_unsent(&self.pool, key, &self.config.venue, node, ctx.attempt_no, reason)
            .await
            .map_err(store)?
        else {
            return Ok(Fence::NeverSent);
        };
        let lag = self.config.history_lag();
        let at = match self.venue.fencing() {
            Fencing::RecvWindow => match sent.submit_by {
                Some(by) => by + self.skew + lag,
                None => return Ok(Fence::Pending(now + chrono::Duration::seconds(30))),
            },
            Fencing::Nonce => match self.nonce_fence(key, now, evidence).await? {
                NonceFence::NeverSigned => {
                    keys::void_sent(&self.pool, key, "recovery: fenced before a request was signed with it")
                        .await
                        .map_err(store)?;
                    return Ok(Fence::NeverSent);
                }
                NonceFence::Fenced(fenced_at) => fenced_at + lag,
            },
        };
        Ok(if now > at { Fence::Closed(at) } else { Fence::Pending(at) })
    }

    /// The nonce fence of a sent key (a venue without a deadline on its requests): asked for
    /// in the key store (nothing is signed with the key after that), then — when a request was
    /// signed with nonce N — one call accepted with a nonce above N, after which the venue
    /// refuses that request whenever it arrives; `fenced_at` is the venue's time read after that
    /// call was accepted.
    async fn nonce_fence(&self, key: &str, now: DateTime<Utc>, evidence: &mut Value) -> Result<NonceFence, VenueError> {
        let store = |e: qtg_store::StoreError| VenueError::NoAnswer(format!("the cex key store: {e}"));
        let Some(k) = keys::request_fence(&self.pool, key).await.map_err(store)? else {
            // No longer `sent`: voided meanwhile, nothing more can be signed or sent with it.
            return Ok(NonceFence::Fenced(now));
        };
        let Some(nonce) = k.nonce else {
            return Ok(NonceFence::NeverSigned);
        };
        evidence["nonce"] = json!(nonce);
        if let Some(at) = k.fenced_at {
            evidence["fenced_at"] = json!(at.to_rfc3339());
            return Ok(NonceFence::Fenced(at));
        }
        let above = self.venue.raise_nonce(u64::try_from(nonce).unwrap_or(0)).await?;
        let now = self.venue.server_time().await?;
        keys::note_fenced(&self.pool, key, now).await.map_err(store)?;
        tracing::info!(
            idempotency_key = key,
            nonce,
            fence_nonce = above,
            "nonce fence: a call above the request's nonce was accepted; the request can no longer act"
        );
        evidence["fenced_at"] = json!(now.to_rfc3339());
        evidence["fence_nonce"] = json!(above);
        Ok(NonceFence::Fenced(now))
    }

    /// No withdrawal matches. Conclusive (FAILED, key voided) when the key never left, or
    /// once the venue's time is past its `submit_by` + skew + the history lag; until then —
    /// and past the lookback window without that proof — the runbook's C2 path.
    async fn no_match(
        &self,
        ctx: &ExecutionContext,
        key: &str,
        mut evidence: Value,
        now: DateTime<Utc>,
        lookback_closed: bool,
    ) -> Result<ExecutionResult, VenueError> {
        let store = |e: qtg_store::StoreError| VenueError::NoAnswer(format!("the cex key store: {e}"));
        let node = ctx.request_node_id.parse::<Uuid>().map_err(|_| VenueError::Protocol("request_node_id".into()))?;
        let reason = "recovery: no withdrawal at the venue and the key was never sent";
        let sent = keys::void_unsent(&self.pool, key, &self.config.venue, node, ctx.attempt_no, reason)
            .await
            .map_err(store)?;
        let Some(sent) = sent else {
            tracing::info!(idempotency_key = key, "no withdrawal and the key never left: voided, FAILED");
            evidence["outcome"] = json!("absent_never_sent");
            let mut r = self.failed(
                "CEX_WITHDRAWAL_NOT_SENT",
                "the venue has no such withdrawal and this key was never sent; the key is void",
            );
            r.provider_refs.insert(RECONCILIATION.into(), evidence);
            return Ok(r);
        };
        let fence_at = match self.venue.fencing() {
            Fencing::RecvWindow => sent.submit_by.map(|by| by + self.skew + self.config.history_lag()),
            Fencing::Nonce => match self.nonce_fence(key, now, &mut evidence).await? {
                NonceFence::NeverSigned => {
                    keys::void_sent(&self.pool, key, "recovery: fenced before the request was signed")
                        .await
                        .map_err(store)?;
                    tracing::info!(
                        idempotency_key = key,
                        "the key was fenced before its request was signed: voided, FAILED"
                    );
                    evidence["outcome"] = json!("absent_never_sent");
                    let mut r = self.failed(
                        "CEX_WITHDRAWAL_NOT_SENT",
                        "the venue has no such withdrawal and no request was signed with this key; the key is void",
                    );
                    r.provider_refs.insert(RECONCILIATION.into(), evidence);
                    return Ok(r);
                }
                NonceFence::Fenced(at) => Some(at + self.config.history_lag()),
            },
        };
        evidence["fence_at"] = json!(fence_at.map(|t| t.to_rfc3339()));
        if fence_at.is_some_and(|at| now > at)
            && keys::void_sent(&self.pool, key, "recovery: absent at the venue after its deadline")
                .await
                .map_err(store)?
        {
            tracing::info!(idempotency_key = key, venue_time = %now, "no withdrawal and the key's deadline has passed at the venue: voided, FAILED");
            evidence["outcome"] = json!("absent_fenced");
            let mut r = self.failed(
                    "CEX_WITHDRAWAL_NOT_FOUND",
                    format!("the venue has no withdrawal for {key} and its time {now} is past the request's deadline; the key is void"),
                );
            r.provider_refs.insert(RECONCILIATION.into(), evidence);
            return Ok(r);
        }
        evidence["outcome"] = json!("no_match");
        let mut r = self.result(NodeState::Unknown);
        r.error_code = Some("RECONCILIATION_NO_MATCH".into());
        if lookback_closed {
            r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("reconciliation_no_match"));
            r.error_detail =
                Some("no withdrawal matches and the lookback window is closed; a person decides (runbook C2)".into());
        } else {
            let wait = fence_at.map(|at| (at - now).num_milliseconds() as f64 / 1000.0).unwrap_or(30.0);
            r.retry_after_seconds = Some(wait.clamp(1.0, 60.0));
            r.error_detail =
                Some("0 matches: the request may still reach the venue until its deadline; recovery asks again".into());
        }
        r.provider_refs.insert(RECONCILIATION.into(), evidence);
        Ok(r)
    }

    /// The deposit on this (destination) account that the withdrawal's txid, amount and
    /// address name.
    async fn find_deposit(&self, ctx: &ExecutionContext) -> Result<ExecutionResult, ExecutorError> {
        let Some(txid) = carried(ctx, "txid", "txid") else {
            return Ok(self.failed("CEX_TXID_MISSING", "no txid in the node's config or its predecessors' refs"));
        };
        let coin = match carried(ctx, "asset", "asset")
            .or_else(|| ctx.intent.get("asset").and_then(Value::as_str).map(str::to_string))
        {
            Some(c) => c,
            None => return Ok(self.failed("CEX_INTENT_INVALID", "the intent has no asset")),
        };
        // What must arrive: the node's own `amount`, else what the withdrawal before it priced
        // (amount − fee where the venue deducts it), else the intent's amount.
        let amount = carried(ctx, "amount", "expected_arrival")
            .or_else(|| carried(ctx, "amount", "amount"))
            .or_else(|| ctx.intent.get("amount").and_then(Value::as_str).map(str::to_string));
        let address = carried(ctx, "address", "address")
            .or_else(|| ctx.intent.get("destination").and_then(Value::as_str).map(str::to_string));
        let now = self.venue.server_time().await.map_err(|e| self.unavailable(e))?;
        let deposits = self
            .venue
            .deposits(&coin, now - self.config.deposit_lookback(), now)
            .await
            .map_err(|e| self.unavailable(e))?;
        let Some(d) = deposits.iter().find(|d| d.tx_id.as_deref().is_some_and(|t| t.eq_ignore_ascii_case(&txid)))
        else {
            let mut r = self.result(NodeState::Observing);
            r.provider_state = Some("not_arrived".into());
            r.retry_after_seconds = Some(DEPOSIT_POLL_SECONDS);
            return Ok(r);
        };
        let mismatch = match (&amount, &address) {
            (Some(a), _) if Amount::parse_any(a) != Amount::parse_any(&d.amount) => {
                let fees =
                    match (ctx.provider_context.get("withdrawal_fee_charged"), ctx.provider_context.get("fee_model")) {
                        (Some(fee), Some(model)) => format!(
                            " (the sending venue charged a fee of {} under fee model {}; its record says {} arrives)",
                            fee.as_str().unwrap_or("?"),
                            model.as_str().unwrap_or("?"),
                            ctx.provider_context.get("venue_arrival").and_then(Value::as_str).unwrap_or("?")
                        ),
                        _ => String::new(),
                    };
                Some(format!("amount {} ≠ expected {a}{fees}", d.amount))
            }
            (_, Some(addr)) if !addr.eq_ignore_ascii_case(&d.address) => {
                Some(format!("address {} ≠ expected {addr}", d.address))
            }
            _ => None,
        };
        if let Some(why) = mismatch {
            // What the sending venue's own record says arrives did arrive: the money moved, at
            // another fee than was priced. Not a failure (a retry would pay again): a person
            // decides.
            let venue_arrival = ctx.provider_context.get("venue_arrival").and_then(Value::as_str);
            let same_address = address.as_deref().is_none_or(|a| a.eq_ignore_ascii_case(&d.address));
            if same_address && venue_arrival.and_then(Amount::parse_any) == Amount::parse_any(&d.amount) {
                let mut r = self.result(NodeState::Unknown);
                r.error_code = Some("CEX_DEPOSIT_FEE_CHANGED".into());
                r.error_detail = Some(format!(
                    "deposit {} with txid {txid}: {why} — the amount the venue's record of the withdrawal says arrives; \
                     the money moved, at another fee than was priced: a person decides",
                    d.id
                ));
                r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("deposit_fee_changed"));
                r.provider_refs.insert("deposit_id".into(), json!(d.id));
                r.provider_refs.insert("deposit_amount".into(), json!(d.amount));
                return Ok(r);
            }
            return Ok(self.failed("CEX_DEPOSIT_MISMATCH", format!("deposit {} with txid {txid}: {why}", d.id)));
        }
        let mut r = match deposit_phase(d.status) {
            DepositPhase::Unmapped => return Ok(self.unknown_status("deposit", d.status, &d.id)),
            DepositPhase::Ended(code) => {
                self.failed(code, format!("the venue reports deposit {} with status {}", d.id, d.status))
            }
            DepositPhase::Pending => {
                let mut r = self.result(NodeState::Observing);
                r.retry_after_seconds = Some(DEPOSIT_POLL_SECONDS);
                r
            }
            DepositPhase::Credited => {
                let mut r = self.result(NodeState::Completed);
                r.generated_artifacts.push(json!({"kind": "cex_deposit", "venue": self.config.venue, "deposit": d}));
                r
            }
        };
        r.provider_ref_id = Some(d.id.clone());
        r.provider_state = Some(format!("status_{}", d.status));
        r.provider_refs.insert("deposit_id".into(), json!(d.id));
        r.provider_refs.insert("deposit_amount".into(), json!(d.amount));
        r.provider_refs.insert("deposit_status".into(), json!(d.status));
        Ok(r)
    }

    /// What an observe node follows, named in the prepared payload.
    fn observe_payload(&self, ctx: &ExecutionContext) -> Result<Map<String, Value>, String> {
        let mut p = Map::new();
        p.insert("venue".into(), json!(self.config.venue));
        match self.role {
            Role::WithdrawalObserve => {
                let id = carried(ctx, "withdrawal_id", "exchange_withdrawal_id")
                    .ok_or("no withdrawal id: give config.withdrawal_id or follow a withdrawal_action node")?;
                p.insert("withdrawal_id".into(), json!(id));
            }
            _ => {
                let txid = carried(ctx, "txid", "txid")
                    .ok_or("no txid: give config.txid or follow a withdrawal_observe node")?;
                p.insert("txid".into(), json!(txid));
            }
        }
        Ok(p)
    }
}

#[async_trait]
impl Executor for CexExecutor {
    /// At creation: the destination paid, which side of the fee the amount is on, and for an
    /// amount that must arrive at a venue that deducts its fee, the template's fee cap.
    fn check_intent(&self, node_config: &Value, risk_controls: &Value, intent: &Value) -> Result<(), String> {
        if self.role != Role::WithdrawalAction {
            return Ok(());
        }
        destination_of(node_config, intent)?;
        let amount_is = AmountIs::of_intent(intent)?;
        let field = |name: &str| node_config.get(name).or_else(|| intent.get(name)).and_then(Value::as_str);
        let asset = field("asset").unwrap_or_default();
        let cap = fees::fee_cap(risk_controls, asset)?;
        let network = field("network").or(self.config.network.as_deref());
        if amount_is == AmountIs::Received
            && cap.is_none()
            && self.config.fee_model(asset, network) == FeeModel::Deducted
        {
            return Err(format!(
                "intent.amount_is \"received\": {} deducts its fee from the amount, so qtg grosses the amount up by \
                 the fee — the template must cap that fee (risk_controls.max_fee)",
                self.config.venue
            ));
        }
        Ok(())
    }

    /// The venue account a withdrawal debits (observations move nothing).
    fn paying_account(&self, _node_config: &Value) -> Option<String> {
        (self.role == Role::WithdrawalAction).then(|| self.config.venue.clone())
    }

    async fn preflight(&self, ctx: &ExecutionContext) -> Result<Option<ExecutionResult>, ExecutorError> {
        match self.role {
            Role::WithdrawalAction => self.preflight_withdrawal(ctx).await,
            _ => Ok(self.observe_payload(ctx).err().map(|why| self.failed("CEX_REFERENCE_MISSING", why))),
        }
    }

    async fn prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError> {
        let payload = match self.role {
            // Priced here, at the fee the venue states now: what is approved and sent.
            Role::WithdrawalAction => match self.quote(ctx).await {
                Ok(Ok((p, _))) => serde_json::to_value(p).unwrap_or(Value::Null),
                Ok(Err((code, why))) => return Ok(Prepared::Refused(self.failed(code, why))),
                Err(e @ VenueError::Auth { .. }) => {
                    return Ok(Prepared::Refused(self.failed("CEX_AUTH_FAILED", e.to_string())))
                }
                Err(e) => return Err(self.unavailable(e)),
            },
            _ => match self.observe_payload(ctx) {
                Ok(p) => Value::Object(p),
                Err(why) => return Ok(Prepared::Refused(self.failed("CEX_REFERENCE_MISSING", why))),
            },
        };
        Ok(Prepared::Action(PreparedAction::new(&ctx.action_type, "json", canonical_json(&payload), false)))
    }

    async fn submit(&self, ctx: &ExecutionContext, s: &Submission<'_>) -> Result<ExecutionResult, ExecutorError> {
        match self.role {
            Role::WithdrawalAction => self.submit_withdrawal(ctx, s).await,
            // An observe node moves nothing: its submit starts the watch.
            _ => {
                let p: Map<String, Value> = serde_json::from_str(&s.prepared.payload)
                    .map_err(|e| ExecutorError::Protocol(format!("the prepared payload does not parse: {e}")))?;
                let mut r = self.result(NodeState::Submitted);
                r.retry_after_seconds = Some(1.0);
                if let Some(id) = p.get("withdrawal_id").and_then(Value::as_str) {
                    r.provider_ref_id = Some(id.to_string());
                    r.provider_refs.insert("exchange_withdrawal_id".into(), json!(id));
                }
                Ok(r)
            }
        }
    }

    async fn observe(&self, ctx: &ExecutionContext) -> Result<ExecutionResult, ExecutorError> {
        let mut r = self.observe_once(ctx).await?;
        // A status that maps again clears the C5 mark.
        if !r.provider_refs.contains_key(STATUS_UNMAPPED)
            && ctx.provider_refs.get(STATUS_UNMAPPED).is_some_and(|v| !v.is_null())
        {
            r.provider_refs.insert(STATUS_UNMAPPED.into(), Value::Null);
        }
        Ok(r)
    }

    async fn recover(&self, ctx: &ExecutionContext, idempotency_key: &str) -> Result<ExecutionResult, ExecutorError> {
        match self.role {
            Role::WithdrawalAction => self.recover_withdrawal(ctx, idempotency_key).await,
            // Observing moves nothing: recovering is looking again.
            _ => self.observe(ctx).await,
        }
    }

    /// The venue's clock and a signed read: broken credentials show as DOWN (and the approval
    /// gate refuses new approvals) before a withdrawal needs them.
    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        let t = self.venue.server_time().await.map_err(|e| self.unavailable(e))?;
        let offset_ms = (t - Utc::now()).num_milliseconds();
        self.venue.balances().await.map_err(|e| self.unavailable(e))?;
        Ok(Some(json!({
            "status": "ok", "venue": self.config.venue, "venue_time": t.to_rfc3339(), "clock_offset_ms": offset_ms,
            "credentials": "accepted",
        })))
    }
}

impl CexExecutor {
    async fn observe_once(&self, ctx: &ExecutionContext) -> Result<ExecutionResult, ExecutorError> {
        match self.role {
            Role::WithdrawalAction | Role::WithdrawalObserve => {
                let action = self.role == Role::WithdrawalAction;
                let id = if action {
                    recorded_withdrawal_id(ctx)
                } else {
                    recorded_withdrawal_id(ctx).or_else(|| carried(ctx, "withdrawal_id", "exchange_withdrawal_id"))
                };
                match id {
                    Some(id) => self.follow(ctx, &id, action).await,
                    None => Ok(ExecutionResult {
                        error_code: Some("CEX_WITHDRAWAL_ID_MISSING".into()),
                        error_detail: Some("the node recorded no venue withdrawal id".into()),
                        ..self.result(NodeState::Unknown)
                    }),
                }
            }
            Role::DepositObserve => self.find_deposit(ctx).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::venue::{Balance, Deposit, NetworkInfo, WhitelistEntry, Withdrawal};

    /// A venue answering from memory; `auth_down` refuses every history read.
    #[derive(Default)]
    struct Fake {
        now: Option<DateTime<Utc>>,
        withdrawals: Mutex<Vec<Withdrawal>>,
        auth_down: bool,
        free: String,
    }

    fn denied() -> VenueError {
        VenueError::Auth { status: 401, code: -2015, msg: "Invalid API-key".into() }
    }

    #[async_trait]
    impl Venue for Fake {
        fn name(&self) -> &str {
            "fake"
        }
        async fn server_time(&self) -> Result<DateTime<Utc>, VenueError> {
            Ok(self.now.unwrap_or_else(Utc::now))
        }
        async fn submit_withdrawal(&self, _: &WithdrawRequest, _: Stamp) -> Result<String, VenueError> {
            Err(VenueError::Protocol("the tests never send".into()))
        }
        async fn withdrawals_by_client_id(&self, _: &str, client_id: &str) -> Result<Vec<Withdrawal>, VenueError> {
            if self.auth_down {
                return Err(denied());
            }
            let all = self.withdrawals.lock().unwrap();
            Ok(all.iter().filter(|w| w.client_id.as_deref() == Some(client_id)).cloned().collect())
        }
        async fn withdrawal_by_id(&self, id: &str) -> Result<Option<Withdrawal>, VenueError> {
            Ok(self.withdrawals.lock().unwrap().iter().find(|w| w.id == id).cloned())
        }
        async fn withdrawals(
            &self,
            _: &str,
            _: DateTime<Utc>,
            _: DateTime<Utc>,
        ) -> Result<Vec<Withdrawal>, VenueError> {
            Ok(self.withdrawals.lock().unwrap().clone())
        }
        async fn deposits(&self, _: &str, _: DateTime<Utc>, _: DateTime<Utc>) -> Result<Vec<Deposit>, VenueError> {
            Ok(Vec::new())
        }
        async fn all_withdrawals(&self, _: DateTime<Utc>, _: DateTime<Utc>) -> Result<Vec<Withdrawal>, VenueError> {
            Ok(self.withdrawals.lock().unwrap().clone())
        }
        async fn all_deposits(&self, _: DateTime<Utc>, _: DateTime<Utc>) -> Result<Vec<Deposit>, VenueError> {
            Ok(Vec::new())
        }
        async fn networks(&self, coin: &str) -> Result<Vec<NetworkInfo>, VenueError> {
            Ok(vec![NetworkInfo {
                coin: coin.into(),
                network: "ETH".into(),
                withdraw_enable: true,
                deposit_enable: true,
                withdraw_min: Some("10".into()),
                withdraw_max: Some("1000".into()),
                withdraw_fee: Some("1".into()),
                address_regex: None,
                memo_regex: None,
            }])
        }
        async fn whitelist(&self) -> Result<Vec<WhitelistEntry>, VenueError> {
            Ok(vec![WhitelistEntry {
                coin: Some("USDT".into()),
                network: Some("ETH".into()),
                address: "0xabc".into(),
                address_tag: None,
                key: None,
            }])
        }
        async fn balances(&self) -> Result<Vec<Balance>, VenueError> {
            Ok(vec![Balance { asset: "USDT".into(), free: self.free.clone(), locked: "0".into() }])
        }
    }

    fn row(id: &str, client: Option<&str>, status: i64) -> Withdrawal {
        Withdrawal {
            id: id.into(),
            client_id: client.map(str::to_string),
            coin: "USDT".into(),
            network: Some("ETH".into()),
            address: "0xABC".into(),
            address_tag: None,
            amount: "100.00000000".into(),
            fee: Some("1".into()),
            status,
            tx_id: None,
            apply_time: None,
            info: None,
            key: None,
        }
    }

    fn executor(venue: Fake, lookback: &str) -> CexExecutor {
        let table: toml::Table =
            format!("venue = \"fake\"\nbase_url = \"http://127.0.0.1:1\"\nnetwork = \"ETH\"\n{lookback}")
                .parse()
                .unwrap();
        let config = EntryConfig::parse("exec.cex.withdrawal_action.fake", Some(&table)).unwrap();
        // Recovery reads the key store (a key never recorded: the intent's payload is matched).
        let url = std::env::var("QTG_TEST_DATABASE_URL")
            .or_else(|_| std::env::var("DATABASE_URL"))
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect_lazy(&url).unwrap();
        CexExecutor::new(
            "exec.cex.withdrawal_action.fake",
            Role::WithdrawalAction,
            config,
            Arc::new(venue),
            pool,
            chrono::Duration::seconds(5),
        )
    }

    /// [`executor`] on a migrated database: recovery reads the key store.
    async fn ready(venue: Fake, lookback: &str) -> CexExecutor {
        let e = executor(venue, lookback);
        qtg_store::migrate(&e.pool).await.expect("the test database (DATABASE_URL) migrates");
        e
    }

    fn ctx(refs: Value) -> ExecutionContext {
        ExecutionContext {
            protocol_version: "1.0".into(),
            request_id: Uuid::new_v4().to_string(),
            request_node_id: Uuid::new_v4().to_string(),
            compiled_plan_hash: String::new(),
            template_key: "t".into(),
            template_version: 1,
            node_key: "withdraw".into(),
            node_kind: "action".into(),
            action_type: "cex_withdrawal".into(),
            attempt_no: 1,
            intent: json!({"asset": "USDT", "amount": "100", "destination": "0xabc"}),
            input_params: json!({}),
            resolved_bindings: json!({}),
            risk_controls: json!({}),
            prior_artifacts: Vec::new(),
            node_config: json!({}),
            provider_context: json!({}),
            timeout_policy: json!({}),
            provider_refs: refs,
            provider_ref_id: None,
            executor_key: "exec.cex.withdrawal_action.fake".into(),
        }
    }

    fn markers(started: DateTime<Utc>) -> Value {
        json!({SUBMIT_ATTEMPT_PENDING: true, SUBMIT_ATTEMPT_STARTED_AT: started.to_rfc3339()})
    }

    /// The venue's documented formats (Binance's `addressRegex` / `memoRegex`) are checked
    /// before anything is sent; a format that does not compile refuses too.
    #[test]
    fn destinations_are_checked_against_the_venues_formats() {
        let net = |address: &str, memo: &str| crate::venue::NetworkInfo {
            coin: "XRP".into(),
            network: "XRP".into(),
            withdraw_enable: true,
            deposit_enable: true,
            withdraw_min: None,
            withdraw_max: None,
            withdraw_fee: None,
            address_regex: Some(address.into()),
            memo_regex: Some(memo.into()),
        };
        let pay = |address: &str, tag: Option<&str>| WithdrawPayload {
            venue: "sim_a".into(),
            coin: "XRP".into(),
            network: Some("XRP".into()),
            address: address.into(),
            address_tag: tag.map(String::from),
            amount: "10".into(),
            priced: None,
            key: None,
        };
        let xrp = net("^r[1-9A-HJ-NP-Za-km-z]{25,34}$", "^\\d{1,10}$");
        assert_eq!(format_refusal(&xrp, &pay("rEb8TK3gBgk5auZkwc6sHnwrGVJH8DuaLh", Some("12345"))), None);
        let bad = format_refusal(&xrp, &pay("0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc", None)).unwrap();
        assert_eq!(bad.0, "CEX_ADDRESS_INVALID", "{bad:?}");
        let memo = format_refusal(&xrp, &pay("rEb8TK3gBgk5auZkwc6sHnwrGVJH8DuaLh", Some("memo!"))).unwrap();
        assert!(memo.1.contains("memo"), "{memo:?}");
        assert!(format_refusal(&net("^(0x", ""), &pay("0xabc", None)).unwrap().1.contains("does not compile"));
        assert_eq!(format_refusal(&net("", ""), &pay("anything", Some("x"))), None, "no format documented");
    }

    #[tokio::test]
    async fn without_both_markers_the_matcher_is_never_entered() {
        let venue = Fake::default();
        venue.withdrawals.lock().unwrap().push(row("w1", None, 4));
        let e = executor(venue, "");
        let r = e.recover(&ctx(json!({SUBMIT_ATTEMPT_PENDING: true})), "n:1").await.unwrap();
        assert_eq!(r.next_state, NodeState::Unknown);
        assert_eq!(r.provider_refs[LEGACY_RECONCILIATION_GATED], true);
        assert_eq!(r.provider_refs[MANUAL_REVIEW_REQUIRED], "reconciliation_markers_missing");
        assert_eq!(r.error_code.as_deref(), Some("RECONCILIATION_GATED"));
    }

    #[tokio::test]
    async fn the_client_id_decides_first_and_an_auth_failure_gates() {
        let venue = Fake::default();
        venue.withdrawals.lock().unwrap().extend([row("w1", None, 4), row("w2", Some("n:1"), 4)]);
        let e = ready(venue, "").await;
        let r = e.recover(&ctx(markers(Utc::now())), "n:1").await.unwrap();
        assert_eq!((r.next_state, r.provider_ref_id.as_deref()), (NodeState::Submitted, Some("w2")));
        let e = ready(Fake { auth_down: true, ..Fake::default() }, "").await;
        let r = e.recover(&ctx(markers(Utc::now())), "n:1").await.unwrap();
        assert_eq!(r.next_state, NodeState::Unknown);
        assert_eq!(r.provider_refs[MANUAL_REVIEW_REQUIRED], "reconciliation_auth_failed");
        assert_eq!(r.provider_refs[LEGACY_RECONCILIATION_GATED], true);
    }

    #[tokio::test]
    async fn two_candidates_wait_while_the_lookback_is_open_then_call_a_person() {
        let started = Utc::now() - chrono::Duration::seconds(30);
        let two = || {
            let venue = Fake::default();
            venue.withdrawals.lock().unwrap().extend([
                row("w1", None, 4),
                row("w2", None, 4),
                row("w3", Some("other:1"), 4),
            ]);
            venue
        };
        let open = ready(two(), "lookback_seconds = 600").await;
        let r = open.recover(&ctx(markers(started)), "n:1").await.unwrap();
        assert_eq!((r.next_state, r.error_code.as_deref()), (NodeState::Unknown, Some("RECONCILIATION_AMBIGUOUS")));
        assert!(r.provider_refs.get(MANUAL_REVIEW_REQUIRED).is_none());
        assert_eq!(
            r.provider_refs[RECONCILIATION]["candidates"].as_array().map(Vec::len),
            Some(2),
            "w3 is another client's"
        );
        let closed = ready(two(), "lookback_seconds = 10").await;
        let r = closed.recover(&ctx(markers(started)), "n:1").await.unwrap();
        assert_eq!(r.provider_refs[MANUAL_REVIEW_REQUIRED], "reconciliation_ambiguous");
        // One candidate on a venue without client ids: matched by amount, address and memo —
        // but only once ours can no longer arrive. A key that never left: the candidate is not
        // ours, the attempt FAILED (and voided).
        let one = || {
            let venue = Fake::default();
            venue.withdrawals.lock().unwrap().push(row("w9", None, 6));
            venue
        };
        let e = ready(one(), "client_ids = false").await;
        let fresh = format!("{}:1", Uuid::new_v4());
        let c = ctx(markers(started));
        let r = e.recover(&c, &fresh).await.unwrap();
        assert_eq!((r.next_state, r.error_code.as_deref()), (NodeState::Failed, Some("CEX_WITHDRAWAL_NOT_SENT")));
        // A key sent whose deadline is past the fence: the lone candidate is claimed.
        let sent = format!("{}:1", Uuid::new_v4());
        sqlx::query(
            "INSERT INTO cex_submit_keys (idempotency_key, venue, request_node_id, attempt_no, submit_by, status)
             VALUES ($1, 'fake', $2::uuid, 1, now() - interval '1 hour', 'sent')",
        )
        .bind(&sent)
        .bind(&c.request_node_id)
        .execute(&e.pool)
        .await
        .unwrap();
        let r = e.recover(&c, &sent).await.unwrap();
        assert_eq!((r.next_state, r.provider_ref_id.as_deref()), (NodeState::Submitted, Some("w9")));
        assert_eq!(r.provider_refs[RECONCILIATION]["by"], "amount_address");
        // Sent and still able to arrive: not matched yet, asked again once it cannot.
        let pending = format!("{}:1", Uuid::new_v4());
        sqlx::query(
            "INSERT INTO cex_submit_keys (idempotency_key, venue, request_node_id, attempt_no, submit_by, status)
             VALUES ($1, 'fake', $2::uuid, 1, now() + interval '1 minute', 'sent')",
        )
        .bind(&pending)
        .bind(&c.request_node_id)
        .execute(&e.pool)
        .await
        .unwrap();
        let r = e.recover(&c, &pending).await.unwrap();
        assert_eq!((r.next_state, r.error_code.as_deref()), (NodeState::Unknown, Some("RECONCILIATION_FENCING")));
        assert!(r.retry_after_seconds.is_some());
        // On a venue that keeps client ids (the default), a lone lookalike without ours is never
        // claimed: evidence for a person, not a completion (nor a FAILED that would invite a
        // retry while money may have moved).
        let r = ready(one(), "lookback_seconds = 10").await.recover(&ctx(markers(started)), "n:1").await.unwrap();
        assert_eq!((r.next_state, r.provider_ref_id.as_deref()), (NodeState::Unknown, None));
        assert_eq!(r.provider_refs[MANUAL_REVIEW_REQUIRED], "reconciliation_ambiguous");
        assert_eq!(r.provider_refs[RECONCILIATION]["matching"], "client_id_only");
    }

    #[tokio::test]
    async fn an_unmapped_status_is_observed_and_cleared_once_it_maps() {
        let venue = Fake::default();
        venue.withdrawals.lock().unwrap().push(row("w1", None, 42));
        let e = executor(venue, "");
        let mut c = ctx(json!({}));
        c.provider_ref_id = Some("w1".into());
        let r = e.observe(&c).await.unwrap();
        assert_eq!(r.next_state, NodeState::Observing);
        assert_eq!(r.provider_refs[STATUS_UNMAPPED]["code"], 42);
        c.provider_refs = json!({STATUS_UNMAPPED: {"kind": "withdrawal", "code": 42}});
        let mapped = Fake::default();
        mapped.withdrawals.lock().unwrap().push(row("w1", None, 4));
        let e = executor(mapped, "");
        let r = e.observe(&c).await.unwrap();
        assert_eq!(r.next_state, NodeState::Completed, "the action node completes once the venue holds it");
        assert_eq!(r.provider_refs[STATUS_UNMAPPED], Value::Null);
    }

    #[tokio::test]
    async fn preflight_counts_what_the_fee_model_debits_against_the_balance() {
        let with = |free: &str, config: &str| executor(Fake { free: free.into(), ..Fake::default() }, config);
        let code = |r: Option<ExecutionResult>| r.and_then(|r| r.error_code);
        // Deducted (the default): 100 applied for debits 100; 99 arrive.
        assert_eq!(
            code(with("99.99", "").preflight(&ctx(json!({}))).await.unwrap()).as_deref(),
            Some("CEX_INSUFFICIENT_BALANCE")
        );
        assert_eq!(code(with("100", "").preflight(&ctx(json!({}))).await.unwrap()), None);
        // Added: 100 applied for debits 101.
        let added = "fee_model = \"added\"";
        assert_eq!(
            code(with("100.5", added).preflight(&ctx(json!({}))).await.unwrap()).as_deref(),
            Some("CEX_INSUFFICIENT_BALANCE")
        );
        assert_eq!(code(with("101", added).preflight(&ctx(json!({}))).await.unwrap()), None);
        // "Arrive exactly 100" where the fee is deducted: 101 applied for, within the cap only.
        let mut received = ctx(json!({}));
        received.intent["amount_is"] = json!("received");
        let e = with("100.5", "");
        assert_eq!(code(e.preflight(&received).await.unwrap()).as_deref(), Some("CEX_FEE_CAP_REQUIRED"));
        received.risk_controls = json!({"max_fee": "0.5"});
        assert_eq!(code(e.preflight(&received).await.unwrap()).as_deref(), Some("CEX_FEE_OVER_CAP"));
        received.risk_controls = json!({"max_fee": {"USDT": "1"}});
        assert_eq!(code(e.preflight(&received).await.unwrap()).as_deref(), Some("CEX_INSUFFICIENT_BALANCE"));
        let Prepared::Action(a) = with("101", "").prepare(&received).await.unwrap() else { panic!("refused") };
        let p: WithdrawPayload = serde_json::from_str(&a.payload).unwrap();
        let priced = p.priced.clone().unwrap();
        assert_eq!((p.amount.as_str(), priced.debit.as_str(), priced.arrival.as_str()), ("101", "101", "100"));
        assert!(with("101", "").check_intent(&json!({}), &json!({}), &received.intent).is_err(), "no cap at creation");
        assert!(
            with("101", added).check_intent(&json!({}), &json!({}), &received.intent).is_ok(),
            "nothing to gross up"
        );
        let mut far = ctx(json!({}));
        far.intent["destination"] = json!("0xdef");
        let r = with("101", "").preflight(&far).await.unwrap().expect("refused");
        assert_eq!(r.error_code.as_deref(), Some("CEX_ADDRESS_NOT_WHITELISTED"));
    }
}
