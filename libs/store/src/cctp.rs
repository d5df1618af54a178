//! The CCTP lane's claims on attested V2 nonces (migration 0024): one `(source domain, nonce)`
//! belongs to the one movement that claimed it first, so a message attested for another burn
//! can never complete this movement's mint by that burn's `usedNonces`.

use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// Claims `(source_domain, nonce)` for `request_id` (idempotent) and answers the movement it
/// belongs to: `request_id` itself, or the other movement that claimed it first.
pub async fn claim_nonce(pool: &PgPool, source_domain: u32, nonce: &str, request_id: Uuid) -> Result<Uuid> {
    let owner = sqlx::query_scalar!(
        r#"WITH claimed AS (
               INSERT INTO cctp_attested_nonces (source_domain, nonce, request_id) VALUES ($1, $2, $3)
               ON CONFLICT (source_domain, nonce) DO NOTHING
               RETURNING request_id)
           SELECT request_id AS "request_id!" FROM claimed
           UNION ALL
           SELECT request_id FROM cctp_attested_nonces WHERE source_domain = $1 AND nonce = $2
           LIMIT 1"#,
        i64::from(source_domain),
        nonce,
        request_id,
    )
    .fetch_one(pool)
    .await?;
    Ok(owner)
}
