//! Node and request states (docs/architecture.md §7.1) and the one transition table every state change
//! is checked against.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

macro_rules! string_enum {
    ($name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownState;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(UnknownState(other.to_string())),
                }
            }
        }

        /// A state column as the store reads it (`#[sqlx(try_from = "String")]`).
        impl TryFrom<String> for $name {
            type Error = UnknownState;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }
    };
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?}")]
pub struct UnknownState(pub String);

/// The state an executor's answer moves its node to. On the wire it is any [`NodeState`]; in
/// process each method has its own, narrower type (docs/architecture.md §7.6), so a local
/// executor cannot even spell an answer the contract forbids, and a remote one is checked once,
/// where its answer enters ([`crate::ExecutionResult::narrow`]).
pub trait NextState: Copy + fmt::Debug + PartialEq + Into<NodeState> + TryFrom<NodeState> {
    /// Every method may answer FAILED.
    const FAILED: Self;
}

impl NextState for NodeState {
    const FAILED: Self = NodeState::Failed;
}

macro_rules! next_state {
    ($(#[$doc:meta])* $name:ident { $($variant:ident),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant),+
        }

        impl From<$name> for NodeState {
            fn from(s: $name) -> NodeState {
                match s {
                    $($name::$variant => NodeState::$variant),+
                }
            }
        }

        /// The state an answer carries, if this method may answer it (else the state back).
        impl TryFrom<NodeState> for $name {
            type Error = NodeState;
            fn try_from(s: NodeState) -> Result<Self, NodeState> {
                match s {
                    $(NodeState::$variant => Ok($name::$variant),)+
                    other => Err(other),
                }
            }
        }

        impl NextState for $name {
            const FAILED: Self = $name::Failed;
        }
    };
}

next_state!(
    /// What a refusal of preflight or prepare answers: FAILED, and nothing else.
    Refused { Failed }
);

next_state!(
    /// What submit and recover may answer.
    AfterSubmit { Submitted, Observing, Completed, Failed, Unknown }
);

next_state!(
    /// What observe may answer.
    AfterObserve { Observing, Completed, Failed, Unknown }
);

/// An observe answer is also one submit or recover may give (an executor shares the code).
impl From<AfterObserve> for AfterSubmit {
    fn from(s: AfterObserve) -> AfterSubmit {
        match s {
            AfterObserve::Observing => AfterSubmit::Observing,
            AfterObserve::Completed => AfterSubmit::Completed,
            AfterObserve::Failed => AfterSubmit::Failed,
            AfterObserve::Unknown => AfterSubmit::Unknown,
        }
    }
}

impl From<Refused> for AfterSubmit {
    fn from(_: Refused) -> AfterSubmit {
        AfterSubmit::Failed
    }
}

impl From<Refused> for AfterObserve {
    fn from(_: Refused) -> AfterObserve {
        AfterObserve::Failed
    }
}

/// A stored name (a node kind, a lane) that is none of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {0} {1:?}")]
pub struct UnknownName(pub &'static str, pub String);

string_enum!(NodeState {
    Blocked => "BLOCKED",
    Ready => "READY",
    Preparing => "PREPARING",
    AwaitingSignature => "AWAITING_SIGNATURE",
    Submitting => "SUBMITTING",
    Submitted => "SUBMITTED",
    Observing => "OBSERVING",
    Completed => "COMPLETED",
    Failed => "FAILED",
    Unknown => "UNKNOWN",
    Skipped => "SKIPPED",
    Cancelled => "CANCELLED",
});

string_enum!(RequestState {
    PendingApproval => "PENDING_APPROVAL",
    Approved => "APPROVED",
    Executing => "EXECUTING",
    WaitingManualAction => "WAITING_MANUAL_ACTION",
    ManualIntervention => "MANUAL_INTERVENTION",
    Completed => "COMPLETED",
    Failed => "FAILED",
    Expired => "EXPIRED",
    Rejected => "REJECTED",
    Cancelled => "CANCELLED",
});

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("node transition {from} -> {to} is not allowed")]
    Node { from: NodeState, to: NodeState },
    #[error("request transition {from} -> {to} is not allowed")]
    Request { from: RequestState, to: RequestState },
}

impl NodeState {
    /// No transition leaves these.
    pub fn is_terminal(self) -> bool {
        matches!(self, NodeState::Completed | NodeState::Skipped | NodeState::Cancelled)
    }

