//! Plan graphs: a template version's nodes and edges, their validation (acyclic, keys unique,
//! edges and `$ref`s resolve), successors, fan-in activation and the compiled plan hash.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::hash::canonical_hash;
use crate::refs;
use crate::state::NodeState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// Moves funds; a COMPLETED action node is a completed side effect.
    Action,
    /// Reads only.
    Observe,
    /// Done by a person, finished by complete-manual; never dispatched.
    Manual,
}

impl NodeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Action => "action",
            NodeKind::Observe => "observe",
            NodeKind::Manual => "manual",
        }
    }

    pub fn parse(s: &str) -> Option<NodeKind> {
        match s {
            "action" => Some(NodeKind::Action),
            "observe" => Some(NodeKind::Observe),
            "manual" => Some(NodeKind::Manual),
            _ => None,
        }
    }
}

/// A `node_kind` column as the store reads it.
impl TryFrom<String> for NodeKind {
    type Error = crate::state::UnknownName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        NodeKind::parse(&s).ok_or(crate::state::UnknownName("node_kind", s))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanNode {
    pub node_key: String,
    pub node_kind: NodeKind,
    pub action_type: String,
    pub executor_key: String,
    #[serde(default)]
    pub signer_key: Option<String>,
    #[serde(default)]
    pub signing_required: bool,
    #[serde(default = "empty_object")]
    pub config: Value,
    #[serde(default = "empty_object")]
    pub timeout_policy: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanEdge {
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanDefinition {
    pub nodes: Vec<PlanNode>,
    #[serde(default)]
    pub edges: Vec<PlanEdge>,
    #[serde(default = "empty_object")]
    pub risk_controls: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("a plan needs at least one node")]
    Empty,
    #[error("a plan has at most {max} nodes")]
    TooLarge { max: usize },
    #[error("node_key {0:?} must be 1-64 characters of [A-Za-z0-9_-]")]
    BadKey(String),
    #[error("node_key {0:?} appears more than once")]
    DuplicateKey(String),
    #[error("edge {from:?} -> {to:?} names an unknown node")]
    UnresolvedEdge { from: String, to: String },
    #[error("edge {0:?} -> {0:?} points at itself")]
    SelfEdge(String),
    #[error("edge {from:?} -> {to:?} appears more than once")]
    DuplicateEdge { from: String, to: String },
    #[error("the plan has a cycle through {0:?}")]
    Cycle(String),
    #[error("node {node:?}: {reason}")]
    BadNode { node: String, reason: String },
}

pub const MAX_NODES: usize = 64;

/// Upper bound of `timeout_policy.observe_seconds` (30 days).
pub const MAX_OBSERVE_SECONDS: f64 = 30.0 * 86400.0;

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 64 && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl PlanDefinition {
    /// Checks everything that can be checked before a plan runs.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.nodes.is_empty() {
            return Err(PlanError::Empty);
        }
        if self.nodes.len() > MAX_NODES {
            return Err(PlanError::TooLarge { max: MAX_NODES });
        }
        let mut keys = BTreeSet::new();
        for n in &self.nodes {
            if !valid_key(&n.node_key) {
                return Err(PlanError::BadKey(n.node_key.clone()));
            }
            if !keys.insert(n.node_key.as_str()) {
                return Err(PlanError::DuplicateKey(n.node_key.clone()));
            }
            n.validate()?;
        }
        let mut seen = BTreeSet::new();
        for e in &self.edges {
            if !keys.contains(e.from.as_str()) || !keys.contains(e.to.as_str()) {
                return Err(PlanError::UnresolvedEdge { from: e.from.clone(), to: e.to.clone() });
            }
            if e.from == e.to {
                return Err(PlanError::SelfEdge(e.from.clone()));
            }
            if !seen.insert((e.from.as_str(), e.to.as_str())) {
                return Err(PlanError::DuplicateEdge { from: e.from.clone(), to: e.to.clone() });
            }
        }
        self.topological_order()?;
        for n in &self.nodes {
            let ancestors = self.ancestors(&n.node_key);
            for r in refs::collect_refs(&n.config) {
                if !ancestors.contains(r.node_key.as_str()) {
                    return Err(PlanError::BadNode {
                        node: n.node_key.clone(),
                        reason: format!("$ref:{}.{} must name a node that runs before it", r.node_key, r.field),
                    });
                }
            }
        }
        if !self.risk_controls.is_object() {
            return Err(PlanError::BadNode { node: "-".into(), reason: "risk_controls must be an object".into() });
        }
        if let Some(path) = crate::protocol::inexact_integer(&self.risk_controls) {
            return Err(PlanError::BadNode { node: "-".into(), reason: inexact(&format!("risk_controls{path}")) });
        }
        crate::risk::RiskLimits::from_plan(&self.risk_controls)
            .map_err(|reason| PlanError::BadNode { node: "-".into(), reason })?;
        bridge_pairs_agree(self)
    }

