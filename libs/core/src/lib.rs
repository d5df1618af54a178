//! qtg's pure domain: states and their transition table, request-state derivation, the plan
//! graph, `$ref` resolution, plan hashing and the executor protocol's value types. No IO.

pub mod codes;
pub mod derive;
pub mod diagnosis;
pub mod hash;
pub mod lane;
pub mod markers;
pub mod observe;
pub mod plan;
pub mod policy;
pub mod protocol;
pub mod refs;
pub mod risk;
pub mod state;
pub mod text;
pub mod urls;

pub use derive::{derive_request_state, NodeView};
pub use lane::Lane;
pub use plan::{NodeKind, PlanDefinition, PlanEdge, PlanError, PlanNode};
pub use protocol::{
    CcipIntent, ExecutionContext, ExecutionResult, ObserveOutcome, PreparedAction, Refusal, SignRequest, SignResult,
    SigningIntent, SubmitOutcome,
};
pub use state::{AfterObserve, AfterSubmit, NextState, NodeState, Refused, RequestState, TransitionError};
