//! The executor contract (docs/architecture.md §8): the six-method [`Executor`] trait, the [`Signer`]
//! trait and the [`Registry`] that maps exact keys to implementations, built from the
//! registry file (`MG_EXECUTOR_REGISTRY`).

mod registry;
pub mod remote;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use qtg_core::{ExecutionContext, ObserveOutcome, PreparedAction, Refusal, SignRequest, SignResult, SubmitOutcome};
use serde_json::Value;
use std::sync::Arc;

pub use registry::{
    EntrySpec, ExecutorEntry, Fence, LaneContext, LaneError, LaneFactory, LanePlugin, LaneShared, Registry,
    RegistryError, RegistryFile, Setting, SignerEntry, Transport,
};

/// Why a call produced no answer qtg can use. The engine maps each to the method's failure
/// semantics (docs/architecture.md §4.4, §7.6): nothing sent on preflight/prepare → FAILED; on submit →
/// UNKNOWN; on observe/recover → no state change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecutorError {
    /// The executor could not be reached or answered with a transport-level failure.
    #[error("executor unavailable: {0}")]
    Unavailable(String),
    /// No answer within the deadline.
    #[error("executor call timed out after {0} ms")]
    Timeout(u64),
    /// An answer that violates the contract.
    #[error("executor protocol error: {0}")]
    Protocol(String),
    /// The executor does not implement this method (health only).
    #[error("not implemented")]
    NotImplemented,
    /// qtg could not build or encode the request: nothing was sent, and the executor is not
    /// to blame.
    #[error("qtg could not encode the request (nothing was sent): {0}")]
    Request(String),
}

/// Why an executor refuses a movement when it is created, before any call: what no approval
/// could make payable. The message says what the executor expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntentRefusal {
    /// The intent itself (a destination this lane cannot pay, an amount in a shape it cannot
    /// use): the caller fixes the request.
    #[error("{0}")]
    Intent(String),
    /// The node as the template configures it (its `config`, its `risk_controls`) cannot run
    /// this intent: a template change fixes it, not the request.
    #[error("{0}")]
    Template(String),
}

/// What `prepare` answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Prepared {
    Action(PreparedAction),
    /// The executor refuses to prepare (a FAILED result).
    Refused(Refusal),
    /// Nothing to submit: the node fails with `PREPARE_EMPTY`.
    Empty,
}

/// What Submit carries besides the context (docs/architecture.md §6.1): the prepared action, the
/// signature, the attempt's idempotency key and its absolute `submit_by`.
#[derive(Debug, Clone, Copy)]
pub struct Submission<'a> {
    pub prepared: &'a PreparedAction,
    pub signed: Option<&'a SignResult>,
    /// `{request_node_id}:{attempt_no}`: the venue's client order id.
    pub idempotency_key: &'a str,
    /// After this instant the attempt must not reach the venue: the executor refuses it
    /// without a venue call, and sends it with a venue-side deadline where the venue has one.
    pub submit_by: DateTime<Utc>,
}

/// One lane's actor. No worker transaction, row lock or pooled connection is held while any
/// of these runs (docs/architecture.md §4.3): an executor that keeps state of its own (a key store, a
/// nonce reservation) uses its own pool and short transactions.
#[async_trait]
pub trait Executor: Send + Sync {
    /// `Ok(None)` = pass; `Ok(Some(refusal))` = refused.
    ///
    /// Each method answers its own type ([`Refusal`], [`SubmitOutcome`], [`ObserveOutcome`]): the
    /// states the contract allows it are the only ones it can name. A remote executor's answer
    /// is checked and narrowed where it enters ([`qtg_core::ExecutionResult::narrow`]).
    async fn preflight(&self, ctx: &ExecutionContext) -> Result<Option<Refusal>, ExecutorError>;

    async fn prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError>;