    /// Kahn's algorithm; ties broken by node_key so the order is deterministic.
    pub fn topological_order(&self) -> Result<Vec<&str>, PlanError> {
        let mut indegree: BTreeMap<&str, usize> = self.nodes.iter().map(|n| (n.node_key.as_str(), 0)).collect();
        for e in &self.edges {
            if let Some(d) = indegree.get_mut(e.to.as_str()) {
                *d += 1;
            }
        }
        let mut queue: VecDeque<&str> = indegree.iter().filter(|(_, d)| **d == 0).map(|(k, _)| *k).collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(k) = queue.pop_front() {
            order.push(k);
            for s in self.successors(k) {
                let d = indegree.get_mut(s).expect("edge endpoints validated");
                *d -= 1;
                if *d == 0 {
                    queue.push_back(s);
                }
            }
        }
        if order.len() != self.nodes.len() {
            let stuck = indegree
                .iter()
                .find(|(k, d)| **d > 0 && !order.contains(k))
                .map(|(k, _)| k.to_string())
                .unwrap_or_default();
            return Err(PlanError::Cycle(stuck));
        }
        Ok(order)
    }

    /// The action nodes in topological order (by node_key where the plan does not order
    /// them; in node order if it has a cycle, which validation refuses).
    pub fn action_nodes_in_order(&self) -> Vec<&PlanNode> {
        let order =
            self.topological_order().unwrap_or_else(|_| self.nodes.iter().map(|n| n.node_key.as_str()).collect());
        order
            .iter()
            .filter_map(|k| self.nodes.iter().find(|n| n.node_key == *k && n.node_kind == NodeKind::Action))
            .collect()
    }

    pub fn successors<'a>(&'a self, key: &str) -> Vec<&'a str> {
        successors(&self.edges, key)
    }

    pub fn predecessors<'a>(&'a self, key: &str) -> Vec<&'a str> {
        predecessors(&self.edges, key)
    }

    /// Every node that runs before `key` (transitive predecessors).
    pub fn ancestors(&self, key: &str) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        let mut stack = self.predecessors(key);
        while let Some(k) = stack.pop() {
            if out.insert(k) {
                stack.extend(self.predecessors(k));
            }
        }
        out
    }

    /// Nodes with no predecessor: READY on approval.
    pub fn roots(&self) -> Vec<&str> {
        let targets: BTreeSet<&str> = self.edges.iter().map(|e| e.to.as_str()).collect();
        self.nodes.iter().map(|n| n.node_key.as_str()).filter(|k| !targets.contains(k)).collect()
    }

    /// The canonical form the plan hash covers: sorted keys, nodes by key, edges sorted,
    /// `timeout_policy` left out.
    pub fn canonical_form(&self) -> Value {
        let mut nodes: Vec<&PlanNode> = self.nodes.iter().collect();
        nodes.sort_by(|a, b| a.node_key.cmp(&b.node_key));
        let mut edges: Vec<&PlanEdge> = self.edges.iter().collect();
        edges.sort();
        json!({
            "nodes": nodes.iter().map(|n| json!({
                "node_key": n.node_key,
                "node_kind": n.node_kind,
                "action_type": n.action_type,
                "executor_key": n.executor_key,
                "signer_key": n.signer_key,
                "signing_required": n.signing_required,
                "config": n.config,
            })).collect::<Vec<_>>(),
            "edges": edges.iter().map(|e| json!([e.from, e.to])).collect::<Vec<_>>(),
            "risk_controls": self.risk_controls,
        })
    }

    pub fn plan_hash(&self) -> String {
        canonical_hash(&self.canonical_form())
    }
}

