//! The sim lane's venue ledger (DESIGN.md §9): one row per submit, written on the venue's
//! own connection as an external venue would.

use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// Records an order unless the venue already has one with this idempotency key (a venue
/// honours client order ids). Returns whether a new row was written.
pub async fn record_submit(
    pool: &PgPool,
    idempotency_key: &str,
    executor_key: &str,
    request_node_id: Uuid,
) -> Result<bool> {
    let res = sqlx::query(
        "INSERT INTO sim_ledger (idempotency_key, executor_key, request_node_id)
         SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM sim_ledger WHERE idempotency_key = $1)",
    )
    .bind(idempotency_key)
    .bind(executor_key)
    .bind(request_node_id)
    .execute(pool)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Whether the venue saw a submit with this idempotency key.
pub async fn has_submit(pool: &PgPool, idempotency_key: &str) -> Result<bool> {
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sim_ledger WHERE idempotency_key = $1)")
        .bind(idempotency_key)
        .fetch_one(pool)
        .await?)
}
