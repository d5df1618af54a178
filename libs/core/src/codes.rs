//! Error codes qtg itself writes on nodes and answers over the API.

pub const CONFIG_REF_UNRESOLVED: &str = "CONFIG_REF_UNRESOLVED";
pub const PLAN_HASH_DRIFT: &str = "PLAN_HASH_DRIFT";
pub const INTENT_HASH_DRIFT: &str = "INTENT_HASH_DRIFT";
pub const EXECUTOR_UNAVAILABLE: &str = "EXECUTOR_UNAVAILABLE";
pub const EXECUTOR_TIMEOUT: &str = "EXECUTOR_TIMEOUT";
pub const EXECUTOR_PROTOCOL_ERROR: &str = "EXECUTOR_PROTOCOL_ERROR";
pub const SIGNER_BINDING_MISSING: &str = "SIGNER_BINDING_MISSING";
pub const SIGNER_UNAVAILABLE: &str = "SIGNER_UNAVAILABLE";
pub const SIGNER_REFUSED: &str = "SIGNER_REFUSED";
/// The address that signed is not the signer's enrolled identity (`expected_signer_address`).
pub const SIGNER_IDENTITY_MISMATCH: &str = "SIGNER_IDENTITY_MISMATCH";
/// A CCTP burn's plan expects another caller (`config.burn_caller`) than the address its
/// signer signs as (the seed's `validate_cctp_burn_caller_alignment`).
pub const CCTP_BURN_CALLER_MISMATCH: &str = "CCTP_BURN_CALLER_MISMATCH";
pub const PREPARE_EMPTY: &str = "PREPARE_EMPTY";
pub const PAYLOAD_HASH_MISMATCH: &str = "PAYLOAD_HASH_MISMATCH";
/// A pause (kill switch) took effect after the node was claimed, before its submit was sent.
pub const DISPATCH_PAUSED: &str = "DISPATCH_PAUSED";
/// The movement left EXECUTING between the claim and the arm: nothing was sent.
pub const DISPATCH_ABORTED: &str = "DISPATCH_ABORTED";
pub const OBSERVATION_TIMEOUT: &str = "OBSERVATION_TIMEOUT";
/// qtg could not handle a node (claiming it, recording an answer): held back and retried.
pub const ENGINE_ERROR: &str = "ENGINE_ERROR";
/// The prepared action's `expires_at` passed before the submit: nothing was sent.
pub const PREPARED_ACTION_EXPIRED: &str = "PREPARED_ACTION_EXPIRED";
/// A signer's answer that breaks the contract (empty or unstorable signature).
pub const SIGNER_PROTOCOL_ERROR: &str = "SIGNER_PROTOCOL_ERROR";
/// qtg could not encode a request for its executor (e.g. an integer beyond ±2^53 that the
/// wire's doubles cannot carry): nothing was sent; the executor is not to blame.
pub const REQUEST_NOT_ENCODABLE: &str = "REQUEST_NOT_ENCODABLE";
pub const RISK_LIMIT_EXCEEDED: &str = "RISK_LIMIT_EXCEEDED";
