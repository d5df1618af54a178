//! The CCTP lane's claims on attested V2 nonces (migration 0024): one `(source domain, nonce)`
//! belongs to the one movement that claimed it first, so a message attested for another burn
//! can never complete this movement's mint by that burn's `usedNonces`.

use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// Claims `(source_domain, nonce)` for `request_id` (idempotent) and answers the movement it
/// belongs to: `request_id` itself, or the other movement that claimed it first. One row
/// always comes back, also when another claim of the same nonce commits meanwhile: the
/// conflict's no-op update locks and returns the owner's row.
pub async fn claim_nonce(pool: &PgPool, source_domain: u32, nonce: &str, request_id: Uuid) -> Result<Uuid> {
    let owner = sqlx::query_scalar!(
        "INSERT INTO cctp_attested_nonces (source_domain, nonce, request_id) VALUES ($1, $2, $3)
         ON CONFLICT (source_domain, nonce) DO UPDATE SET request_id = cctp_attested_nonces.request_id
         RETURNING request_id",
        i64::from(source_domain),
        nonce,
        request_id,
    )
    .fetch_one(pool)
    .await?;
    Ok(owner)
}
