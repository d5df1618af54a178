//! Conversions between qtg's domain types (`qtg_core::protocol`) and the wire messages. JSON
//! objects travel as `google.protobuf.Struct` (a plain JSON object in canonical JSON).

use pbjson_types::Struct;
use qtg_core::protocol::Method;
use qtg_core::{ExecutionContext, ExecutionResult, NodeState, PreparedAction, SignRequest, SignResult, SigningIntent};
use serde_json::{Map, Value};

use crate::executor::v1 as pb;
use crate::signer::v1 as spb;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("wire message: {0}")]
pub struct WireError(pub String);

fn err(msg: impl Into<String>) -> WireError {
    WireError(msg.into())
}

/// A JSON object as a Struct (`null` → none; anything else must be an object).
pub fn to_struct(v: &Value) -> Result<Option<Struct>, WireError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(_) => serde_json::from_value(v.clone()).map(Some).map_err(|e| err(e.to_string())),
        other => Err(err(format!("expected a JSON object, got {other}"))),
    }
}

/// A Struct as a JSON object. Struct numbers are doubles on the wire; integral ones within
/// ±2^53 come back as integers so `1` stays `1` (amounts travel as decimal strings anyway).
pub fn from_struct(s: Option<&Struct>) -> Value {
    match s {
        None => Value::Object(Map::new()),
        Some(s) => integral(serde_json::to_value(s).unwrap_or_else(|_| Value::Object(Map::new()))),
    }
}

fn integral(v: Value) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() <= EXACT && n.is_f64() => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, integral(v))).collect()),
        other => other,
    }
}

