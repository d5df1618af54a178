//! build_execution_context: the work order for one step of one node, from a claimed
//! [`WorkItem`] — which carries the request's nodes and the direct predecessors' artifacts,
//! read by the claim's own statement — and the plan's edges (read once per plan version).

use std::collections::HashMap;

use qtg_core::markers::{is_marker, QTG_ONLY, SUBMIT_ATTEMPT_PENDING, SUBMIT_ATTEMPT_STARTED_AT};
use qtg_core::plan::predecessors;
use qtg_core::protocol::PROTOCOL_VERSION;
use qtg_core::refs::{resolve_config, RefError};
use qtg_core::{ExecutionContext, NodeState};
use qtg_store::{NodeBrief, PgConnection, WorkItem};
use serde_json::{json, Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error(transparent)]
    Ref(#[from] RefError),
    #[error(transparent)]
    Store(#[from] qtg_store::StoreError),
}

/// Builds the context for `item` at `attempt_no` (dispatch passes stored + 1; observe and
/// recover the stored attempt).
pub async fn build_execution_context(
    conn: &mut PgConnection,
    item: &WorkItem,
    attempt_no: i32,
) -> Result<ExecutionContext, ContextError> {
    let nodes = &item.context.nodes;
    let edges = crate::plans::edges(conn, item.plan_version_id).await?;
    let by_key: HashMap<&str, &NodeBrief> = nodes.iter().map(|n| (n.node_key.as_str(), n)).collect();

    // Direct predecessors that completed, in node_key order (collisions: the later key wins).
    let mut preds: Vec<&NodeBrief> = predecessors(&edges, &item.node_key)
        .into_iter()
        .filter_map(|k| by_key.get(k).copied())
        .filter(|n| n.node_state == NodeState::Completed)
        .collect();
    preds.sort_by(|a, b| a.node_key.cmp(&b.node_key));

    let mut provider_context = Map::new();
    for p in &preds {
        for (k, v) in public_refs(&p.provider_refs) {
            if let Some(old) = provider_context.insert(k.clone(), v.clone()) {
                if old != v {
                    tracing::warn!(
                        node_key = %item.node_key, key = %k, from = %p.node_key,
                        "provider_context key collision on fan-in; later node_key wins"
                    );
                }
            }
        }
    }

    // $ref sees every completed node of the request, never markers.
    let completed_refs: HashMap<String, Value> = nodes
        .iter()
        .filter(|n| n.node_state == NodeState::Completed)
        .map(|n| (n.node_key.clone(), Value::Object(public_refs(&n.provider_refs))))
        .collect();
    let node_config = resolve_config(&item.config, &completed_refs)?;

    // The approval policy's fee cap, where its rule set one (the lanes that quote a fee in the
    // asset's units read risk_controls.max_fee): read with the claim.
    let policy_fee = item.policy_max_fee.clone();
    // The claim read the artifacts of the same predecessors (the plan's edges into this node,
    // COMPLETED), in the same snapshot as the nodes.
    let prior_artifacts = item.context.prior_artifacts.clone();

    Ok(ExecutionContext {
        protocol_version: PROTOCOL_VERSION.to_string(),
        request_id: item.request_id.to_string(),
        request_node_id: item.node_id.to_string(),
        compiled_plan_hash: item.compiled_plan_hash.clone(),
        template_key: item.template_key.clone(),
        template_version: item.template_version,
        node_key: item.node_key.clone(),
        node_kind: item.node_kind.as_str().to_string(),
        action_type: item.action_type.clone(),
        attempt_no,
        intent: item.intent.clone(),
        input_params: item.input_params.clone(),
        resolved_bindings: json!({
            "executor_key": item.executor_key,
            "signer_key": item.signer_key,
            "signing_required": item.signing_required,
        }),
        risk_controls: with_policy_fee(&item.risk_controls, &item.intent, policy_fee.as_deref()),
        prior_artifacts,
        node_config,
        provider_context: Value::Object(provider_context),
        timeout_policy: item.timeout_policy.clone(),
        // A new attempt (dispatch) starts clean: nothing of attempt N reaches attempt N + 1's
        // calls (its history stays in node_events and artifacts). Observe and recover see what
        // their attempt recorded, less qtg's own markers — except that recover sees the
        // submit markers of the attempt it decides (the runbook's matcher enters only when
        // both are there).
        provider_refs: if attempt_no > item.attempt_no {
            json!({})
        } else {
            executor_refs(&item.provider_refs, matches!(item.node_state, NodeState::Submitting | NodeState::Unknown))
        },
        provider_ref_id: if attempt_no > item.attempt_no { None } else { item.provider_ref_id.clone() },
        executor_key: item.executor_key.clone(),
    })
}

/// `risk_controls` with `max_fee` the stricter of its own cap for the intent's asset (a plain
/// amount, or one per asset) and the policy's `fee`. Without a policy cap, unchanged; with one
/// and an unreadable own cap, the policy's (never looser than it).
pub fn with_policy_fee(risk_controls: &Value, intent: &Value, fee: Option<&str>) -> Value {
    use qtg_core::risk::Amount;
    let Some(cap) = fee.and_then(Amount::parse) else {
        return risk_controls.clone();
    };
    let asset = intent.get("asset").and_then(Value::as_str).unwrap_or("");
    let own = match risk_controls.get("max_fee") {
        Some(Value::String(s)) => Amount::parse(s),
        Some(Value::Object(per)) => per
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(asset))
            .and_then(|(_, v)| v.as_str())
            .and_then(Amount::parse),
        _ => None,
    };
    let stricter = match own {
        Some(o) if o < cap => o,
        _ => cap,
    };
    let mut out = match risk_controls {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    out.insert("max_fee".into(), Value::String(stricter.to_string()));
    Value::Object(out)
}

/// A node's `provider_refs` as its executor may see them: without qtg's own markers
/// (`__submit_*`, `__late_effect`), which an executor may not set either — but with the
/// `__submit_attempt_*` pair when `recovering` (read-only: a result that echoes them is a
/// protocol violation).
fn executor_refs(refs: &Value, recovering: bool) -> Value {
    let submit = [SUBMIT_ATTEMPT_PENDING, SUBMIT_ATTEMPT_STARTED_AT];
    Value::Object(refs_without(refs, |k| QTG_ONLY.contains(&k) && !(recovering && submit.contains(&k))))
}

/// What successors see of a node's refs: no marker at all.
fn public_refs(refs: &Value) -> Map<String, Value> {
    refs_without(refs, is_marker)
}

fn refs_without(refs: &Value, dropped: impl Fn(&str) -> bool) -> Map<String, Value> {
    refs.as_object()
        .map(|m| m.iter().filter(|(k, _)| !dropped(k)).map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_fee_cap_is_never_looser_than_the_plans() {
        let usdt = json!({"asset": "USDT", "amount": "100"});
        let plain = json!({"max_fee": "2", "approvals_required": 1});
        assert_eq!(with_policy_fee(&plain, &usdt, None), plain, "no policy cap: unchanged");
        assert_eq!(with_policy_fee(&plain, &usdt, Some("1.5"))["max_fee"], "1.5", "the policy's is stricter");
        assert_eq!(with_policy_fee(&plain, &usdt, Some("3"))["max_fee"], "2", "the plan's is stricter");
        assert_eq!(with_policy_fee(&plain, &usdt, Some("3"))["approvals_required"], 1, "the rest kept");
        let per_asset = json!({"max_fee": {"usdt": "0.5", "BTC": "0.001"}});
        assert_eq!(with_policy_fee(&per_asset, &usdt, Some("1"))["max_fee"], "0.5");
        assert_eq!(with_policy_fee(&json!({}), &usdt, Some("1"))["max_fee"], "1", "no plan cap: the policy's");
        assert_eq!(
            with_policy_fee(&json!({"max_fee": 7}), &usdt, Some("1"))["max_fee"],
            "1",
            "unreadable: the policy's"
        );
    }
}
