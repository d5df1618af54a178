//! Request-state derivation (docs/architecture.md §7.3, "no stranded money"): the request's state as a
//! function of its nodes. Approve, advance, recovery, cancel and complete-manual all re-derive.

use crate::codes::OBSERVATION_TIMEOUT;
use crate::plan::NodeKind;
use crate::state::{NodeState, RequestState};

/// What derivation needs to know of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub kind: NodeKind,
    pub state: NodeState,
    pub error_code: Option<String>,
    /// `provider_refs` carries `__manual_review_required`.
    pub manual_review_required: bool,
    /// The venue accepted (or may have accepted) a submit of the current attempt.
    pub submit_accepted: bool,
    /// `provider_refs` carries `__late_effect`: an effect reported after the node ended.
    pub late_effect: bool,
}

impl NodeView {
    /// A node a person must look at: FAILED, or an UNKNOWN that recovery can no longer decide
    /// (observation timeout or an executor's review marker).
    pub fn handed_to_person(&self) -> bool {
        match self.state {
            NodeState::Failed => true,
            NodeState::Unknown => {
                self.manual_review_required || self.error_code.as_deref() == Some(OBSERVATION_TIMEOUT)
            }
            _ => false,
        }
    }

    fn in_flight(&self) -> bool {
        matches!(self.state, NodeState::Submitting | NodeState::Submitted | NodeState::Observing)
            || (self.state == NodeState::Unknown && !self.handed_to_person())
    }
}

