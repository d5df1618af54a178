//! The executor protocol's value types (docs/architecture.md §8.1, docs/executors.md): what a worker hands an
//! executor and what it accepts back, with the checks that make an answer well-formed.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::hash::sha256_hex;
use crate::markers;
use crate::state::{AfterObserve, AfterSubmit, NextState, NodeState, Refused};

pub const PROTOCOL_VERSION: &str = "1.0";

/// The "work order" for one step of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionContext {
    pub protocol_version: String,
    pub request_id: String,
    pub request_node_id: String,
    pub compiled_plan_hash: String,
    pub template_key: String,
    pub template_version: i32,
    pub node_key: String,
    pub node_kind: String,
    pub action_type: String,
    /// Dispatch: the attempt being submitted (stored + 1). Observe/recover: the stored one.
    pub attempt_no: i32,
    pub intent: Value,
    pub input_params: Value,
    pub resolved_bindings: Value,
    pub risk_controls: Value,
    /// Artifacts of direct-predecessor COMPLETED nodes.
    pub prior_artifacts: Vec<Value>,
    /// `config` after top-level `$ref` resolution.
    pub node_config: Value,
    /// Flat merge of the direct-predecessor COMPLETED nodes' `provider_refs` (no `__*` keys).
    pub provider_context: Value,
    pub timeout_policy: Value,
    /// This node's own `provider_refs` and `provider_ref_id` so far (observe/recover need
    /// what submit recorded).
    pub provider_refs: Value,
    pub provider_ref_id: Option<String>,
    pub executor_key: String,
}

/// `{request_node_id}:{attempt_no}` — the venue's client order id for an attempt.
pub fn idempotency_key(request_node_id: &str, attempt_no: i32) -> String {
    format!("{request_node_id}:{attempt_no}")
}

/// What `prepare` produced: what will be signed and submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreparedAction {
    pub action_type: String,
    pub payload_format: String,
    pub payload: String,
    /// hex sha256 of `payload`; filled (and checked) by qtg.
    #[serde(default)]
    pub payload_hash: String,
    #[serde(default)]
    pub signing_required: bool,
    #[serde(default)]
    pub expires_at: Option<String>,
}

impl PreparedAction {
    pub fn new(action_type: &str, payload_format: &str, payload: String, signing_required: bool) -> Self {
        let payload_hash = sha256_hex(payload.as_bytes());
        PreparedAction {
            action_type: action_type.to_string(),
            payload_format: payload_format.to_string(),
            payload,
            payload_hash,
            signing_required,
            expires_at: None,
        }
    }

    pub fn computed_hash(&self) -> String {
        sha256_hex(self.payload.as_bytes())
    }

