//! Stuck-node diagnosis (docs/architecture.md §13): classifies a node into the runbook's cases from
//! its state, markers, timing and observe history, and names the required action. It never
//! resolves anything.

use serde::Serialize;
use serde_json::Value;

use crate::codes::RunbookCase;
use crate::markers::{
    LATE_EFFECT, LEGACY_RECONCILIATION_GATED, MANUAL_REVIEW_REQUIRED, STATUS_UNMAPPED, SUBMIT_ATTEMPT_PENDING,
};
use crate::state::{NodeState, RequestState};

/// What diagnosis looks at (timing by the database's clock).
#[derive(Debug, Clone)]
pub struct NodeFacts {
    pub node_state: NodeState,
    pub request_state: RequestState,
    pub provider_refs: Value,
    pub provider_ref_id: Option<String>,
    pub seconds_since_started: Option<f64>,
    pub grace_seconds: f64,
    pub observe_count: i32,
    /// Submit calls of the current attempt that ended without an answer (transport/timeout).
    pub submit_transport_failures: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// `C1`, `C2`, `C3a`, `C3b`, `C5`, `C6`, `C7`, or `none` when the node is not stuck.
    pub case: &'static str,
    pub title: &'static str,
    pub required_action: &'static str,
    /// Other cases the evidence points at, for the operator to rule out.
    pub also_consider: Vec<&'static str>,
}

/// The `case` of a node that is not stuck.
pub const NOT_STUCK: &str = "none";

/// Past the grace plus this (recovery's poll, backoff and venue lookback), a C1 node that
/// recovery has not decided is overdue: recovery is not doing its job for it.
pub const RECOVERY_OVERDUE_AFTER_GRACE_SECONDS: f64 = 300.0;

/// Observations after which an OBSERVING node counts as perpetual (C5).
pub const PERPETUAL_OBSERVE_COUNT: i32 = 50;
/// Seconds of observing after which a node counts as perpetual (C5).
pub const PERPETUAL_OBSERVE_SECONDS: f64 = 3600.0;

fn flag(refs: &Value, key: &str) -> bool {
    refs.get(key).is_some_and(|v| !v.is_null() && v != &Value::Bool(false))
}