    /// The same idempotency key must always yield the same `provider_ref_id` and never a
    /// second effect; a key that is void, older than one already seen for the node, or
    /// received after `submit_by` is refused without a venue call (the fence).
    async fn submit(&self, ctx: &ExecutionContext, submission: &Submission<'_>)
        -> Result<SubmitOutcome, ExecutorError>;

    async fn observe(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError>;

    /// Decides an UNKNOWN (or stale SUBMITTING) node by idempotency key / lookback — never by
    /// a blind retry. A FAILED answer voids the key: a later Submit with it is refused.
    async fn recover(&self, ctx: &ExecutionContext, idempotency_key: &str) -> Result<SubmitOutcome, ExecutorError>;

    /// A small status object, or `NotImplemented`.
    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        Err(ExecutorError::NotImplemented)
    }

    /// Whether every action this executor prepares must be signed by a signer bound to the
    /// node (the EVM lanes): a template that binds it without a `signer_key` is refused at
    /// proposal rather than failing each movement after a nonce was reserved.
    fn needs_signer(&self) -> bool {
        false
    }

    /// The address the node's signer must sign as, where the protocol requires a particular
    /// caller — checked by dispatch against the signer's enrolled (else observed) identity
    /// before anything is prepared or signed. By default: a `cctp_burn` action is sent by its
    /// config's `burn_caller` (the seed's burn-caller alignment), whoever executes it; a lane
    /// whose action always has such a caller says so itself.
    fn required_signer(&self, ctx: &ExecutionContext) -> Option<SignerRequirement> {
        ctx.action_type
            .trim()
            .eq_ignore_ascii_case("cctp_burn")
            .then(|| SignerRequirement::burn_caller(&ctx.node_config))
    }

    /// Refuses, when the movement is created and without any call, an intent this executor
    /// could never run as the node is configured — a destination it cannot pay, in a shape
    /// it cannot use — with a message that says what it expects. An approver is never asked
    /// to approve what would fail after approval. Nothing to check by default (a remote
    /// executor checks at its preflight).
    fn check_intent(&self, _node_config: &Value, _risk_controls: &Value, _intent: &Value) -> Result<(), IntentRefusal> {
        Ok(())
    }

    /// The account whose funds this executor's action moves, as balance snapshots name it (a
    /// venue account, a chain address), when the executor knows it: a movement's `source` —
    /// what approvers see and the balance check reads — must name it. `None`: not known here.
    fn paying_account(&self, _node_config: &Value) -> Option<String> {
        None
    }
}

/// The on-chain facts an entry relies on (code hashes of its contracts, a token's decimals, a
/// messenger's configuration…), read now, for verify_drift to compare with the baseline an
/// admin recorded. A capability beside [`BalanceFetcher`]: a lane that has facts to watch
/// builds one with the entry's executor ([`LaneExecutor`]); the others have none.
#[async_trait]
pub trait DriftSource: Send + Sync {
    async fn facts(&self) -> Result<Vec<DriftFact>, ExecutorError>;
}

/// What a lane builds for one registry entry: its executor and, where the lane watches facts,
/// the entry's [`DriftSource`].
#[derive(Clone)]
pub struct LaneExecutor {
    pub executor: Arc<dyn Executor>,
    pub drift: Option<Arc<dyn DriftSource>>,
}

impl LaneExecutor {
    /// An executor with no facts to watch.
    pub fn new(executor: Arc<dyn Executor>) -> Self {
        LaneExecutor { executor, drift: None }
    }

    /// An executor that is its own source of facts.
    pub fn watched<E: Executor + DriftSource + 'static>(executor: Arc<E>) -> Self {
        LaneExecutor { executor: executor.clone(), drift: Some(executor) }
    }
}

/// Who must sign a node's action ([`Executor::required_signer`]): the address from the node's
/// config (or why it cannot be known), what that address does, and the error code of a
/// mismatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignerRequirement {
    pub address: Result<String, String>,
    /// What the address does, for the operator ("call depositForBurn").
    pub role: &'static str,
    pub code: &'static str,
}