    /// READY…OBSERVING: the node is runnable or a step of it is under way.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            NodeState::Ready
                | NodeState::Preparing
                | NodeState::AwaitingSignature
                | NodeState::Submitting
                | NodeState::Submitted
                | NodeState::Observing
        )
    }

    /// The allowed-transition table. Same-state pairs are polls, not transitions.
    pub fn can_transition_to(self, to: NodeState) -> bool {
        use NodeState::*;
        match self {
            Blocked => matches!(to, Ready | Skipped | Cancelled),
            // READY -> COMPLETED is complete-manual on a manual node.
            Ready => matches!(to, Preparing | Completed | Skipped | Cancelled),
            // PREPARING / AWAITING_SIGNATURE -> CANCELLED: an operator's cancel wins while
            // nothing is armed (the arm's compare-and-set then matches nothing).
            Preparing => matches!(to, AwaitingSignature | Submitting | Failed | Cancelled),
            // AWAITING_SIGNATURE -> PREPARING: an expired lease re-claimed (nothing was armed).
            AwaitingSignature => matches!(to, Preparing | Submitting | Failed | Cancelled),
            // SUBMITTING -> CANCELLED only with runbook case C6 evidence (API guard).
            Submitting => matches!(to, Submitted | Observing | Completed | Failed | Unknown | Cancelled),
            Submitted => matches!(to, Observing | Completed | Failed | Unknown),
            Observing => matches!(to, Completed | Failed | Unknown),
            Unknown => matches!(to, Submitted | Observing | Completed | Failed | Cancelled),
            // FAILED -> READY is an operator retry.
            Failed => matches!(to, Ready | Cancelled),
            Completed | Skipped | Cancelled => false,
        }
    }

    pub fn check_transition(self, to: NodeState) -> Result<(), TransitionError> {
        if self.can_transition_to(to) {
            Ok(())
        } else {
            Err(TransitionError::Node { from: self, to })
        }
    }
}

impl RequestState {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RequestState::Completed | RequestState::Expired | RequestState::Rejected | RequestState::Cancelled
        )
    }

    pub fn can_transition_to(self, to: RequestState) -> bool {
        use RequestState::*;
        match self {
            PendingApproval => matches!(to, Approved | Rejected | Expired | Cancelled),
            Approved => {
                matches!(to, Executing | WaitingManualAction | ManualIntervention | Completed | Failed | Cancelled)
            }
            Executing => matches!(to, WaitingManualAction | ManualIntervention | Completed | Failed | Cancelled),
            WaitingManualAction => {
                matches!(to, Executing | ManualIntervention | Completed | Failed | Cancelled)
            }
            // Resume moves MANUAL_INTERVENTION back to EXECUTING so recovery sweeps again.
            ManualIntervention => matches!(to, Executing | Cancelled),
            // FAILED returns to EXECUTING only through a node retry; a late effect (an
            // executor reporting money moved for a node already FAILED) calls a person.
            Failed => matches!(to, Executing | ManualIntervention | Cancelled),
            // The one exit from a terminal state: a late effect on a cancelled movement.
            Cancelled => matches!(to, ManualIntervention),
            Completed | Expired | Rejected => false,
        }
    }

    pub fn check_transition(self, to: RequestState) -> Result<(), TransitionError> {
        if self.can_transition_to(to) {
            Ok(())
        } else {
            Err(TransitionError::Request { from: self, to })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node_state() -> impl Strategy<Value = NodeState> {
        proptest::sample::select(NodeState::ALL)
    }

    fn request_state() -> impl Strategy<Value = RequestState> {
        proptest::sample::select(RequestState::ALL)
    }

    #[test]
    fn names_round_trip() {
        for s in NodeState::ALL {
            assert_eq!(s.as_str().parse::<NodeState>().unwrap(), *s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in RequestState::ALL {
            assert_eq!(s.as_str().parse::<RequestState>().unwrap(), *s);
        }
        assert!("DONE".parse::<NodeState>().is_err());
    }

    #[test]
    fn the_happy_path_is_allowed() {
        use NodeState::*;
        let path = [Blocked, Ready, Preparing, AwaitingSignature, Submitting, Submitted, Observing, Completed];
        for w in path.windows(2) {
            assert!(w[0].can_transition_to(w[1]), "{} -> {}", w[0], w[1]);
        }
    }

    #[test]
    fn completed_only_comes_from_evidence_states() {
        use NodeState::*;
        let from: Vec<_> = NodeState::ALL.iter().filter(|s| s.can_transition_to(Completed)).collect();
        assert_eq!(from, vec![&Ready, &Submitting, &Submitted, &Observing, &Unknown]);
    }

    proptest! {
        #[test]
        fn terminal_node_states_have_no_exit(from in node_state(), to in node_state()) {
            if from.is_terminal() {
                prop_assert!(!from.can_transition_to(to));
                prop_assert!(from.check_transition(to).is_err());
            }
        }

        #[test]
        fn no_node_state_transitions_to_itself(s in node_state()) {
            prop_assert!(!s.can_transition_to(s));
        }

        #[test]
        fn unknown_is_never_retried_to_ready(to in node_state()) {
            // UNKNOWN may only leave through evidence (or a C6 cancel), never back to READY.
            if NodeState::Unknown.can_transition_to(to) {
                prop_assert!(to != NodeState::Ready && to != NodeState::Preparing);
            }
        }

        #[test]
        fn terminal_request_states_have_no_exit(from in request_state(), to in request_state()) {
            // CANCELLED -> MANUAL_INTERVENTION is the late-effect exit (money may have moved).
            if from.is_terminal() && !(from == RequestState::Cancelled && to == RequestState::ManualIntervention) {
                prop_assert!(!from.can_transition_to(to));
            }
            prop_assert_eq!(from.can_transition_to(to), from.check_transition(to).is_ok());
        }

        #[test]
        fn nothing_returns_to_pending_approval(from in request_state()) {
            prop_assert!(!from.can_transition_to(RequestState::PendingApproval));
        }
    }
}
