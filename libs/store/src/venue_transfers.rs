//! venue_transfers (migration 0022): what cex_transfer_ingest read of each venue account's
//! withdrawal and deposit history — upserted by (venue, direction, venue id), linked to the
//! qtg node that explains it, and a withdrawal nothing explains alerted once (a
//! compare-and-set on `alerted_at`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::Result;

/// One row as the venue's history shows it.
#[derive(Debug, Clone)]
pub struct NewTransfer<'a> {
    pub account: &'a str,
    pub direction: &'a str,
    pub venue_ref: &'a str,
    pub asset: &'a str,
    pub network: Option<&'a str>,
    pub amount: &'a str,
    pub fee: Option<&'a str>,
    pub address: &'a str,
    pub address_tag: Option<&'a str>,
    pub tx_id: Option<&'a str>,
    pub client_id: Option<&'a str>,
    pub status: &'a str,
    pub occurred_at: Option<DateTime<Utc>>,
}

/// A venue transfer as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VenueTransfer {
    pub id: i64,
    /// The registry's `[balances."<venue_key>"]` entry it was read through.
    pub venue_key: String,
    /// The venue account.
    pub account: String,
    /// `withdrawal` or `deposit`.
    pub direction: String,
    /// The venue's own id of it.
    pub venue_ref: String,
    pub asset: String,
    pub network: Option<String>,
    /// Decimal string.
    pub amount: String,
    pub fee: Option<String>,
    pub address: String,
    pub address_tag: Option<String>,
    pub tx_id: Option<String>,
    pub client_id: Option<String>,
    /// The venue's status code or word.
    pub status: String,
    pub occurred_at: Option<DateTime<Utc>>,
    /// The node and movement that explain it, and how they were matched (`client_id`,
    /// `withdrawal_id`, `deposit_id`, `txid`); null while nothing does.
    pub request_node_id: Option<Uuid>,
    pub movement_id: Option<Uuid>,
    pub linked_by: Option<String>,
    /// A withdrawal no node explains: when the alert went out.
    pub alerted_at: Option<DateTime<Utc>>,
    pub first_seen_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Inserts what is new and updates what changed (status, tx id, fee): re-reading a window is
/// harmless, and two replicas reading the same one write each row once.
pub async fn upsert(conn: &mut PgConnection, venue_key: &str, rows: &[NewTransfer<'_>]) -> Result<u64> {
    let mut changed = 0;
    for t in rows {
        let done = sqlx::query!(
            "INSERT INTO venue_transfers (venue_key, account, direction, venue_ref, asset, network, \
             amount, fee, address,
                                          address_tag, tx_id, client_id, status, occurred_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7::text::numeric, $8::text::numeric, $9, $10, $11, $12, $13, $14)
             ON CONFLICT (venue_key, direction, venue_ref) DO UPDATE
                SET status = EXCLUDED.status, tx_id = COALESCE(EXCLUDED.tx_id, venue_transfers.tx_id),
                    fee = COALESCE(EXCLUDED.fee, venue_transfers.fee), updated_at = now()
              WHERE (venue_transfers.status, venue_transfers.tx_id, venue_transfers.fee)
                    IS DISTINCT FROM (EXCLUDED.status, COALESCE(EXCLUDED.tx_id, venue_transfers.tx_id),
                                      COALESCE(EXCLUDED.fee, venue_transfers.fee))",
            venue_key,
            t.account,
            t.direction,
            t.venue_ref,
            t.asset,
            t.network,
            t.amount,
            t.fee,
            t.address,
            t.address_tag,
            t.tx_id,
            t.client_id,
            t.status,
            t.occurred_at
        )
        .execute(&mut *conn)
        .await?;
        changed += done.rows_affected();
    }
    Ok(changed)
}

/// Up to where the venue's history was read completely; `None` before the first read.
pub async fn cursor(conn: &mut PgConnection, venue_key: &str) -> Result<Option<DateTime<Utc>>> {
    Ok(sqlx::query_scalar!("SELECT ingested_until FROM venue_transfer_cursors WHERE venue_key = $1", venue_key)
        .fetch_optional(&mut *conn)
        .await?)
}