fn obj(s: Option<&Struct>) -> Map<String, Value> {
    match from_struct(s) {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn opt(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

pub fn context_to_wire(c: &ExecutionContext) -> Result<pb::ExecutionContext, WireError> {
    Ok(pb::ExecutionContext {
        protocol_version: c.protocol_version.clone(),
        request_id: c.request_id.clone(),
        request_node_id: c.request_node_id.clone(),
        compiled_plan_hash: c.compiled_plan_hash.clone(),
        template_key: c.template_key.clone(),
        template_version: c.template_version,
        node_key: c.node_key.clone(),
        node_kind: c.node_kind.clone(),
        action_type: c.action_type.clone(),
        attempt_no: c.attempt_no,
        intent: to_struct(&c.intent)?,
        input_params: to_struct(&c.input_params)?,
        resolved_bindings: to_struct(&c.resolved_bindings)?,
        risk_controls: to_struct(&c.risk_controls)?,
        prior_artifacts: c.prior_artifacts.iter().filter_map(|a| to_struct(a).transpose()).collect::<Result<_, _>>()?,
        node_config: to_struct(&c.node_config)?,
        provider_context: to_struct(&c.provider_context)?,
        timeout_policy: to_struct(&c.timeout_policy)?,
        provider_refs: to_struct(&c.provider_refs)?,
        provider_ref_id: c.provider_ref_id.clone().unwrap_or_default(),
    })
}

/// The context an executor receives, back in domain form; `executor_key` is the request's.
pub fn context_from_wire(c: &pb::ExecutionContext, executor_key: &str) -> ExecutionContext {
    ExecutionContext {
        protocol_version: c.protocol_version.clone(),
        request_id: c.request_id.clone(),
        request_node_id: c.request_node_id.clone(),
        compiled_plan_hash: c.compiled_plan_hash.clone(),
        template_key: c.template_key.clone(),
        template_version: c.template_version,
        node_key: c.node_key.clone(),
        node_kind: c.node_kind.clone(),
        action_type: c.action_type.clone(),
        attempt_no: c.attempt_no,
        intent: from_struct(c.intent.as_ref()),
        input_params: from_struct(c.input_params.as_ref()),
        resolved_bindings: from_struct(c.resolved_bindings.as_ref()),
        risk_controls: from_struct(c.risk_controls.as_ref()),
        prior_artifacts: c.prior_artifacts.iter().map(|a| from_struct(Some(a))).collect(),
        node_config: from_struct(c.node_config.as_ref()),
        provider_context: from_struct(c.provider_context.as_ref()),
        timeout_policy: from_struct(c.timeout_policy.as_ref()),
        provider_refs: from_struct(c.provider_refs.as_ref()),
        provider_ref_id: opt(&c.provider_ref_id),
        executor_key: executor_key.to_string(),
    }
}

pub fn state_to_wire(s: NodeState) -> pb::NodeState {
    match s {
        NodeState::Submitted => pb::NodeState::Submitted,
        NodeState::Observing => pb::NodeState::Observing,
        NodeState::Completed => pb::NodeState::Completed,
        NodeState::Failed => pb::NodeState::Failed,
        NodeState::Unknown => pb::NodeState::Unknown,
        _ => pb::NodeState::Unspecified,
    }
}

pub fn result_to_wire(r: &ExecutionResult) -> Result<pb::ExecutionResult, WireError> {
    Ok(pb::ExecutionResult {
        next_state: state_to_wire(r.next_state) as i32,
        provider_state: r.provider_state.clone().unwrap_or_default(),
        provider_refs: to_struct(&Value::Object(r.provider_refs.clone()))?,
        provider_ref_id: r.provider_ref_id.clone().unwrap_or_default(),
        generated_artifacts: r
            .generated_artifacts
            .iter()
            .filter_map(|a| to_struct(a).transpose())
            .collect::<Result<_, _>>()?,
        retry_after_seconds: r.retry_after_seconds,
        error_code: r.error_code.clone().unwrap_or_default(),
        error_detail: r.error_detail.clone().unwrap_or_default(),
    })
}

/// An executor's answer in domain form. `Ok(None)`: no next_state (a preflight pass; a
/// protocol error for any other method). The per-method state check is the caller's
/// (`ExecutionResult::validate`).
pub fn result_from_wire(r: &pb::ExecutionResult, method: Method) -> Result<Option<ExecutionResult>, WireError> {
    let state = match pb::NodeState::try_from(r.next_state) {
        Ok(pb::NodeState::Unspecified) => {
            return if method == Method::Preflight {
                Ok(None)
            } else {
                Err(err(format!("{} answered without next_state", method.as_str())))
            }
        }
        Ok(pb::NodeState::Submitted) => NodeState::Submitted,
        Ok(pb::NodeState::Observing) => NodeState::Observing,
        Ok(pb::NodeState::Completed) => NodeState::Completed,
        Ok(pb::NodeState::Failed) => NodeState::Failed,
        Ok(pb::NodeState::Unknown) => NodeState::Unknown,
        Err(_) => return Err(err(format!("unknown next_state {}", r.next_state))),
    };
    Ok(Some(ExecutionResult {
        next_state: state,
        provider_state: opt(&r.provider_state),
        provider_refs: obj(r.provider_refs.as_ref()),
        provider_ref_id: opt(&r.provider_ref_id),
        generated_artifacts: r.generated_artifacts.iter().map(|a| from_struct(Some(a))).collect(),
        retry_after_seconds: r.retry_after_seconds,
        error_code: opt(&r.error_code),
        error_detail: opt(&r.error_detail),
    }))
}

/// Unix seconds and nanoseconds as a `google.protobuf.Timestamp` (`submit_by`).
pub fn timestamp_to_wire(seconds: i64, nanos: u32) -> pbjson_types::Timestamp {
    pbjson_types::Timestamp { seconds, nanos: nanos.min(999_999_999) as i32 }
}

/// A `google.protobuf.Timestamp` as unix seconds and nanoseconds; `None` when out of range.
pub fn timestamp_from_wire(t: &pbjson_types::Timestamp) -> Option<(i64, u32)> {
    (0..=999_999_999).contains(&t.nanos).then_some((t.seconds, t.nanos as u32))
}

pub fn prepared_to_wire(p: &PreparedAction) -> pb::PreparedAction {
    pb::PreparedAction {
        action_type: p.action_type.clone(),
        payload_format: p.payload_format.clone(),
        payload: p.payload.clone(),
        payload_hash: p.payload_hash.clone(),
        signing_required: p.signing_required,
        expires_at: p.expires_at.clone().unwrap_or_default(),
    }
}

pub fn prepared_from_wire(p: &pb::PreparedAction) -> Result<PreparedAction, WireError> {
    if p.action_type.is_empty() || p.payload_format.is_empty() {
        return Err(err("prepared action needs action_type and payload_format"));
    }
    Ok(PreparedAction {
        action_type: p.action_type.clone(),
        payload_format: p.payload_format.clone(),
        payload: p.payload.clone(),
        payload_hash: p.payload_hash.clone(),
        signing_required: p.signing_required,
        expires_at: opt(&p.expires_at),
    })
}

pub fn sign_result_to_wire(s: &SignResult) -> pb::SignResult {
    pb::SignResult {
        signature: s.signature.clone(),
        signed_payload: s.signed_payload.clone().unwrap_or_default(),
        signer_address: s.signer_address.clone().unwrap_or_default(),
        signed_tx_hash: s.signed_tx_hash.clone().unwrap_or_default(),
    }
}

pub fn sign_result_from_wire(s: &pb::SignResult) -> SignResult {
    SignResult {
        signature: s.signature.clone(),
        signed_payload: opt(&s.signed_payload),
        signer_address: opt(&s.signer_address),
        signed_tx_hash: opt(&s.signed_tx_hash),
    }
}

pub fn sign_request_to_wire(r: &SignRequest) -> Result<spb::SignRequest, WireError> {
    let i = &r.signing_intent;
    Ok(spb::SignRequest {
        protocol_version: r.protocol_version.clone(),
        request_id: r.request_id.clone(),
        request_node_id: r.request_node_id.clone(),
        signer_key: r.signer_key.clone(),
        signing_intent: Some(spb::SigningIntent {
            action: i.action.clone(),
            asset: i.asset.clone(),
            amount: i.amount.clone(),
            destination: i.destination.clone(),
            max_fee_usd: i.max_fee_usd.clone().unwrap_or_default(),
            chain_family: i.chain_family.clone(),
            allowed_payload_hash: i.allowed_payload_hash.clone(),
            chain_id: i.chain_id,
            token_contract: i.token_contract.clone(),
            decimals: i.decimals,
            contract: i.contract.clone(),
            destination_domain: i.destination_domain,
            bridge_max_fee: i.bridge_max_fee.clone(),
            amount_is: i.amount_is.clone(),
            finality: i.finality.clone(),
            destination_caller: i.destination_caller.clone(),
            hook_data: i.hook_data.clone(),
            ccip: i.ccip.as_ref().map(|c| spb::CcipIntent {
                destination_chain_selector: c.destination_chain_selector.clone(),
                fee_token: c.fee_token.clone(),
                max_fee: c.max_fee.clone(),
                gas_limit: c.gas_limit,
                allow_out_of_order_execution: c.allow_out_of_order_execution,
                data: c.data.clone(),
            }),
        }),
        payload_format: r.payload_format.clone(),
        payload: r.payload.clone(),
        payload_hash: r.payload_hash.clone(),
        metadata: to_struct(&r.metadata)?,
    })
}

pub fn sign_request_from_wire(r: &spb::SignRequest) -> SignRequest {
    let i = r.signing_intent.clone().unwrap_or_default();
    SignRequest {
        protocol_version: r.protocol_version.clone(),
        request_id: r.request_id.clone(),
        request_node_id: r.request_node_id.clone(),
        signer_key: r.signer_key.clone(),
        signing_intent: SigningIntent {
            action: i.action,
            asset: i.asset,
            amount: i.amount,
            destination: i.destination,
            max_fee_usd: opt(&i.max_fee_usd),
            chain_family: i.chain_family,
            allowed_payload_hash: i.allowed_payload_hash,
            chain_id: i.chain_id,
            token_contract: i.token_contract,
            decimals: i.decimals,
            contract: i.contract,
            destination_domain: i.destination_domain,
            bridge_max_fee: i.bridge_max_fee,
            amount_is: i.amount_is,
            finality: i.finality,
            destination_caller: i.destination_caller,
            hook_data: i.hook_data,
            ccip: i.ccip.map(|c| qtg_core::CcipIntent {
                destination_chain_selector: c.destination_chain_selector,
                fee_token: c.fee_token,
                max_fee: c.max_fee,
                gas_limit: c.gas_limit,
                allow_out_of_order_execution: c.allow_out_of_order_execution,
                data: c.data,
            }),
        },
        payload_format: r.payload_format.clone(),
        payload: r.payload.clone(),
        payload_hash: r.payload_hash.clone(),
        metadata: from_struct(r.metadata.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> ExecutionContext {
        ExecutionContext {
            protocol_version: "1.0".into(),
            request_id: "r".into(),
            request_node_id: "n".into(),
            compiled_plan_hash: "h".into(),
            template_key: "t".into(),
            template_version: 2,
            node_key: "k".into(),
            node_kind: "action".into(),
            action_type: "transfer".into(),
            attempt_no: 3,
            intent: json!({"asset": "USDC", "amount": "1.50", "nested": {"a": [1, "x", null, true]}}),
            input_params: json!({}),
            resolved_bindings: json!({"executor_key": "e"}),
            risk_controls: json!({}),
            prior_artifacts: vec![json!({"kind": "proof"})],
            node_config: json!({"txid": "0xabc"}),
            provider_context: json!({}),
            timeout_policy: json!({}),
            provider_refs: json!({"order": "o-1"}),
            provider_ref_id: Some("o-1".into()),
            executor_key: "exec.x".into(),
        }
    }

    #[test]
    fn context_round_trips_through_proto_and_json() {
        let c = ctx();
        let wire = context_to_wire(&c).unwrap();
        assert_eq!(context_from_wire(&wire, "exec.x"), c);
        // Canonical JSON: camelCase names, Struct as a plain object.
        let j = serde_json::to_value(&wire).unwrap();
        assert_eq!(j["requestNodeId"], "n");
        assert_eq!(
            j["intent"]["nested"]["a"],
            json!([1.0, "x", null, true]),
            "a Struct number is a double on the wire"
        );
        let back: pb::ExecutionContext = serde_json::from_value(j).unwrap();
        assert_eq!(back, wire);
        // Original proto field names are accepted too.
        let snake: pb::ExecutionContext =
            serde_json::from_value(json!({"request_node_id": "n", "attempt_no": 3})).unwrap();
        assert_eq!(snake.attempt_no, 3);
    }

    #[test]
    fn results_map_states_and_reject_garbage() {
        let mut r = ExecutionResult::new(NodeState::Observing);
        r.retry_after_seconds = Some(2.5);
        r.provider_refs.insert("x".into(), json!(1));
        let wire = result_to_wire(&r).unwrap();
        let back = result_from_wire(&wire, Method::Observe).unwrap().unwrap();
        assert_eq!(back.next_state, NodeState::Observing);
        assert_eq!(back.retry_after_seconds, Some(2.5));
        assert_eq!(back.provider_refs["x"], json!(1));
        let empty = pb::ExecutionResult::default();
        assert_eq!(result_from_wire(&empty, Method::Preflight).unwrap(), None);
        assert!(result_from_wire(&empty, Method::Submit).is_err());
        let bad = pb::ExecutionResult { next_state: 42, ..Default::default() };
        assert!(result_from_wire(&bad, Method::Observe).is_err());
    }
}
