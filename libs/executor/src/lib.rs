//! The executor contract (seed `002_*`): the six-method [`Executor`] trait, the [`Signer`]
//! trait and the [`Registry`] that maps exact keys to implementations, built from the
//! registry file (`MG_EXECUTOR_REGISTRY`).

mod registry;
pub mod remote;

use async_trait::async_trait;
use qtg_core::{ExecutionContext, ExecutionResult, PreparedAction, SignRequest, SignResult};
use serde_json::Value;
pub use sqlx::PgConnection;

pub use registry::{
    EntrySpec, ExecutorEntry, LocalFactory, Registry, RegistryError, RegistryFile, SignerEntry, Transport,
};

/// Why a call produced no answer qtg can use. The engine maps each to the method's failure
/// semantics (DESIGN.md §2.3, §10.7): nothing sent on preflight/prepare → FAILED; on submit →
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
}

/// What `prepare` answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Prepared {
    Action(PreparedAction),
    /// The executor refuses to prepare (a FAILED result).
    Refused(ExecutionResult),
    /// Nothing to submit: the node fails with `PREPARE_EMPTY`.
    Empty,
}

/// One lane's actor. Local executors receive the worker's open transaction: `prepare` may
/// reserve (nonces, intents) there and that commits before `submit`; `submit` and `recover`
/// may read and record evidence there, but nothing reserved in them survives a crash.
#[async_trait]
pub trait Executor: Send + Sync {
    /// `Ok(None)` = pass; `Ok(Some(FAILED result))` = refused.
    async fn preflight(
        &self,
        ctx: &ExecutionContext,
        tx: &mut PgConnection,
    ) -> Result<Option<ExecutionResult>, ExecutorError>;

    async fn prepare(&self, ctx: &ExecutionContext, tx: &mut PgConnection) -> Result<Prepared, ExecutorError>;

    /// `idempotency_key` is `{request_node_id}:{attempt_no}`: the same key must always yield
    /// the same `provider_ref_id` and never a second effect.
    async fn submit(
        &self,
        ctx: &ExecutionContext,
        prepared: &PreparedAction,
        signed: Option<&SignResult>,
        idempotency_key: &str,
        tx: &mut PgConnection,
    ) -> Result<ExecutionResult, ExecutorError>;

    async fn observe(&self, ctx: &ExecutionContext, tx: &mut PgConnection) -> Result<ExecutionResult, ExecutorError>;

    /// Decides an UNKNOWN (or stale SUBMITTING) node by idempotency key / lookback — never by
    /// a blind retry.
    async fn recover(
        &self,
        ctx: &ExecutionContext,
        idempotency_key: &str,
        tx: &mut PgConnection,
    ) -> Result<ExecutionResult, ExecutorError>;

    /// A small status object, or `NotImplemented`.
    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        Err(ExecutorError::NotImplemented)
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