/// `None` means "no change".
pub fn derive_request_state(nodes: &[NodeView]) -> Option<RequestState> {
    if nodes.is_empty() {
        return None;
    }
    // (1) Everything done.
    if nodes.iter().all(|n| matches!(n.state, NodeState::Completed | NodeState::Skipped)) {
        return Some(RequestState::Completed);
    }
    // (2) A side effect is in flight or recovery may still resolve it.
    if nodes.iter().any(NodeView::in_flight) {
        return Some(RequestState::Executing);
    }
    // (2b) An effect reported for a node already FAILED or CANCELLED: money may have moved.
    if nodes.iter().any(|n| n.late_effect) {
        return Some(RequestState::ManualIntervention);
    }
    // (3) A person must decide where money may have moved.
    let handed: Vec<&NodeView> = nodes.iter().filter(|n| n.handed_to_person()).collect();
    if !handed.is_empty() {
        let side_effect_done = nodes.iter().any(|n| n.kind == NodeKind::Action && n.state == NodeState::Completed);
        if side_effect_done || handed.iter().any(|n| n.submit_accepted) {
            return Some(RequestState::ManualIntervention);
        }
        // (4) Failed before anything moved.
        if handed.iter().any(|n| n.state == NodeState::Failed) {
            return Some(RequestState::Failed);
        }
    }
    let non_manual_active = nodes.iter().any(|n| n.kind != NodeKind::Manual && n.state.is_active());
    // (5) Only a person can move it on.
    let manual_ready = nodes.iter().any(|n| n.kind == NodeKind::Manual && n.state == NodeState::Ready);
    if manual_ready && !non_manual_active {
        return Some(RequestState::WaitingManualAction);
    }
    // (6) Runnable work remains.
    if non_manual_active {
        return Some(RequestState::Executing);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(kind: NodeKind, state: NodeState) -> NodeView {
        NodeView {
            kind,
            state,
            error_code: None,
            manual_review_required: false,
            submit_accepted: matches!(
                state,
                NodeState::Submitted | NodeState::Observing | NodeState::Completed | NodeState::Unknown
            ),
            late_effect: false,
        }
    }

    use NodeKind::*;
    use NodeState::*;

    #[test]
    fn seed_rules() {
        assert_eq!(
            derive_request_state(&[node(Action, Completed), node(Observe, Skipped)]),
            Some(RequestState::Completed)
        );
        assert_eq!(
            derive_request_state(&[node(Action, Completed), node(Action, Observing)]),
            Some(RequestState::Executing)
        );
        assert_eq!(
            derive_request_state(&[node(Action, Completed), node(Action, Failed)]),
            Some(RequestState::ManualIntervention)
        );
        let mut failed = node(Action, Failed);
        failed.submit_accepted = false;
        assert_eq!(derive_request_state(&[failed.clone(), node(Action, Blocked)]), Some(RequestState::Failed));
        assert_eq!(
            derive_request_state(&[node(Action, Completed), node(Manual, Ready)]),
            Some(RequestState::WaitingManualAction)
        );
        assert_eq!(derive_request_state(&[node(Action, Ready), node(Manual, Ready)]), Some(RequestState::Executing));
        assert_eq!(derive_request_state(&[node(Action, Blocked)]), None);
        assert_eq!(derive_request_state(&[]), None);
    }

    #[test]
    fn unknown_stays_with_recovery_until_handed_over() {
        let unknown = node(Action, Unknown);
        assert_eq!(derive_request_state(&[node(Action, Completed), unknown.clone()]), Some(RequestState::Executing));
        let mut timed_out = unknown.clone();
        timed_out.error_code = Some(OBSERVATION_TIMEOUT.into());
        assert_eq!(derive_request_state(&[node(Action, Completed), timed_out]), Some(RequestState::ManualIntervention));
        let mut review = unknown;
        review.manual_review_required = true;
        // No completed action node, but its own submit happened.
        assert_eq!(derive_request_state(&[review, node(Action, Blocked)]), Some(RequestState::ManualIntervention));
    }

    #[test]
    fn a_failure_waits_for_in_flight_siblings() {
        let mut failed = node(Action, Failed);
        failed.submit_accepted = false;
        assert_eq!(derive_request_state(&[failed, node(Action, Submitted)]), Some(RequestState::Executing));
    }

    fn arb_node() -> impl Strategy<Value = NodeView> {
        (
            proptest::sample::select(vec![Action, Observe, Manual]),
            proptest::sample::select(NodeState::ALL),
            proptest::option::of(Just(OBSERVATION_TIMEOUT.to_string())),
            any::<bool>(),
            any::<bool>(),
            proptest::bool::weighted(0.05),
        )
            .prop_map(|(kind, state, error_code, manual_review_required, submit_accepted, late_effect)| {
                NodeView { kind, state, error_code, manual_review_required, submit_accepted, late_effect }
            })
    }

    proptest! {
        #[test]
        fn completed_only_when_every_node_is_done(nodes in proptest::collection::vec(arb_node(), 0..8)) {
            let derived = derive_request_state(&nodes);
            let all_done = !nodes.is_empty() && nodes.iter().all(|n| matches!(n.state, Completed | Skipped));
            prop_assert_eq!(derived == Some(RequestState::Completed), all_done);
        }

        #[test]
        fn money_in_flight_never_ends_the_request(nodes in proptest::collection::vec(arb_node(), 1..8)) {
            if nodes.iter().any(|n| matches!(n.state, Submitting | Submitted | Observing)) {
                prop_assert_eq!(derive_request_state(&nodes), Some(RequestState::Executing));
            }
        }

        #[test]
        fn a_possible_side_effect_never_derives_plain_failed(nodes in proptest::collection::vec(arb_node(), 1..8)) {
            let side_effect = nodes.iter().any(|n| n.kind == Action && n.state == Completed)
                || nodes.iter().any(|n| n.handed_to_person() && n.submit_accepted);
            if side_effect {
                prop_assert_ne!(derive_request_state(&nodes), Some(RequestState::Failed));
            }
        }

        #[test]
        fn a_late_effect_calls_a_person_once_nothing_is_in_flight(
            nodes in proptest::collection::vec(arb_node(), 1..8)
        ) {
            let in_flight = nodes.iter().any(NodeView::in_flight);
            let all_done = nodes.iter().all(|n| matches!(n.state, Completed | Skipped));
            if nodes.iter().any(|n| n.late_effect) && !in_flight && !all_done {
                prop_assert_eq!(derive_request_state(&nodes), Some(RequestState::ManualIntervention));
            }
        }

        #[test]
        fn derivation_ignores_node_order(mut nodes in proptest::collection::vec(arb_node(), 1..8)) {
            let before = derive_request_state(&nodes);
            nodes.reverse();
            prop_assert_eq!(derive_request_state(&nodes), before);
        }
    }
}