/// A CCTP mint bound to its burn (`burn_message` or `burn_message_hash` = `$ref:<burn>.…`, the
/// burn a `cctp_burn` node) agrees with that burn on what only the pair can check, so a template
/// cannot approve a burn whose mint is bound to fail: the same `cctp_version` (absent: 1; a
/// `$ref` is left to run time); the binding its version reads (V1 `burn_message_hash`, V2
/// `burn_message`); the same `decimals` and `destination_domain`; on V2 the same `amount_is`
/// (absent: `burned`) and a mint `max_fee`, when it names one, not below what the burn sends
/// (its `max_fee`, lowered by `risk_controls.cctp_max_fee`).
fn bridge_pairs_agree(plan: &PlanDefinition) -> Result<(), PlanError> {
    use crate::risk::Amount;
    let by_key: BTreeMap<&str, &PlanNode> = plan.nodes.iter().map(|n| (n.node_key.as_str(), n)).collect();
    let text = |n: &PlanNode, k: &str| n.config.get(k).and_then(Value::as_str).map(str::trim).map(str::to_string);
    let is_ref = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| s.trim().starts_with("$ref:"));
    // `None`: decided at run time (a `$ref`).
    let version = |n: &PlanNode| -> Result<Option<u64>, PlanError> {
        match n.config.get("cctp_version") {
            None | Some(Value::Null) => Ok(Some(1)),
            v if is_ref(v) => Ok(None),
            Some(v) => v.as_u64().filter(|v| matches!(v, 1 | 2)).map(Some).ok_or_else(|| PlanError::BadNode {
                node: n.node_key.clone(),
                reason: format!("config.cctp_version {v} is neither 1 nor 2"),
            }),
        }
    };
    let amount = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Amount::parse(s.trim()),
        Some(Value::Number(x)) => Amount::parse(&x.to_string()),
        _ => None,
    };
    for mint in &plan.nodes {
        let bound = ["burn_message", "burn_message_hash"].into_iter().find_map(|key| {
            let r = text(mint, key)?;
            let target = r.strip_prefix("$ref:")?.split_once('.')?.0.to_string();
            Some(target)
        });
        let Some(burn) = bound.and_then(|k| by_key.get(k.as_str()).copied()) else { continue };
        if !burn.action_type.trim().eq_ignore_ascii_case("cctp_burn") {
            continue;
        }
        let bad = |reason: String| PlanError::BadNode { node: mint.node_key.clone(), reason };
        let (Some(vm), Some(vb)) = (version(mint)?, version(burn)?) else { continue };
        if vm != vb {
            return Err(bad(format!(
                "it mints with cctp_version {vm} what {:?} burns with cctp_version {vb}",
                burn.node_key
            )));
        }
        let (key, field) = if vm == 2 { ("burn_message", "message") } else { ("burn_message_hash", "message_hash") };
        if text(mint, key).is_none() {
            return Err(bad(format!(
                "a CCTP V{vm} mint is bound to its burn by {key} ($ref:{}.{field})",
                burn.node_key
            )));
        }
        for k in ["destination_domain", "decimals"] {
            let (m, b) = (mint.config.get(k), burn.config.get(k));
            if let (Some(m), Some(b)) = (m.and_then(Value::as_u64), b.and_then(Value::as_u64)) {
                if m != b {
                    return Err(bad(format!("its {k} {m} is not the burn's {b}")));
                }
            }
        }
        if vm == 2 {
            let amount_is = |n: &PlanNode| text(n, "amount_is").unwrap_or_else(|| "burned".into());
            if amount_is(mint) != amount_is(burn) {
                return Err(bad(format!(
                    "its amount_is {:?} is not the burn's {:?}: the mint would refuse the burn's message",
                    amount_is(mint),
                    amount_is(burn)
                )));
            }
            let sent = match (amount(burn.config.get("max_fee")), amount(plan.risk_controls.get("cctp_max_fee"))) {
                (Some(b), Some(r)) if r < b => Some(r),
                (b, _) => b,
            };
            if let (Some(m), Some(b)) = (amount(mint.config.get("max_fee")), sent) {
                if m < b {
                    return Err(bad(format!(
                        "its max_fee {m} is below the {b} the burn sends as maxFee: the mint would refuse the message"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Why an integer beyond ±2^53 is refused.
pub fn inexact(path: &str) -> String {
    format!(
        "{path} is an integer outside ±(2^53 - 1), which executors cannot receive exactly (the wire carries doubles); \
         write it as a decimal string"
    )
}

impl PlanNode {
    fn validate(&self) -> Result<(), PlanError> {
        let bad = |reason: &str| PlanError::BadNode { node: self.node_key.clone(), reason: reason.into() };
        if self.action_type.is_empty() || self.action_type.len() > 128 {
            return Err(bad("action_type must be 1-128 characters"));
        }
        if (self.node_kind == NodeKind::Manual) != self.action_type.starts_with("manual_") {
            return Err(bad("manual nodes, and only they, have an action_type starting with manual_"));
        }
        if self.executor_key.is_empty() || self.executor_key.len() > 128 {
            return Err(bad("executor_key must be 1-128 characters"));
        }
        if self.signing_required && self.signer_key.as_deref().is_none_or(str::is_empty) {
            return Err(bad("signing_required needs a signer_key"));
        }
        if self.node_kind == NodeKind::Manual && self.signing_required {
            return Err(bad("a manual node cannot require signing"));
        }
        if !self.config.is_object() {
            return Err(bad("config must be an object"));
        }
        if !self.timeout_policy.is_object() {
            return Err(bad("timeout_policy must be an object"));
        }
        for (field, v) in [("config", &self.config), ("timeout_policy", &self.timeout_policy)] {
            if let Some(path) = crate::protocol::inexact_integer(v) {
                return Err(bad(&inexact(&format!("{field}{path}"))));
            }
        }
        if let Some(v) = self.timeout_policy.get("observe_seconds") {
            if !v.as_f64().is_some_and(|s| (0.0..=MAX_OBSERVE_SECONDS).contains(&s)) {
                return Err(bad("timeout_policy.observe_seconds must be a number between 0 and 2592000 (30 days)"));
            }
        }
        Ok(())
    }
}

pub fn successors<'a>(edges: &'a [PlanEdge], key: &str) -> Vec<&'a str> {
    edges.iter().filter(|e| e.from == key).map(|e| e.to.as_str()).collect()
}

pub fn predecessors<'a>(edges: &'a [PlanEdge], key: &str) -> Vec<&'a str> {
    edges.iter().filter(|e| e.to == key).map(|e| e.from.as_str()).collect()
}

/// After `completed` reaches COMPLETED: the successors that become READY now. Fan-in: a
/// successor activates only when every one of its predecessors is COMPLETED or SKIPPED.
pub fn activated_successors<'a>(
    edges: &'a [PlanEdge],
    completed: &str,
    states: &HashMap<&str, NodeState>,
) -> Vec<&'a str> {
    let mut out: Vec<&str> = successors(edges, completed)
        .into_iter()
        .filter(|s| states.get(s) == Some(&NodeState::Blocked))
        .filter(|s| {
            predecessors(edges, s)
                .iter()
                .all(|p| matches!(states.get(p), Some(NodeState::Completed | NodeState::Skipped)))
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn node(key: &str) -> PlanNode {
        PlanNode {
            node_key: key.into(),
            node_kind: NodeKind::Action,
            action_type: "transfer".into(),
            executor_key: "exec.sim.transfer".into(),
            signer_key: None,
            signing_required: false,
            config: json!({}),
            timeout_policy: json!({}),
        }
    }

    fn edge(a: &str, b: &str) -> PlanEdge {
        PlanEdge { from: a.into(), to: b.into() }
    }

    fn diamond() -> PlanDefinition {
        PlanDefinition {
            nodes: vec![node("a"), node("b"), node("c"), node("d")],
            edges: vec![edge("a", "b"), edge("a", "c"), edge("b", "d"), edge("c", "d")],
            risk_controls: json!({}),
        }
    }

    /// A CCTP mint must agree with the burn it is bound to: version, binding, `amount_is`,
    /// `max_fee` and destination domain; a V1 pair as templates were written before V2 passes.
    #[test]
    fn a_cctp_mint_that_disagrees_with_its_burn_is_refused() {
        let pair = |burn: Value, mint: Value| {
            let mut b = node("burn");
            b.action_type = "cctp_burn".into();
            b.config = burn;
            let mut m = node("mint");
            m.config = mint;
            PlanDefinition { nodes: vec![b, m], edges: vec![edge("burn", "mint")], risk_controls: json!({}) }
                .validate()
                .err()
                .map(|e| e.to_string())
        };
        let v2 = json!({"cctp_version": 2, "max_fee": "0.05", "amount_is": "delivered", "destination_domain": 1});
        let mint = |extra: Value| {
            let mut m = json!({"cctp_version": 2, "burn_message": "$ref:burn.message", "amount_is": "delivered",
                               "destination_domain": 1});
            m.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            m
        };
        assert_eq!(pair(v2.clone(), mint(json!({"max_fee": "0.05"}))), None);
        assert_eq!(pair(json!({}), json!({"burn_message_hash": "$ref:burn.message_hash"})), None, "V1 as before");
        let refused = |burn: Value, m: Value, why: &str| {
            let e = pair(burn, m).expect("refused");
            assert!(e.contains(why), "{e}");
        };
        refused(v2.clone(), mint(json!({"cctp_version": 1})), "cctp_version");
        refused(v2.clone(), mint(json!({"amount_is": "burned"})), "amount_is");
        refused(v2.clone(), mint(json!({"max_fee": "0.01"})), "max_fee");
        refused(v2.clone(), mint(json!({"destination_domain": 3})), "destination_domain");
        refused(v2.clone(), json!({"cctp_version": 2, "burn_message_hash": "$ref:burn.message_hash"}), "burn_message");
        refused(json!({}), json!({"burn_message": "$ref:burn.message"}), "burn_message_hash");
        refused(
            json!({"decimals": 6}),
            json!({"burn_message_hash": "$ref:burn.message_hash", "decimals": 18}),
            "decimals",
        );
        // What the burn sends is its max_fee lowered by the plan's cctp_max_fee.
        let mut lowered = PlanDefinition {
            nodes: vec![
                PlanNode { action_type: "cctp_burn".into(), config: v2.clone(), ..node("burn") },
                PlanNode { config: mint(json!({"max_fee": "0.01"})), ..node("mint") },
            ],
            edges: vec![edge("burn", "mint")],
            risk_controls: json!({"cctp_max_fee": "0.01"}),
        };
        assert!(lowered.validate().is_ok(), "the mint's cap covers what the burn sends");
        lowered.risk_controls = json!({});
        assert!(lowered.validate().is_err(), "the burn sends 0.05");
        // A leftover V1 binding beside the V2 one, and a version decided at run time, pass.
        let both = mint(json!({"burn_message_hash": "$ref:burn.message_hash"}));
        assert_eq!(pair(v2.clone(), both), None);
        assert_eq!(pair(v2, mint(json!({"cctp_version": "$ref:burn.cctp_version"}))), None);
    }

    #[test]
    fn diamond_validates_and_orders() {
        let p = diamond();
        p.validate().unwrap();
        assert_eq!(p.topological_order().unwrap(), vec!["a", "b", "c", "d"]);
        assert_eq!(p.roots(), vec!["a"]);
        assert_eq!(p.successors("a"), vec!["b", "c"]);
    }

    #[test]
    fn invalid_plans_are_refused() {
        let mut p = diamond();
        p.edges.push(edge("d", "a"));
        assert!(matches!(p.validate(), Err(PlanError::Cycle(_))));
        let mut p = diamond();
        p.nodes.push(node("a"));
        assert_eq!(p.validate(), Err(PlanError::DuplicateKey("a".into())));
        let mut p = diamond();
        p.edges.push(edge("a", "zz"));
        assert!(matches!(p.validate(), Err(PlanError::UnresolvedEdge { .. })));
        let mut p = diamond();
        p.nodes[3].config = json!({"x": "$ref:c.txid"});
        p.validate().unwrap();
        p.nodes[1].config = json!({"x": "$ref:c.txid"});
        assert!(matches!(p.validate(), Err(PlanError::BadNode { .. })));
        let mut p = diamond();
        p.nodes[0].signing_required = true;
        assert!(matches!(p.validate(), Err(PlanError::BadNode { .. })));
        let mut p = diamond();
        p.nodes[0].node_kind = NodeKind::Manual;
        assert!(matches!(p.validate(), Err(PlanError::BadNode { .. })));
        assert_eq!(
            PlanDefinition { nodes: vec![], edges: vec![], risk_controls: json!({}) }.validate(),
            Err(PlanError::Empty)
        );
    }

    #[test]
    fn fan_in_waits_for_every_predecessor() {
        let p = diamond();
        let mut states: HashMap<&str, NodeState> = [
            ("a", NodeState::Completed),
            ("b", NodeState::Completed),
            ("c", NodeState::Observing),
            ("d", NodeState::Blocked),
        ]
        .into();
        assert!(activated_successors(&p.edges, "b", &states).is_empty());
        states.insert("c", NodeState::Completed);
        assert_eq!(activated_successors(&p.edges, "c", &states), vec!["d"]);
    }

    #[test]
    fn hash_ignores_timeout_policy_and_order() {
        let p = diamond();
        let mut q = diamond();
        q.nodes.reverse();
        q.edges.reverse();
        q.nodes[0].timeout_policy = json!({"observe_seconds": 60});
        assert_eq!(p.plan_hash(), q.plan_hash());
        q.nodes[0].config = json!({"sim": {"submit": "fail"}});
        assert_ne!(p.plan_hash(), q.plan_hash());
    }

    /// Random DAGs: edges only go from a lower to a higher index, so the graph is acyclic.
    fn arb_dag() -> impl Strategy<Value = PlanDefinition> {
        (1usize..12).prop_flat_map(|n| {
            proptest::collection::vec((0..n, 0..n), 0..(n * 2)).prop_map(move |pairs| {
                let nodes = (0..n).map(|i| node(&format!("n{i:02}"))).collect();
                let mut edges: Vec<PlanEdge> = pairs
                    .into_iter()
                    .filter(|(a, b)| a < b)
                    .map(|(a, b)| edge(&format!("n{a:02}"), &format!("n{b:02}")))
                    .collect();
                edges.sort();
                edges.dedup();
                PlanDefinition { nodes, edges, risk_controls: json!({}) }
            })
        })
    }

    proptest! {
        #[test]
        fn random_dags_validate_and_topo_order_respects_edges(p in arb_dag()) {
            p.validate().unwrap();
            let order = p.topological_order().unwrap();
            prop_assert_eq!(order.len(), p.nodes.len());
            let pos: HashMap<&str, usize> = order.iter().enumerate().map(|(i, k)| (*k, i)).collect();
            for e in &p.edges {
                prop_assert!(pos[e.from.as_str()] < pos[e.to.as_str()]);
            }
            prop_assert!(!p.roots().is_empty());
        }

        #[test]
        fn a_back_edge_makes_a_cycle(p in arb_dag()) {
            if let Some(e) = p.edges.first().cloned() {
                let mut q = p.clone();
                // Close the loop from the edge's target back to its source.
                q.edges.push(edge(&e.to, &e.from));
                prop_assert!(matches!(q.validate(), Err(PlanError::Cycle(_))));
            }
        }

        #[test]
        fn running_in_topological_order_activates_every_node_once(p in arb_dag()) {
            // Simulate: roots READY, complete nodes as they become READY.
            let mut states: HashMap<&str, NodeState> =
                p.nodes.iter().map(|n| (n.node_key.as_str(), NodeState::Blocked)).collect();
            let mut ready: Vec<&str> = p.roots();
            let mut activations = 0usize;
            for r in &ready { states.insert(r, NodeState::Ready); }
            while let Some(k) = ready.pop() {
                // Only a node whose predecessors are all done may run.
                for pred in p.predecessors(k) {
                    prop_assert_eq!(states[pred], NodeState::Completed);
                }
                states.insert(k, NodeState::Completed);
                for s in activated_successors(&p.edges, k, &states) {
                    states.insert(s, NodeState::Ready);
                    activations += 1;
                    ready.push(s);
                }
            }
            prop_assert!(states.values().all(|s| *s == NodeState::Completed));
            prop_assert_eq!(activations + p.roots().len(), p.nodes.len());
        }

        #[test]
        fn plan_hash_is_stable_under_permutation(p in arb_dag(), seed in any::<u64>()) {
            let mut q = p.clone();
            let n = q.nodes.len();
            q.nodes.rotate_left((seed as usize) % n);
            q.edges.reverse();
            prop_assert_eq!(p.plan_hash(), q.plan_hash());
        }
    }
}
