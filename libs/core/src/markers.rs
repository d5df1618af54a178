//! `provider_refs` marker names (docs/architecture.md §7.5). Only qtg writes `__submit_*`;
//! executors may set the review and gating markers. `__*` keys never reach
//! `provider_context` or `$ref`.

pub const SUBMIT_ATTEMPT_PENDING: &str = "__submit_attempt_pending";
pub const SUBMIT_ATTEMPT_STARTED_AT: &str = "__submit_attempt_started_at";
pub const LEGACY_RECONCILIATION_GATED: &str = "__legacy_reconciliation_gated";
pub const MANUAL_REVIEW_REQUIRED: &str = "__manual_review_required";
/// The reconciliation matcher's evidence (window, candidates, outcome) an executor's recover
/// leaves for the diagnosis. Executors may set it.
pub const RECONCILIATION: &str = "__reconciliation";
/// An executor could not map the venue's status code (runbook C5): `{kind, code}`; set back
/// to `null` once a status maps again. Executors may set it.
pub const STATUS_UNMAPPED: &str = "__status_unmapped";
/// An executor reported an effect (a non-FAILED answer) for a node already FAILED or
/// CANCELLED: money may have moved, a person decides.
pub const LATE_EFFECT: &str = "__late_effect";

/// Markers only qtg may write; an executor result carrying them is a protocol violation.
pub const QTG_ONLY: [&str; 3] = [SUBMIT_ATTEMPT_PENDING, SUBMIT_ATTEMPT_STARTED_AT, LATE_EFFECT];

/// True for keys that are internal markers (never propagated to successors).
pub fn is_marker(key: &str) -> bool {
    key.starts_with("__")
}
