//! The lane's three executors, the seed's relay: `withdrawal_action` sends the withdrawal
//! and answers the venue's withdrawal id; `withdrawal_observe` follows it to completion and
//! answers the `txid`; `deposit_observe` finds the deposit on the destination account by
//! txid, amount and address. This module holds the executor, its shared helpers and the
//! `Executor` impl that dispatches by role; `withdrawal` the payload, its pricing, preflight and
//! the fenced withdraw request; `recovery` the runbook's reconciliation; `observe` the two
//! watches.

mod observe;
mod recovery;
mod withdrawal;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use qtg_core::hash::canonical_json;
use qtg_core::markers::{
    LEGACY_RECONCILIATION_GATED, MANUAL_REVIEW_REQUIRED, RECONCILIATION, STATUS_UNMAPPED, SUBMIT_ATTEMPT_PENDING,
    SUBMIT_ATTEMPT_STARTED_AT,
};
use qtg_core::risk::Amount;
use qtg_core::{
    AfterObserve, AfterSubmit, ExecutionContext, ExecutionResult, NextState, ObserveOutcome, PreparedAction, Refusal,
    SubmitOutcome,
};
use qtg_executor::{Executor, ExecutorError, IntentRefusal, Prepared, Submission};
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

use withdrawal::destination_of;
pub use withdrawal::WithdrawPayload;

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

    fn result<S: NextState>(&self, state: S) -> ExecutionResult<S> {
        let mut r = ExecutionResult::new(state);
        r.provider_refs.insert("venue".into(), json!(self.config.venue));
        r
    }

    fn failed<S: NextState>(&self, code: &str, detail: impl Into<String>) -> ExecutionResult<S> {
        ExecutionResult { error_code: Some(code.into()), error_detail: Some(detail.into()), ..self.result(S::FAILED) }
    }

    fn unknown_status(&self, kind: &'static str, code: i64, id: &str) -> ObserveOutcome {
        // Runbook C5: never guess a status; a person adds it to the mapping.
        tracing::warn!(
            venue = %self.config.venue, executor_key = %self.key, kind, code, id,
            "unknown_code: the venue reported a status the mapping does not know; still observing"
        );
        qtg_telemetry::sink().venue_unknown_status(&self.config.venue, kind, code);
        let mut r = self.result(AfterObserve::Observing);
        r.provider_refs.insert(STATUS_UNMAPPED.into(), json!({"kind": kind, "code": code}));
        r.provider_state = Some(format!("unmapped_status_{code}"));
        r.retry_after_seconds = Some(WITHDRAWAL_POLL_SECONDS * 6.0);
        r.error_code = Some(qtg_core::codes::CEX_STATUS_UNMAPPED.into());
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

#[async_trait]
impl Executor for CexExecutor {
    /// At creation: the destination paid, which side of the fee the amount is on, and for an
    /// amount that must arrive at a venue that deducts its fee, the template's fee cap.
    fn check_intent(&self, node_config: &Value, risk_controls: &Value, intent: &Value) -> Result<(), IntentRefusal> {
        if self.role != Role::WithdrawalAction {
            return Ok(());
        }
        destination_of(node_config, intent).map_err(IntentRefusal::Intent)?;
        let amount_is = AmountIs::of_intent(intent).map_err(IntentRefusal::Intent)?;
        let field = |name: &str| node_config.get(name).or_else(|| intent.get(name)).and_then(Value::as_str);
        let asset = field("asset").unwrap_or_default();
        let cap = fees::fee_cap(risk_controls, asset).map_err(IntentRefusal::Template)?;
        let network = field("network").or(self.config.network.as_deref());
        if amount_is == AmountIs::Received
            && cap.is_none()
            && self.config.fee_model(asset, network) == FeeModel::Deducted
        {
            return Err(IntentRefusal::Template(format!(
                "intent.amount_is \"received\": {} deducts its fee from the amount, so qtg grosses the amount up by \
                 the fee — the template must cap that fee (risk_controls.max_fee)",
                self.config.venue
            )));
        }
        Ok(())
    }

    /// The venue account a withdrawal debits (observations move nothing).
    fn paying_account(&self, _node_config: &Value) -> Option<String> {
        (self.role == Role::WithdrawalAction).then(|| self.config.venue.clone())
    }

    async fn preflight(&self, ctx: &ExecutionContext) -> Result<Option<Refusal>, ExecutorError> {
        match self.role {
            Role::WithdrawalAction => self.preflight_withdrawal(ctx).await,
            _ => {
                Ok(self.observe_payload(ctx).err().map(|why| self.failed(qtg_core::codes::CEX_REFERENCE_MISSING, why)))
            }
        }
    }

    async fn prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError> {
        let payload = match self.role {
            // Priced here, at the fee the venue states now: what is approved and sent.
            Role::WithdrawalAction => match self.quote(ctx).await {
                Ok(Ok((p, _))) => serde_json::to_value(p).unwrap_or(Value::Null),
                Ok(Err((code, why))) => return Ok(Prepared::Refused(self.failed(code, why))),
                Err(e @ VenueError::Auth { .. }) => {
                    return Ok(Prepared::Refused(self.failed(qtg_core::codes::CEX_AUTH_FAILED, e.to_string())))
                }
                Err(e) => return Err(self.unavailable(e)),
            },
            _ => match self.observe_payload(ctx) {
                Ok(p) => Value::Object(p),
                Err(why) => return Ok(Prepared::Refused(self.failed(qtg_core::codes::CEX_REFERENCE_MISSING, why))),
            },
        };
        Ok(Prepared::Action(PreparedAction::new(&ctx.action_type, "json", canonical_json(&payload), false)))
    }

    async fn submit(&self, ctx: &ExecutionContext, s: &Submission<'_>) -> Result<SubmitOutcome, ExecutorError> {
        match self.role {
            Role::WithdrawalAction => self.submit_withdrawal(ctx, s).await,
            // An observe node moves nothing: its submit starts the watch.
            _ => {
                let p: Map<String, Value> = serde_json::from_str(&s.prepared.payload)
                    .map_err(|e| ExecutorError::Protocol(format!("the prepared payload does not parse: {e}")))?;
                let mut r = self.result(AfterSubmit::Submitted);
                r.retry_after_seconds = Some(1.0);
                if let Some(id) = p.get("withdrawal_id").and_then(Value::as_str) {
                    r.provider_ref_id = Some(id.to_string());
                    r.provider_refs.insert("exchange_withdrawal_id".into(), json!(id));
                }
                Ok(r)
            }
        }
    }

    async fn observe(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        let mut r = self.observe_once(ctx).await?;
        // A status that maps again clears the C5 mark.
        if !r.provider_refs.contains_key(STATUS_UNMAPPED)
            && ctx.provider_refs.get(STATUS_UNMAPPED).is_some_and(|v| !v.is_null())
        {
            r.provider_refs.insert(STATUS_UNMAPPED.into(), Value::Null);
        }
        Ok(r)
    }

    async fn recover(&self, ctx: &ExecutionContext, idempotency_key: &str) -> Result<SubmitOutcome, ExecutorError> {
        match self.role {
            Role::WithdrawalAction => self.recover_withdrawal(ctx, idempotency_key).await,
            // Observing moves nothing: recovering is looking again.
            _ => Ok(self.observe(ctx).await?.widen()),
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::withdrawal::format_refusal;
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

    /// An executor whose key store is never read (observe, preflight).
    fn executor(venue: Fake, lookback: &str) -> CexExecutor {
        let nowhere = sqlx::postgres::PgPoolOptions::new().connect_lazy("postgres://nowhere.invalid/none").unwrap();
        with_pool(venue, lookback, nowhere)
    }

    fn with_pool(venue: Fake, lookback: &str, pool: sqlx::PgPool) -> CexExecutor {
        let table: toml::Table =
            format!("venue = \"fake\"\nbase_url = \"http://127.0.0.1:1\"\nnetwork = \"ETH\"\n{lookback}")
                .parse()
                .unwrap();
        let config = EntryConfig::parse("exec.cex.withdrawal_action.fake", Some(&table)).unwrap();
        CexExecutor::new(
            "exec.cex.withdrawal_action.fake",
            Role::WithdrawalAction,
            config,
            Arc::new(venue),
            pool,
            chrono::Duration::seconds(5),
        )
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
        assert_eq!(r.next_state, AfterSubmit::Unknown);
        assert_eq!(r.provider_refs[LEGACY_RECONCILIATION_GATED], true);
        assert_eq!(r.provider_refs[MANUAL_REVIEW_REQUIRED], "reconciliation_markers_missing");
        assert_eq!(r.error_code.as_deref(), Some("RECONCILIATION_GATED"));
    }

    /// Recovery reads the key store: a database of its own, migrated (`#[sqlx::test]`).
    #[sqlx::test(migrator = "qtg_store::MIGRATOR")]
    async fn the_client_id_decides_first_and_an_auth_failure_gates(pool: sqlx::PgPool) {
        let ready = |venue: Fake, lookback: &str| with_pool(venue, lookback, pool.clone());
        let venue = Fake::default();
        venue.withdrawals.lock().unwrap().extend([row("w1", None, 4), row("w2", Some("n:1"), 4)]);
        let e = ready(venue, "");
        let r = e.recover(&ctx(markers(Utc::now())), "n:1").await.unwrap();
        assert_eq!((r.next_state, r.provider_ref_id.as_deref()), (AfterSubmit::Submitted, Some("w2")));
        let e = ready(Fake { auth_down: true, ..Fake::default() }, "");
        let r = e.recover(&ctx(markers(Utc::now())), "n:1").await.unwrap();
        assert_eq!(r.next_state, AfterSubmit::Unknown);
        assert_eq!(r.provider_refs[MANUAL_REVIEW_REQUIRED], "reconciliation_auth_failed");
        assert_eq!(r.provider_refs[LEGACY_RECONCILIATION_GATED], true);
    }

    #[sqlx::test(migrator = "qtg_store::MIGRATOR")]
    async fn two_candidates_wait_while_the_lookback_is_open_then_call_a_person(pool: sqlx::PgPool) {
        let ready = |venue: Fake, lookback: &str| with_pool(venue, lookback, pool.clone());
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
        let open = ready(two(), "lookback_seconds = 600");
        let r = open.recover(&ctx(markers(started)), "n:1").await.unwrap();
        assert_eq!((r.next_state, r.error_code.as_deref()), (AfterSubmit::Unknown, Some("RECONCILIATION_AMBIGUOUS")));
        assert!(r.provider_refs.get(MANUAL_REVIEW_REQUIRED).is_none());
        assert_eq!(
            r.provider_refs[RECONCILIATION]["candidates"].as_array().map(Vec::len),
            Some(2),
            "w3 is another client's"
        );
        let closed = ready(two(), "lookback_seconds = 10");
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
        let e = ready(one(), "client_ids = false");
        let fresh = format!("{}:1", Uuid::new_v4());
        let c = ctx(markers(started));
        let r = e.recover(&c, &fresh).await.unwrap();
        assert_eq!((r.next_state, r.error_code.as_deref()), (AfterSubmit::Failed, Some("CEX_WITHDRAWAL_NOT_SENT")));
        // A key sent (through the key store, as submit does) whose request can still arrive: not
        // matched yet, asked again once it cannot; once the venue's clock is past its deadline,
        // the lone candidate is claimed.
        let sent = format!("{}:1", Uuid::new_v4());
        let node: Uuid = c.request_node_id.parse().unwrap();
        let by = Utc::now() + chrono::Duration::minutes(1);
        assert_eq!(keys::record(&e.pool, &sent, "fake", node, 1, by).await.unwrap(), Recorded::Fresh);
        assert!(keys::mark_sent(&e.pool, &sent, &json!({})).await.unwrap());
        let r = e.recover(&c, &sent).await.unwrap();
        assert_eq!((r.next_state, r.error_code.as_deref()), (AfterSubmit::Unknown, Some("RECONCILIATION_FENCING")));
        assert!(r.retry_after_seconds.is_some());
        let mut later = one();
        later.now = Some(Utc::now() + chrono::Duration::hours(1));
        let e = ready(later, "client_ids = false");
        let r = e.recover(&c, &sent).await.unwrap();
        assert_eq!((r.next_state, r.provider_ref_id.as_deref()), (AfterSubmit::Submitted, Some("w9")));
        assert_eq!(r.provider_refs[RECONCILIATION]["by"], "amount_address");
        // On a venue that keeps client ids (the default), a lone lookalike without ours is never
        // claimed: evidence for a person, not a completion (nor a FAILED that would invite a
        // retry while money may have moved).
        let r = ready(one(), "lookback_seconds = 10").recover(&ctx(markers(started)), "n:1").await.unwrap();
        assert_eq!((r.next_state, r.provider_ref_id.as_deref()), (AfterSubmit::Unknown, None));
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
        assert_eq!(r.next_state, AfterObserve::Observing);
        assert_eq!(r.provider_refs[STATUS_UNMAPPED]["code"], 42);
        c.provider_refs = json!({STATUS_UNMAPPED: {"kind": "withdrawal", "code": 42}});
        let mapped = Fake::default();
        mapped.withdrawals.lock().unwrap().push(row("w1", None, 4));
        let e = executor(mapped, "");
        let r = e.observe(&c).await.unwrap();
        assert_eq!(r.next_state, AfterObserve::Completed, "the action node completes once the venue holds it");
        assert_eq!(r.provider_refs[STATUS_UNMAPPED], Value::Null);
    }

    #[tokio::test]
    async fn preflight_counts_what_the_fee_model_debits_against_the_balance() {
        let with = |free: &str, config: &str| executor(Fake { free: free.into(), ..Fake::default() }, config);
        let code = |r: Option<Refusal>| r.and_then(|r| r.error_code);
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