    /// Fills a missing hash; refuses one that does not match the payload, and an action qtg
    /// could not store.
    pub fn seal(&mut self) -> Result<(), ProtocolViolation> {
        check_storable("the prepared action", &serde_json::to_value(&*self).unwrap_or(Value::Null))?;
        let computed = self.computed_hash();
        if self.payload_hash.is_empty() || self.payload_hash.eq_ignore_ascii_case(&computed) {
            self.payload_hash = computed;
            Ok(())
        } else {
            Err(ProtocolViolation("payload_hash does not match sha256(payload)".into()))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SigningIntent {
    pub action: String,
    pub asset: String,
    pub amount: String,
    pub destination: String,
    pub max_fee_usd: Option<String>,
    pub chain_family: String,
    pub allowed_payload_hash: String,
    /// The approved plan's chain (node `config.chain_id`), for a signer that checks what it
    /// signs against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<u64>,
    /// The approved token contract (node `config.token_contract`); absent for a chain's
    /// native coin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_contract: Option<String>,
    /// Decimals of `amount` in base units (node `config.decimals`; 18 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decimals: Option<u32>,
    /// The contract the approved transaction calls (node `config.contract`), e.g. a CCTP
    /// token messenger or message transmitter; absent for a plain transfer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// The bridge domain the funds arrive on (node `config.destination_domain`), e.g. a CCTP
    /// domain; absent when nothing is bridged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_domain: Option<u32>,
    /// A CCTP V2 burn's or mint's fee cap in the token's units, a decimal (node
    /// `config.max_fee`): the burn's `maxFee` may not exceed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge_max_fee: Option<String>,
    /// What `amount` is on a CCTP V2 node (node `config.amount_is`): `burned` (absent) or
    /// `delivered` (the burn is `amount + maxFee`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_is: Option<String>,
    /// A CCTP V2 transfer's finality (node `config.finality`): `fast` or `standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finality: Option<String>,
    /// The only address that may receive a CCTP V2 message on the destination (node
    /// `config.destination_caller`); absent for anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_caller: Option<String>,
    /// The hook data a CCTP V2 burn carries (node `config.hook_data`, hex); absent for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_data: Option<String>,
    /// A CCIP send's terms (a node whose config names `destination_chain_selector`); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ccip: Option<CcipIntent>,
}

/// What a CCIP send (`Router.ccipSend`) was approved to carry, from the node's config: the
/// destination chain, the fee token and the most it may pay, the receiver's gas and ordering,
/// the data. `token_contract`, `amount` and `destination` (the receiver) are the intent's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CcipIntent {
    /// The destination's CCIP chain selector, a decimal uint64 (a string: JSON numbers lose
    /// precision past 2^53).
    pub destination_chain_selector: String,
    /// `native` (the fee paid in the chain's coin, as the transaction's value) or the fee
    /// token's address (LINK).
    pub fee_token: String,
    /// The most the send may pay in the fee token, a decimal with 18 decimals (node
    /// `config.max_fee`, lowered by `risk_controls.ccip_max_fee`).
    pub max_fee: String,
    /// The receiver's gas limit on the destination (node `config.gas_limit`; 0 for a transfer
    /// to an account without code).
    pub gas_limit: u64,
    /// Out-of-order execution (node `config.allow_out_of_order_execution`).
    pub allow_out_of_order_execution: bool,
    /// The message's data, hex (`0x` for none).
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignRequest {
    pub protocol_version: String,
    pub request_id: String,
    pub request_node_id: String,
    pub signer_key: String,
    pub signing_intent: SigningIntent,
    pub payload_format: String,
    pub payload: String,
    pub payload_hash: String,
    pub metadata: Value,
}

/// A CCTP V2 node's fee cap as the signer must hold it: the node's `max_fee`, lowered by the
/// plan's `risk_controls.cctp_max_fee` when that is smaller (what the burn sends as `maxFee`).
/// A value that is not a decimal is passed as written: the signer refuses it.
fn bridge_fee_cap(ctx: &ExecutionContext) -> Option<String> {
    if ctx.node_config.get("destination_chain_selector").is_some() {
        // A CCIP send's cap is in the fee token: `ccip.max_fee`.
        return None;
    }
    let cap = text_of(ctx.node_config.get("max_fee"))?;
    Some(lower_cap(cap, text_of(ctx.risk_controls.get("cctp_max_fee"))))
}

/// The lower of two caps written as decimals: `risk` when it is one and below `cap`.
fn lower_cap(cap: String, risk: Option<String>) -> String {
    let amount = |t: &str| crate::risk::Amount::parse(t.trim());
    match (amount(&cap), risk.as_deref().and_then(amount)) {
        (Some(c), Some(r)) if r < c => risk.unwrap_or(cap),
        _ => cap,
    }
}

/// A CCIP send's terms as the signer must hold them (values as written: the signer refuses
/// what does not parse). `None` for a node that is not a CCIP send.
fn ccip_intent(ctx: &ExecutionContext) -> Option<CcipIntent> {
    let c = &ctx.node_config;
    let selector = text_of(c.get("destination_chain_selector"))?;
    Some(CcipIntent {
        destination_chain_selector: selector,
        fee_token: text_of(c.get("fee_token")).unwrap_or_default(),
        max_fee: lower_cap(
            text_of(c.get("max_fee")).unwrap_or_default(),
            text_of(ctx.risk_controls.get("ccip_max_fee")),
        ),
        gas_limit: c.get("gas_limit").and_then(Value::as_u64).unwrap_or(0),
        allow_out_of_order_execution: c.get("allow_out_of_order_execution").and_then(Value::as_bool).unwrap_or(true),
        data: text_of(c.get("data")).unwrap_or_else(|| "0x".into()),
    })
}

/// A config value as the signer sees it: a string as written, a number in its JSON form.
fn text_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

impl SignRequest {
    pub fn build(ctx: &ExecutionContext, signer_key: &str, prepared: &PreparedAction) -> Self {
        let text = |v: Option<&Value>| match v {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        let destination = ctx.intent.get("destination").or_else(|| ctx.node_config.get("destination"));
        SignRequest {
            protocol_version: PROTOCOL_VERSION.to_string(),
            request_id: ctx.request_id.clone(),
            request_node_id: ctx.request_node_id.clone(),
            signer_key: signer_key.to_string(),
            signing_intent: SigningIntent {
                action: prepared.action_type.clone(),
                asset: text(ctx.intent.get("asset")),
                amount: text(ctx.intent.get("amount")),
                destination: text(destination),
                max_fee_usd: None,
                chain_family: ctx.input_params.get("chain_family").and_then(Value::as_str).unwrap_or("evm").to_string(),
                allowed_payload_hash: prepared.payload_hash.clone(),
                chain_id: ctx.node_config.get("chain_id").and_then(Value::as_u64),
                token_contract: ctx.node_config.get("token_contract").and_then(Value::as_str).map(str::to_string),
                decimals: ctx.node_config.get("decimals").and_then(Value::as_u64).and_then(|d| u32::try_from(d).ok()),
                contract: ctx.node_config.get("contract").and_then(Value::as_str).map(str::to_string),
                destination_domain: ctx
                    .node_config
                    .get("destination_domain")
                    .and_then(Value::as_u64)
                    .and_then(|d| u32::try_from(d).ok()),
                bridge_max_fee: bridge_fee_cap(ctx),
                amount_is: text_of(ctx.node_config.get("amount_is")),
                finality: text_of(ctx.node_config.get("finality")),
                destination_caller: text_of(ctx.node_config.get("destination_caller")),
                hook_data: text_of(ctx.node_config.get("hook_data")),
                ccip: ccip_intent(ctx),
            },
            payload_format: prepared.payload_format.clone(),
            payload: prepared.payload.clone(),
            payload_hash: prepared.payload_hash.clone(),
            metadata: ctx.input_params.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignResult {
    pub signature: String,
    #[serde(default)]
    pub signed_payload: Option<String>,
    #[serde(default)]
    pub signer_address: Option<String>,
    #[serde(default)]
    pub signed_tx_hash: Option<String>,
}

impl SignResult {
    /// A signer's answer qtg can store.
    pub fn validate(&self) -> Result<(), ProtocolViolation> {
        if self.signature.is_empty() {
            return Err(ProtocolViolation("the signature is empty".into()));
        }
        check_storable("the signature", &serde_json::to_value(self).unwrap_or(Value::Null))
    }
}

/// An executor's answer. `S` is the state it moves the node to: any [`NodeState`] on the wire
/// (the default), the method's own type in process — [`Refusal`] for preflight and prepare,
/// [`SubmitOutcome`] for submit and recover, [`ObserveOutcome`] for observe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionResult<S = NodeState> {
    pub next_state: S,
    #[serde(default)]
    pub provider_state: Option<String>,
    #[serde(default)]
    pub provider_refs: Map<String, Value>,
    #[serde(default)]
    pub provider_ref_id: Option<String>,
    #[serde(default)]
    pub generated_artifacts: Vec<Value>,
    #[serde(default)]
    pub retry_after_seconds: Option<f64>,
    #[serde(default)]
    pub error_code: Option<String>,
    #[serde(default)]
    pub error_detail: Option<String>,
}

/// What preflight and prepare answer when they refuse: FAILED with a code and a detail.
pub type Refusal = ExecutionResult<Refused>;
/// What submit and recover answer.
pub type SubmitOutcome = ExecutionResult<AfterSubmit>;
/// What observe answers.
pub type ObserveOutcome = ExecutionResult<AfterObserve>;

impl<S: NextState> ExecutionResult<S> {
    pub fn new(next_state: S) -> Self {
        ExecutionResult {
            next_state,
            provider_state: None,
            provider_refs: Map::new(),
            provider_ref_id: None,
            generated_artifacts: Vec::new(),
            retry_after_seconds: None,
            error_code: None,
            error_detail: None,
        }
    }

    pub fn failed(code: &str, detail: impl Into<String>) -> Self {
        ExecutionResult {
            error_code: Some(code.to_string()),
            error_detail: Some(detail.into()),
            ..ExecutionResult::new(S::FAILED)
        }
    }

    /// The same answer with its state in another type that holds it (an observe answer as a
    /// recover answer; any answer as the wire's [`NodeState`]).
    pub fn widen<T: From<S>>(self) -> ExecutionResult<T> {
        let next_state = T::from(self.next_state);
        self.with_state(next_state)
    }

    /// The answer as the wire carries it.
    pub fn erase(self) -> ExecutionResult {
        let next_state = self.next_state.into();
        self.with_state(next_state)
    }
}

impl<S> ExecutionResult<S> {
    /// Every field but the state, with `next_state`.
    fn with_state<T>(self, next_state: T) -> ExecutionResult<T> {
        ExecutionResult {
            next_state,
            provider_state: self.provider_state,
            provider_refs: self.provider_refs,
            provider_ref_id: self.provider_ref_id,
            generated_artifacts: self.generated_artifacts,
            retry_after_seconds: self.retry_after_seconds,
            error_code: self.error_code,
            error_detail: self.error_detail,
        }
    }
}

impl ExecutionResult {
    /// An answer from the wire to `method`, checked against the contract ([`validate`]) and
    /// typed as that method's answer: where a remote executor's answer enters.
    ///
    /// [`validate`]: Self::validate
    pub fn narrow<S: NextState>(self, method: Method) -> Result<ExecutionResult<S>, ProtocolViolation> {
        self.validate(method)?;
        let state = self.next_state;
        let next_state = S::try_from(state)
            .map_err(|_| ProtocolViolation(format!("{} may not answer next_state {state}", method.as_str())))?;
        Ok(self.with_state(next_state))
    }

    /// Checks an executor's answer against the contract for `method`.
    pub fn validate(&self, method: Method) -> Result<(), ProtocolViolation> {
        let allowed = match method {
            Method::Preflight | Method::Prepare => Refused::try_from(self.next_state).is_ok(),
            Method::Submit | Method::Recover => AfterSubmit::try_from(self.next_state).is_ok(),
            Method::Observe => AfterObserve::try_from(self.next_state).is_ok(),
        };
        if !allowed {
            return Err(ProtocolViolation(format!(
                "{} may not answer next_state {}",
                method.as_str(),
                self.next_state
            )));
        }
        if let Some(k) = markers::QTG_ONLY.iter().find(|k| self.provider_refs.contains_key(**k)) {
            return Err(ProtocolViolation(format!("provider_refs may not set {k}")));
        }
        if let Some(s) = self.retry_after_seconds {
            if !s.is_finite() || s < 0.0 {
                return Err(ProtocolViolation("retry_after_seconds must be a number >= 0".into()));
            }
        }
        let size = serde_json::to_vec(self).map(|v| v.len()).unwrap_or(usize::MAX);
        if size > MAX_RESULT_BYTES {
            return Err(ProtocolViolation(format!("result is {size} bytes, over {MAX_RESULT_BYTES}")));
        }
        self.check_bounds()?;
        check_storable("the result", &serde_json::to_value(self).unwrap_or(Value::Null))
    }

    /// [`validate`](Self::validate), and the node's `provider_refs` after this answer is
    /// merged into `own` (what the node holds now) stay within the node's bounds: an executor
    /// that answers every call with new keys is refused before anything is stored.
    pub fn validate_merged(&self, method: Method, own: &Value) -> Result<(), ProtocolViolation> {
        self.validate(method)?;
        let mut merged = own.as_object().cloned().unwrap_or_default();
        merged.extend(self.provider_refs.iter().map(|(k, v)| (k.clone(), v.clone())));
        if merged.len() > MAX_NODE_REFS_KEYS {
            return Err(ProtocolViolation(format!(
                "provider_refs would hold {} keys for the node, over {MAX_NODE_REFS_KEYS}",
                merged.len()
            )));
        }
        let bytes = serde_json::to_vec(&merged).map(|v| v.len()).unwrap_or(usize::MAX);
        if bytes > MAX_NODE_REFS_BYTES {
            return Err(ProtocolViolation(format!(
                "provider_refs would be {bytes} bytes for the node, over {MAX_NODE_REFS_BYTES}"
            )));
        }
        Ok(())
    }

    /// The documented limits of one answer (docs/executors.md, "Limits").
    fn check_bounds(&self) -> Result<(), ProtocolViolation> {
        let over = |what: &str, n: usize, max: usize| ProtocolViolation(format!("{what} is {n}, over {max}"));
        if self.provider_refs.len() > MAX_REFS_KEYS {
            return Err(over("the number of provider_refs keys", self.provider_refs.len(), MAX_REFS_KEYS));
        }
        let refs = serde_json::to_vec(&self.provider_refs).map(|v| v.len()).unwrap_or(usize::MAX);
        if refs > MAX_REFS_BYTES {
            return Err(over("provider_refs in bytes", refs, MAX_REFS_BYTES));
        }
        if self.generated_artifacts.len() > MAX_ARTIFACTS {
            return Err(over("the number of generated_artifacts", self.generated_artifacts.len(), MAX_ARTIFACTS));
        }
        for (what, text, max) in [
            ("error_detail in characters", &self.error_detail, MAX_ERROR_DETAIL_CHARS),
            ("error_code in characters", &self.error_code, MAX_SHORT_TEXT_CHARS),
            ("provider_state in characters", &self.provider_state, MAX_SHORT_TEXT_CHARS),
            ("provider_ref_id in characters", &self.provider_ref_id, MAX_SHORT_TEXT_CHARS),
        ] {
            let n = text.as_deref().map_or(0, |t| t.chars().count());
            if n > max {
                return Err(over(what, n, max));
            }
        }
        Ok(())
    }
}

/// Largest executor answer qtg accepts.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;
/// `provider_refs` of one answer: keys and encoded bytes.
pub const MAX_REFS_KEYS: usize = 64;
pub const MAX_REFS_BYTES: usize = 32 * 1024;
/// A node's `provider_refs` after every answer is merged: keys and encoded bytes.
pub const MAX_NODE_REFS_KEYS: usize = 256;
pub const MAX_NODE_REFS_BYTES: usize = 64 * 1024;
/// `generated_artifacts` of one answer (their bytes count towards [`MAX_RESULT_BYTES`]).
pub const MAX_ARTIFACTS: usize = 16;
/// `error_detail`, and `error_code`, `provider_state`, `provider_ref_id`, in characters.
pub const MAX_ERROR_DETAIL_CHARS: usize = 4096;
pub const MAX_SHORT_TEXT_CHARS: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Preflight,
    Prepare,
    Submit,
    Observe,
    Recover,
}

/// The largest integer every executor receives exactly: 2^53 (gRPC's `Struct` numbers and
/// most languages' JSON numbers are IEEE-754 doubles).
pub const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// The path (`.a.b[2]`) of the first integer in `v` outside ±(2^53 − 1), the integers every
/// double (and the wire's encoder) carries exactly: qtg refuses it where it enters (amounts in
/// wei travel as decimal strings).
pub fn inexact_integer(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) if !n.is_f64() => {
            let beyond = n
                .as_u64()
                .map(|u| u >= MAX_EXACT_INTEGER as u64)
                .or(n.as_i64().map(|i| i.unsigned_abs() >= MAX_EXACT_INTEGER as u64));
            beyond.unwrap_or(true).then(String::new)
        }
        Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| inexact_integer(x).map(|p| format!("[{i}]{p}"))),
        Value::Object(o) => o.iter().find_map(|(k, x)| inexact_integer(x).map(|p| format!(".{k}{p}"))),
        _ => None,
    }
}

/// Deepest nesting of JSON qtg stores from an executor.
pub const MAX_JSON_DEPTH: usize = 32;

/// Whether qtg can store `v` as it is: no NUL (U+0000) in any string or object key
/// (PostgreSQL text and jsonb cannot hold it) and nested at most [`MAX_JSON_DEPTH`] deep.
/// What an executor sends that fails this is a protocol violation, not a database error.
pub fn check_storable(what: &str, v: &Value) -> Result<(), ProtocolViolation> {
    fn walk(v: &Value, depth: usize) -> Result<(), &'static str> {
        if depth > MAX_JSON_DEPTH {
            return Err("is nested too deep");
        }
        match v {
            Value::String(s) if s.contains('\0') => Err("holds a NUL character (U+0000)"),
            Value::Array(a) => a.iter().try_for_each(|x| walk(x, depth + 1)),
            Value::Object(o) => o.iter().try_for_each(|(k, x)| {
                if k.contains('\0') {
                    Err("holds a NUL character (U+0000) in a key")
                } else {
                    walk(x, depth + 1)
                }
            }),
            _ => Ok(()),
        }
    }
    walk(v, 0).map_err(|why| ProtocolViolation(format!("{what} {why}, which qtg cannot store")))
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Preflight => "preflight",
            Method::Prepare => "prepare",
            Method::Submit => "submit",
            Method::Observe => "observe",
            Method::Recover => "recover",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("protocol violation: {0}")]
pub struct ProtocolViolation(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    /// A wire answer narrows to a method's type exactly when the contract allows its state for
    /// that method; widening and erasing keep every field.
    #[test]
    fn a_wire_answer_narrows_only_to_what_its_method_may_answer() {
        for &state in NodeState::ALL {
            let r = ExecutionResult { provider_ref_id: Some("p".into()), ..ExecutionResult::new(state) };
            let allowed = |m: Method| r.validate(m).is_ok();
            assert_eq!(r.clone().narrow::<AfterSubmit>(Method::Submit).is_ok(), allowed(Method::Submit), "{state}");
            assert_eq!(r.clone().narrow::<AfterSubmit>(Method::Recover).is_ok(), allowed(Method::Recover), "{state}");
            assert_eq!(r.clone().narrow::<AfterObserve>(Method::Observe).is_ok(), allowed(Method::Observe), "{state}");
            assert_eq!(r.clone().narrow::<Refused>(Method::Prepare).is_ok(), allowed(Method::Prepare), "{state}");
            if let Ok(observed) = r.clone().narrow::<AfterObserve>(Method::Observe) {
                assert_eq!(observed.clone().widen::<AfterSubmit>().erase(), r);
                assert_eq!(observed.erase(), r);
            }
        }
        let refused = ExecutionResult::new(NodeState::Submitted).narrow::<Refused>(Method::Preflight).unwrap_err();
        assert!(refused.0.contains("preflight may not answer next_state SUBMITTED"), "{refused}");
    }

    /// The signer's CCTP fee cap is what the burn may send: the node's `max_fee`, lowered by
    /// the plan's `risk_controls.cctp_max_fee`, never raised by it.
    #[test]
    fn the_signers_bridge_fee_cap_is_the_lower_of_the_node_and_the_risk_controls() {
        let cap = |max_fee: Value, risk: Value| {
            let mut ctx: ExecutionContext = serde_json::from_value(serde_json::json!({
                "protocol_version": "1.0", "request_id": "r", "request_node_id": "n", "compiled_plan_hash": "h",
                "template_key": "t", "template_version": 1, "node_key": "burn", "node_kind": "action",
                "action_type": "cctp_burn", "attempt_no": 1, "intent": {}, "input_params": {},
                "resolved_bindings": {}, "risk_controls": {}, "prior_artifacts": [], "node_config": {},
                "provider_context": {}, "timeout_policy": {}, "provider_refs": {}, "provider_ref_id": null,
                "executor_key": "exec.cctp.burn"}))
            .unwrap();
            ctx.node_config = serde_json::json!({ "max_fee": max_fee });
            ctx.risk_controls = serde_json::json!({ "cctp_max_fee": risk });
            bridge_fee_cap(&ctx)
        };
        assert_eq!(cap("0.05".into(), "0.01".into()), Some("0.01".into()), "lowered");
        assert_eq!(cap("0.05".into(), "1".into()), Some("0.05".into()), "never raised");
        assert_eq!(cap("0.05".into(), Value::Null), Some("0.05".into()));
        assert_eq!(cap(serde_json::json!(0.5), "0.25".into()), Some("0.25".into()));
        assert_eq!(cap(Value::Null, "0.25".into()), None, "no cap approved: the signer refuses a V2 burn");
    }

    #[test]
    fn answers_and_a_nodes_refs_are_bounded() {
        let mut r = ExecutionResult::new(NodeState::Observing);
        for i in 0..MAX_REFS_KEYS {
            r.provider_refs.insert(format!("k{i}"), Value::from(i));
        }
        assert!(r.validate(Method::Observe).is_ok());
        r.provider_refs.insert("one_more".into(), Value::from(1));
        assert!(r.validate(Method::Observe).unwrap_err().0.contains("keys"));
        r.provider_refs.remove("one_more");
        // Within one answer's bounds, but the node already holds nearly its share.
        let own: Map<String, Value> =
            (0..MAX_NODE_REFS_KEYS - 10).map(|i| (format!("old{i}"), Value::from(i))).collect();
        let err = r.validate_merged(Method::Observe, &Value::Object(own.clone())).unwrap_err();
        assert!(err.0.contains("for the node"), "{err:?}");
        // The same keys again do not grow the node.
        let same: Map<String, Value> = r.provider_refs.clone();
        assert!(r.validate_merged(Method::Observe, &Value::Object(same)).is_ok());
        let mut long = ExecutionResult::failed("X", "d".repeat(MAX_ERROR_DETAIL_CHARS + 1));
        assert!(long.validate(Method::Observe).is_err());
        long.error_detail = Some("short".into());
        long.provider_ref_id = Some("r".repeat(MAX_SHORT_TEXT_CHARS + 1));
        assert!(long.validate(Method::Observe).is_err());
        let mut big = ExecutionResult::new(NodeState::Observing);
        big.provider_refs.insert("blob".into(), Value::from("x".repeat(MAX_REFS_BYTES)));
        assert!(big.validate(Method::Observe).unwrap_err().0.contains("bytes"));
        let mut many = ExecutionResult::new(NodeState::Observing);
        many.generated_artifacts = vec![serde_json::json!({}); MAX_ARTIFACTS + 1];
        assert!(many.validate(Method::Observe).is_err());
    }

    #[test]
    fn integers_beyond_two_to_the_53_are_found() {
        let v: Value =
            serde_json::from_str(r#"{"ok": 9007199254740991, "fee": 1e21, "a": [1, {"wei": 9007199254740992}]}"#)
                .unwrap();
        assert_eq!(inexact_integer(&v).as_deref(), Some(".a[1].wei"));
        let v: Value =
            serde_json::from_str(r#"{"n": -9007199254740991, "f": 0.00001, "s": "1000000000000000000000"}"#).unwrap();
        assert_eq!(inexact_integer(&v), None);
        assert!(inexact_integer(&serde_json::from_str(r#"[-9007199254740992]"#).unwrap()).is_some());
    }

    #[test]
    fn what_cannot_be_stored_is_a_protocol_violation() {
        let mut r = ExecutionResult::new(NodeState::Failed);
        r.error_detail = Some("bad\0detail".into());
        assert!(r.validate(Method::Preflight).unwrap_err().0.contains("NUL"));
        let mut r = ExecutionResult::new(NodeState::Submitted);
        r.provider_refs.insert("k\0".into(), Value::from(1));
        assert!(r.validate(Method::Submit).unwrap_err().0.contains("key"));
        let mut deep = Value::from(1);
        for _ in 0..40 {
            deep = Value::Array(vec![deep]);
        }
        let mut r = ExecutionResult::new(NodeState::Submitted);
        r.provider_refs.insert("deep".into(), deep);
        assert!(r.validate(Method::Submit).unwrap_err().0.contains("deep"));
        let mut p = PreparedAction::new("t", "json", "{\"a\":\"\0\"}".into(), false);
        p.payload = "x\0".into();
        p.payload_hash = String::new();
        assert!(p.seal().is_err());
        let s =
            SignResult { signature: "0x\0".into(), signed_payload: None, signer_address: None, signed_tx_hash: None };
        assert!(s.validate().is_err());
    }

    #[test]
    fn results_are_checked_per_method() {
        let ok = ExecutionResult::new(NodeState::Submitted);
        assert!(ok.validate(Method::Submit).is_ok());
        assert!(ok.validate(Method::Observe).is_err());
        assert!(ExecutionResult::new(NodeState::Ready).validate(Method::Recover).is_err());
        let mut marker = ExecutionResult::new(NodeState::Completed);
        marker.provider_refs.insert(markers::SUBMIT_ATTEMPT_PENDING.into(), Value::Bool(false));
        assert!(marker.validate(Method::Observe).is_err());
        let mut review = ExecutionResult::new(NodeState::Unknown);
        review.provider_refs.insert(markers::MANUAL_REVIEW_REQUIRED.into(), "reconciliation_ambiguous".into());
        assert!(review.validate(Method::Recover).is_ok());
    }

    #[test]
    fn prepared_action_hash_is_sealed() {
        let mut p = PreparedAction::new("transfer", "json", "{}".into(), false);
        assert_eq!(p.payload_hash, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
        p.seal().unwrap();
        p.payload_hash = "00".repeat(32);
        assert!(p.seal().is_err());
        p.payload_hash.clear();
        p.seal().unwrap();
        assert_eq!(p.payload_hash, p.computed_hash());
    }
}
