//! The sim lane's venue (docs/architecture.md §9.3): a ledger of orders, the fence's key store and a count
//! of every submit call, each written in one statement on the venue's own connection as an
//! external venue would (`sim_submit` / `sim_recover` in the schema).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// What the sim venue did with one submit call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimSubmit {
    /// A new order.
    Executed,
    /// The key was seen before: the same order, no second effect.
    Repeat,
    /// The venue refused the order (scripted); the key is void.
    Failed,
    /// Refused without an effect: the key is void.
    RefusedVoid,
    /// Refused: a newer attempt of the node was already seen.
    RefusedOlder,
    /// Refused: received after `submit_by`.
    RefusedLate,
}

/// One submit call at the sim venue (`fail`: the venue refuses the order).
pub async fn submit(
    pool: &PgPool,
    idempotency_key: &str,
    executor_key: &str,
    request_node_id: Uuid,
    attempt_no: i32,
    submit_by: DateTime<Utc>,
    fail: bool,
) -> Result<SimSubmit> {
    let outcome: String = sqlx::query_scalar!(
        r#"SELECT sim_submit($1, $2, $3, $4, $5, $6) AS "outcome!""#,
        idempotency_key,
        executor_key,
        request_node_id,
        attempt_no,
        submit_by,
        fail,
    )
    .fetch_one(pool)
    .await?;
    Ok(match outcome.as_str() {
        "executed" => SimSubmit::Executed,
        "repeat" => SimSubmit::Repeat,
        "failed" => SimSubmit::Failed,
        "refused_void" => SimSubmit::RefusedVoid,
        "refused_older" => SimSubmit::RefusedOlder,
        "refused_late" => SimSubmit::RefusedLate,
        other => return Err(crate::StoreError::corrupt(format!("sim_submit answered {other:?}"))),
    })
}

/// Recover at the sim venue: `true` when the ledger has the key. Otherwise — or always when
/// `void_always` — the key is voided so that no later submit executes it.
pub async fn recover(
    pool: &PgPool,
    idempotency_key: &str,
    request_node_id: Uuid,
    attempt_no: i32,
    void_always: bool,
) -> Result<bool> {
    let outcome: String = sqlx::query_scalar!(
        r#"SELECT sim_recover($1, $2, $3, $4) AS "outcome!""#,
        idempotency_key,
        request_node_id,
        attempt_no,
        void_always,
    )
    .fetch_one(pool)
    .await?;
    Ok(outcome == "found")
}
