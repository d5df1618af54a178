//! The SDK for remote-executor implementers: implement [`Handler`] once and [`serve`] it over
//! gRPC (with `grpc.health.v1` and reflection) and HTTP JSON (same messages in proto3
//! canonical JSON), with bearer or HMAC authentication ([`Verifier`], the scheme of
//! `qtg-wire-auth`), tracing and graceful shutdown. It needs no database: it depends on
//! `qtg-core`, `qtg-proto` and `qtg-wire-auth` only. The conformance suite (crate
//! `qtg-conformance`, binary `qtg-executor-conformance`) drives any remote executor through
//! the contract and prints a pass/fail table.

pub mod fence;
mod server;

use async_trait::async_trait;
pub use fence::{Admission, FileKeyStore, KeyState, KeyStore, KeyStoreError, MemoryKeyStore};
pub use qtg_core::{ExecutionContext, ExecutionResult, NodeState, PreparedAction, SignRequest, SignResult};
pub use qtg_wire_auth::Verifier;
use serde_json::Value;
pub use server::{serve, Running, ServeConfig, TlsServer};

/// What Submit carries besides the context.
#[derive(Debug, Clone, Copy)]
pub struct SubmitCall<'a> {
    pub prepared: &'a PreparedAction,
    pub signed: Option<&'a SignResult>,
    /// `{request_node_id}:{attempt_no}`: use it as the venue's client order id.
    pub idempotency_key: &'a str,
    /// The attempt's fence: the SDK has already refused a call received after it; send it
    /// to the venue as its own deadline where the venue has one (e.g. a CEX `recvWindow`
    /// ending no later than this), so the venue refuses a late arrival too.
    pub submit_by: chrono::DateTime<chrono::Utc>,
}
pub use tokio_util::sync::CancellationToken;

/// What `prepare` answers.
#[derive(Debug, Clone, PartialEq)]
pub enum PrepareOutcome {
    Action(PreparedAction),
    /// A FAILED result: nothing will be submitted.
    Refused(ExecutionResult),
}

/// A handler's failure. `Unavailable` becomes gRPC UNAVAILABLE / HTTP 503 (qtg: nothing is
/// known to have happened — on submit that means UNKNOWN); `Invalid` becomes
/// INVALID_ARGUMENT / HTTP 400.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HandlerError {
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// One remote executor (or several, told apart by `executor_key`). The contract:
/// * `submit` must treat `idempotency_key` as the venue's client order id: the same key
///   always yields the same `provider_ref_id` and never a second effect.
/// * Answer `UNKNOWN` whenever you cannot tell whether the venue acted; never `FAILED`.
/// * `recover` reconciles by idempotency key (or a lookback) — it never re-submits. It may
///   answer FAILED for a key that was sent only once the venue can no longer accept it
///   (its deadline passed, or its sequence was consumed); otherwise UNKNOWN with
///   `__manual_review_required`.
///
/// [`serve`] puts the handler behind the fence ([`fence`]): a void, superseded or late key
/// never reaches `submit`, and `recover` is not called for a key never sent.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// `Ok(None)` = pass; `Ok(Some(FAILED result))` = refuse.
    async fn preflight(
        &self,
        executor_key: &str,
        ctx: &ExecutionContext,
    ) -> Result<Option<ExecutionResult>, HandlerError>;
    async fn prepare(&self, executor_key: &str, ctx: &ExecutionContext) -> Result<PrepareOutcome, HandlerError>;
    async fn submit(
        &self,
        executor_key: &str,
        ctx: &ExecutionContext,
        call: &SubmitCall<'_>,
    ) -> Result<ExecutionResult, HandlerError>;
    async fn observe(&self, executor_key: &str, ctx: &ExecutionContext) -> Result<ExecutionResult, HandlerError>;
    async fn recover(
        &self,
        executor_key: &str,
        ctx: &ExecutionContext,
        idempotency_key: &str,
    ) -> Result<ExecutionResult, HandlerError>;
    /// Details of a healthy executor; an error means not ok.
    async fn health(&self, executor_key: &str) -> Result<Value, HandlerError> {
        let _ = executor_key;
        Ok(Value::Object(Default::default()))
    }
}

/// Why a signer did not sign.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SignerError {
    /// Policy says no (gRPC FAILED_PRECONDITION / HTTP 422): qtg fails the node with
    /// SIGNER_REFUSED before anything is submitted.
    #[error("refused: {0}")]
    Refused(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// A remote signer. The SDK refuses, before calling [`SignerHandler::sign`], any request whose
/// payload does not hash to both `payload_hash` and `signing_intent.allowed_payload_hash`.
#[async_trait]
pub trait SignerHandler: Send + Sync + 'static {
    async fn sign(&self, req: &SignRequest) -> Result<SignResult, SignerError>;
    /// The address the key signs as (EVM), for qtg's identity checks.
    async fn signer_address(&self, signer_key: &str) -> Result<Option<String>, SignerError>;
}