pub fn diagnose(f: &NodeFacts) -> Diagnosis {
    let refs = &f.provider_refs;
    let pending = flag(refs, SUBMIT_ATTEMPT_PENDING);
    let gated = flag(refs, LEGACY_RECONCILIATION_GATED);
    let review = refs.get(MANUAL_REVIEW_REQUIRED).and_then(Value::as_str);
    let within_grace = f.seconds_since_started.is_some_and(|s| s <= f.grace_seconds);
    let never_persisted = f.provider_ref_id.is_none();
    let d = |case: RunbookCase| Diagnosis {
        case: case.as_str(),
        title: case.title(),
        required_action: case.action(),
        also_consider: Vec::new(),
    };
    let mut out = match f.node_state {
        NodeState::Submitting if pending && (within_grace || f.request_state == RequestState::Executing) => {
            d(RunbookCase::C1)
        }
        NodeState::Unknown if gated && review == Some("reconciliation_auth_failed") => d(RunbookCase::C3b),
        NodeState::Unknown
            if pending && within_grace && review.is_none() && f.request_state == RequestState::Executing =>
        {
            Diagnosis {
                required_action:
                    "Wait: the submit's outcome is unknown and recovery asks the venue after the lane's grace.",
                ..d(RunbookCase::C1)
            }
        }
        NodeState::Unknown if pending => d(RunbookCase::C2),
        // Gated without the auth case: markers missing (an executor may hand it over with a
        // review marker of its own, e.g. `reconciliation_markers_missing`).
        NodeState::Unknown if gated => d(RunbookCase::C3a),
        NodeState::Observing
            if flag(refs, STATUS_UNMAPPED)
                || f.observe_count >= PERPETUAL_OBSERVE_COUNT
                || f.seconds_since_started.is_some_and(|s| s >= PERPETUAL_OBSERVE_SECONDS) =>
        {
            d(RunbookCase::C5)
        }
        NodeState::Unknown if never_persisted => d(RunbookCase::C6),
        NodeState::Unknown | NodeState::Observing | NodeState::Submitted => d(RunbookCase::C7),
        // Not stuck, but a failed node of a movement that waits for a person: say what to do.
        NodeState::Failed if f.request_state == RequestState::ManualIntervention && flag(refs, LATE_EFFECT) => {
            Diagnosis {
                case: NOT_STUCK,
                title: "Failed, with a late effect: money may have moved",
                required_action: "An executor reported an effect after this node ended: do not retry it. Reconcile \
                    with the venue or chain (its provider refs and history name the reference), then cancel the \
                    movement with the runbook case and evidence of what moved.",
                also_consider: Vec::new(),
            }
        }
        NodeState::Failed if f.request_state == RequestState::ManualIntervention => Diagnosis {
            case: NOT_STUCK,
            title: "Failed: the movement waits for a person",
            required_action: "This node failed and its movement waits in MANUAL_INTERVENTION (check the movement's \
                other nodes too). Read its error and history. If the venue or chain shows no effect of the failed \
                attempt, retry the node (the movement runs again); if the failure is final, cancel the movement \
                with a reason.",
            also_consider: Vec::new(),
        },
        _ => Diagnosis {
            case: NOT_STUCK,
            title: "Not stuck",
            required_action: "Nothing to do: the node is not in a stuck state.",
            also_consider: Vec::new(),
        },
    };
    let case = RunbookCase::parse(out.case);
    if matches!(case, Some(RunbookCase::C2 | RunbookCase::C7)) && f.node_state == NodeState::Unknown && never_persisted
    {
        out.also_consider
            .push("C6: no venue reference was ever persisted — check the console; if absent, cancel with C6 evidence");
    }
    if f.submit_transport_failures > 0 && case == Some(RunbookCase::C2) {
        out.also_consider.push("C6: the submit call itself failed in transport; the venue may never have received it");
    }
    // C1 "imminent" only while recovery could still be on its way.
    let overdue = f.seconds_since_started.is_some_and(|s| s > f.grace_seconds + RECOVERY_OVERDUE_AFTER_GRACE_SECONDS);
    if case == Some(RunbookCase::C1) && overdue {
        out.title = "Recovery overdue";
        out.required_action = "Recovery should have decided this attempt by now: check that qtg-recovery is \
            running, healthy and serving this executor key (its registry), and read its logs. Do not act on the \
            venue until it has decided or the node is escalated.";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts(state: NodeState, refs: Value) -> NodeFacts {
        NodeFacts {
            node_state: state,
            request_state: RequestState::Executing,
            provider_refs: refs,
            provider_ref_id: Some("order-1".into()),
            seconds_since_started: Some(10.0),
            grace_seconds: 90.0,
            observe_count: 1,
            submit_transport_failures: 0,
        }
    }

    #[test]
    fn a_failed_node_holding_its_movement_says_what_to_do() {
        let f = NodeFacts { request_state: RequestState::ManualIntervention, ..facts(NodeState::Failed, json!({})) };
        let d = diagnose(&f);
        assert_eq!(d.case, NOT_STUCK);
        assert!(d.required_action.contains("retry the node") && !d.required_action.contains("resume"), "{d:?}");
        let late = NodeFacts {
            request_state: RequestState::ManualIntervention,
            ..facts(NodeState::Failed, json!({"__late_effect": {"reported": "filled"}}))
        };
        let d = diagnose(&late);
        assert!(d.required_action.contains("do not retry") && d.required_action.contains("cancel"), "{d:?}");
        let done = NodeFacts { request_state: RequestState::Failed, ..facts(NodeState::Failed, json!({})) };
        assert!(diagnose(&done).required_action.starts_with("Nothing to do"));
    }

    #[test]
    fn the_runbook_cases() {
        let pending = json!({"__submit_attempt_pending": true, "__submit_attempt_started_at": "t"});
        assert_eq!(diagnose(&facts(NodeState::Submitting, pending.clone())).case, "C1");
        assert_eq!(diagnose(&facts(NodeState::Submitting, pending.clone())).title, "Recovery imminent");
        // Past the grace and recovery's margin, a SUBMITTING node recovery never decided is overdue.
        let mut overdue = facts(NodeState::Submitting, pending.clone());
        overdue.seconds_since_started = Some(90.0 + RECOVERY_OVERDUE_AFTER_GRACE_SECONDS + 1.0);
        let d = diagnose(&overdue);
        assert_eq!((d.case, d.title), ("C1", "Recovery overdue"));
        assert!(d.required_action.contains("qtg-recovery"));
        assert_eq!(diagnose(&facts(NodeState::Unknown, pending.clone())).case, "C1");
        let mut late = facts(NodeState::Unknown, pending.clone());
        late.seconds_since_started = Some(1000.0);
        assert_eq!(diagnose(&late).case, "C2");
        let auth = json!({
            "__legacy_reconciliation_gated": true, "__manual_review_required": "reconciliation_auth_failed",
            "__submit_attempt_pending": true
        });
        assert_eq!(diagnose(&facts(NodeState::Unknown, auth)).case, "C3b");
        assert_eq!(diagnose(&facts(NodeState::Unknown, json!({"__legacy_reconciliation_gated": true}))).case, "C3a");
        let handed = json!({
            "__legacy_reconciliation_gated": true, "__manual_review_required": "reconciliation_markers_missing"
        });
        assert_eq!(diagnose(&facts(NodeState::Unknown, handed)).case, "C3a");
        let mut perpetual = facts(NodeState::Observing, json!({}));
        perpetual.observe_count = 60;
        assert_eq!(diagnose(&perpetual).case, "C5");
        let unmapped = json!({"__status_unmapped": {"kind": "withdrawal", "code": 99}});
        assert_eq!(diagnose(&facts(NodeState::Observing, unmapped)).case, "C5");
        assert_eq!(diagnose(&facts(NodeState::Observing, json!({"__status_unmapped": null}))).case, "C7");
        let mut lost = facts(NodeState::Unknown, json!({}));
        lost.provider_ref_id = None;
        assert_eq!(diagnose(&lost).case, "C6");
        assert_eq!(diagnose(&facts(NodeState::Observing, json!({}))).case, "C7");
        assert_eq!(diagnose(&facts(NodeState::Completed, json!({}))).case, "none");
        let mut c2_lost = late.clone();
        c2_lost.provider_ref_id = None;
        assert!(!diagnose(&c2_lost).also_consider.is_empty(), "C2 without a venue reference points at C6");
    }
}