/// Moves the cursor forward to `to` (never back: a slower replica's read does not undo a
/// faster one's).
pub async fn advance_cursor(conn: &mut PgConnection, venue_key: &str, to: DateTime<Utc>) -> Result<()> {
    sqlx::query!(
        "INSERT INTO venue_transfer_cursors (venue_key, ingested_until) VALUES ($1, $2)
         ON CONFLICT (venue_key) DO UPDATE
            SET ingested_until = GREATEST(venue_transfer_cursors.ingested_until, EXCLUDED.ingested_until),
                updated_at = now()",
        venue_key,
        to
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Links each row no node explains yet (first seen within `within_seconds`) to the node that
/// does: a withdrawal by qtg's client id (`<request_node_id>:<attempt>`, unless that key is
/// void — an attempt qtg concluded never left explains nothing) or by the venue id a
/// node of the same account recorded (`exchange_withdrawal_id`); a deposit by the deposit id a
/// node recorded, or by its tx id (the txid a withdrawal node followed). Returns the rows
/// linked.
pub async fn link(conn: &mut PgConnection, within_seconds: f64) -> Result<u64> {
    let done = sqlx::query!(
        "WITH found AS (
           SELECT t.id AS tid, x.node_id, x.request_id, x.by
             FROM venue_transfers t
             CROSS JOIN LATERAL (
               SELECT n.id AS node_id, n.request_id, 'client_id' AS by
                 FROM movement_request_nodes n
                WHERE t.direction = 'withdrawal'
                  AND n.id = (CASE WHEN t.client_id ~ \
                      '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}:[0-9]+$'
                                   THEN split_part(t.client_id, ':', 1)::uuid END)
                  -- An attempt qtg concluded was never sent (its key void) explains nothing: a
                  -- withdrawal with that key executed anyway is exactly what must be alerted.
                  AND NOT EXISTS (SELECT 1 FROM cex_submit_keys k
                                   WHERE k.idempotency_key = t.client_id AND k.status = 'void')
               UNION ALL
               SELECT n.id, n.request_id, 'withdrawal_id'
                 FROM movement_request_nodes n
                WHERE t.direction = 'withdrawal' AND n.provider_refs->>'exchange_withdrawal_id' = t.venue_ref
                  AND n.provider_refs->>'venue' = t.account
               UNION ALL
               SELECT n.id, n.request_id, 'deposit_id'
                 FROM movement_request_nodes n
                WHERE t.direction = 'deposit' AND n.provider_refs->>'deposit_id' = t.venue_ref
                  AND n.provider_refs->>'venue' = t.account
               UNION ALL
               SELECT n.id, n.request_id, 'txid'
                 FROM movement_request_nodes n
                WHERE t.direction = 'deposit' AND t.tx_id IS NOT NULL AND n.provider_refs->>'txid' = t.tx_id
               LIMIT 1) x
            WHERE t.movement_id IS NULL AND t.first_seen_at > now() - make_interval(secs => $1))
         UPDATE venue_transfers t
            SET request_node_id = f.node_id, movement_id = f.request_id, linked_by = f.by, updated_at = now()
           FROM found f
          WHERE t.id = f.tid AND t.movement_id IS NULL",
        within_seconds
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// `query_as!(VenueTransfer, …)`: a transfer's columns `FROM venue_transfers`, then `$tail` (a
/// literal: sqlx joins it to the checked text) — one column list for every read.
macro_rules! transfers {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            VenueTransfer,
            r#"SELECT id, venue_key, account, direction, venue_ref, asset, network, amount::text AS "amount!",
                      fee::text AS "fee?", address, address_tag, tx_id, client_id, status, occurred_at, request_node_id,
                      movement_id, linked_by, alerted_at, first_seen_at, updated_at
                 FROM venue_transfers "# + $tail
            $(, $arg)*
        )
    };
}

/// Withdrawals no node explains, first seen more than `grace_seconds` ago, not yet alerted.
pub async fn unexplained_due(conn: &mut PgConnection, grace_seconds: f64, limit: i64) -> Result<Vec<VenueTransfer>> {
    Ok(transfers!(
        r#"
            WHERE direction = 'withdrawal' AND movement_id IS NULL AND alerted_at IS NULL
              AND first_seen_at < now() - make_interval(secs => $1)
            ORDER BY first_seen_at, id LIMIT $2"#,
        grace_seconds,
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Marks the row alerted — `false` when another replica did first, or a node explains it now.
pub async fn mark_alerted(conn: &mut PgConnection, id: i64) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE venue_transfers SET alerted_at = now(), updated_at = now()
          WHERE id = $1 AND alerted_at IS NULL AND movement_id IS NULL",
        id
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Newest first, after the cursor `(first_seen_at, id)`; filtered by venue key, direction and
/// `unexplained` (rows no node explains).
pub async fn list(
    conn: &mut PgConnection,
    venue_key: Option<&str>,
    direction: Option<&str>,
    unexplained: bool,
    before: Option<(DateTime<Utc>, i64)>,
    limit: i64,
) -> Result<Vec<VenueTransfer>> {
    Ok(transfers!(
        r#"
            WHERE ($1::text IS NULL OR venue_key = $1) AND ($2::text IS NULL OR direction = $2)
              AND (NOT $3 OR movement_id IS NULL)
              AND ($4::timestamptz IS NULL OR (first_seen_at, id) < ($4, $5))
            ORDER BY first_seen_at DESC, id DESC LIMIT $6"#,
        venue_key,
        direction,
        unexplained,
        before.map(|b| b.0),
        before.map(|b| b.1).unwrap_or(0),
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}