impl SignerRequirement {
    /// A CCTP burn: `config.burn_caller` calls `depositForBurn`.
    pub fn burn_caller(node_config: &Value) -> SignerRequirement {
        let address = node_config.get("burn_caller").and_then(Value::as_str).map(str::to_string).ok_or_else(|| {
            "the burn's config names no burn_caller (the address expected to call depositForBurn)".to_string()
        });
        SignerRequirement { address, role: "call depositForBurn", code: qtg_core::codes::CCTP_BURN_CALLER_MISMATCH }
    }
}

/// One balance a venue reports: `account` (the exchange account, the chain address) holds
/// `free` (and `locked`, held for orders or withdrawals) of `asset`, decimal strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    pub account: String,
    pub asset: String,
    pub free: String,
    pub locked: String,
}

/// Reads a venue's balances (the seed's balance fetcher), named in the registry by its
/// `venue_key` (`[balances."<venue_key>"]`).
#[async_trait]
pub trait BalanceFetcher: Send + Sync {
    async fn fetch(&self) -> Result<Vec<Balance>, ExecutorError>;

    /// The account's withdrawals and deposits in [`from`, `to`] as the venue's history shows
    /// them (cex_transfer_ingest). A venue without such a history answers `NotImplemented`.
    async fn transfers(&self, _from: DateTime<Utc>, _to: DateTime<Utc>) -> Result<TransferPage, ExecutorError> {
        Err(ExecutorError::NotImplemented)
    }

    /// The venue's clock now, which bounds what its history can show (the host's clock by
    /// default).
    async fn venue_time(&self) -> Result<DateTime<Utc>, ExecutorError> {
        Ok(Utc::now())
    }
}

/// One read of a venue's history: what it answered, and whether a list came back as long as the
/// venue's page limit (`truncated`: rows may be missing — read a narrower window).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransferPage {
    pub transfers: Vec<VenueTransfer>,
    pub truncated: bool,
}

/// One withdrawal or deposit of a venue account, as the venue's history shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VenueTransfer {
    /// The venue account (the lane's `venue`).
    pub account: String,
    /// `withdrawal` or `deposit`.
    pub direction: &'static str,
    /// The venue's own id of it.
    pub venue_ref: String,
    pub asset: String,
    pub network: Option<String>,
    /// Decimal string: what was applied for (a withdrawal) or credited (a deposit).
    pub amount: String,
    pub fee: Option<String>,
    pub address: String,
    pub address_tag: Option<String>,
    pub tx_id: Option<String>,
    /// The client id it carries (qtg's idempotency key when qtg sent it), if the venue keeps one.
    pub client_id: Option<String>,
    /// The venue's status, as its own code or word.
    pub status: String,
    pub occurred_at: Option<DateTime<Utc>>,
}

/// One fact verify_drift compares: `scope` (a chain: `evm:<chain id>`), `fact` (its name
/// there) and its value as read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DriftFact {
    pub scope: String,
    pub fact: String,
    pub value: String,
}

impl DriftFact {
    /// The value of a fact whose read reverted on a configured contract: the contract is not
    /// the one the lane expects (a wrong address, another version, an upgrade that dropped the
    /// function). verify_drift reports it as a difference on every check, whatever the
    /// baseline says — never a value that could be baselined and then stay quiet.
    pub const UNREADABLE: &'static str = "reverted";

    pub fn is_unreadable(&self) -> bool {
        self.value == Self::UNREADABLE
    }
}

/// Holds keys; signs exactly the payload whose hash the request allows.
#[async_trait]
pub trait Signer: Send + Sync {
    async fn sign(&self, req: &SignRequest) -> Result<SignResult, SignError>;

    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        Err(ExecutorError::NotImplemented)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SignError {
    /// The signer refuses (e.g. payload hash not allowed).
    #[error("signer refused: {0}")]
    Refused(String),
    #[error(transparent)]
    Call(#[from] ExecutorError),
}
