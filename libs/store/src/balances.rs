//! balance_snapshot's table (migration 0014): append-only snapshots per venue, account and
//! asset — the worker's and `GET /v3/balances?fresh=true`'s alike — the latest of each, a
//! history, the retention cut, and the source balance a movement's creation is checked
//! against.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use crate::Result;

/// One stored balance, as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    pub venue_key: String,
    pub account: String,
    pub asset: String,
    /// Decimal string.
    pub free: String,
    /// Decimal string.
    pub locked: String,
    /// `worker` (qtg-balance) or `fresh` (a `fresh=true` read).
    pub source: String,
    pub as_of: DateTime<Utc>,
    /// Older than the stale threshold, judged now.
    pub stale: bool,
}

/// One balance to store: `(account, asset, free, locked)`, decimals as strings.
pub type NewBalance<'a> = (&'a str, &'a str, &'a str, &'a str);

/// Appends one venue's balances, all with the same `as_of`. A value that is not a decimal
/// makes the database refuse the whole venue (the caller's transaction).
pub async fn append(conn: &mut PgConnection, venue_key: &str, rows: &[NewBalance<'_>], source: &str) -> Result<u64> {
    let accounts: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let assets: Vec<&str> = rows.iter().map(|r| r.1).collect();
    let free: Vec<&str> = rows.iter().map(|r| r.2).collect();
    let locked: Vec<&str> = rows.iter().map(|r| r.3).collect();
    let done = sqlx::query!(
        "INSERT INTO balance_snapshots (venue_key, account, asset, free, locked, source)
         SELECT $1, a, s, f::numeric, l::numeric, $6 FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) \
             AS t(a, s, f, l)",
        venue_key,
        &accounts[..] as &[&str],
        &assets[..] as &[&str],
        &free[..] as &[&str],
        &locked[..] as &[&str],
        source,
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes snapshots older than `retention_seconds`.
pub async fn delete_older_than(conn: &mut PgConnection, retention_seconds: f64) -> Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM balance_snapshots WHERE as_of < now() - make_interval(secs => $1)",
        retention_seconds
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// The latest snapshot of each venue / account / asset, filtered by venue and asset (asset
/// case-insensitive), `stale` judged against `stale_seconds` now.
pub async fn latest(
    conn: &mut PgConnection,
    stale_seconds: f64,
    venue: Option<&str>,
    asset: Option<&str>,
) -> Result<Vec<Snapshot>> {
    Ok(sqlx::query_as!(
        Snapshot,
        r#"SELECT DISTINCT ON (venue_key, asset, account) venue_key, account, asset, free::text AS "free!",
                  locked::text AS "locked!", source, as_of, (as_of < now() - make_interval(secs => $1)) AS "stale!"
             FROM balance_snapshots
            WHERE ($2::text IS NULL OR venue_key = $2) AND ($3::text IS NULL OR upper(asset) = upper($3))
            ORDER BY venue_key, asset, account, as_of DESC, id DESC"#,
        stale_seconds,
        venue,
        asset,
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Snapshots of a venue's asset since `since`, oldest first (at most `limit`).
pub async fn history(
    conn: &mut PgConnection,
    stale_seconds: f64,
    venue: &str,
    asset: &str,
    since: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<Snapshot>> {
    Ok(sqlx::query_as!(
        Snapshot,
        r#"SELECT venue_key, account, asset, free::text AS "free!", locked::text AS "locked!", source, as_of,
                  (as_of < now() - make_interval(secs => $1)) AS "stale!"
             FROM balance_snapshots
            WHERE venue_key = $2 AND upper(asset) = upper($3) AND ($4::timestamptz IS NULL OR as_of >= $4)
            ORDER BY as_of, id LIMIT $5"#,
        stale_seconds,
        venue,
        asset,
        since,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// A chart's view of the history since `since`: the time to now cut into `buckets` equal
/// intervals, and per account the last snapshot of each interval, oldest first (at most
/// `buckets` rows per account, whatever the snapshot rate).
pub async fn history_spread(
    conn: &mut PgConnection,
    stale_seconds: f64,
    venue: &str,
    asset: &str,
    since: DateTime<Utc>,
    buckets: i64,
) -> Result<Vec<Snapshot>> {
    Ok(sqlx::query_as!(
        Snapshot,
        r#"SELECT venue_key, account, asset, free::text AS "free!", locked::text AS "locked!", source, as_of,
                  (as_of < now() - make_interval(secs => $1)) AS "stale!"
             FROM (SELECT DISTINCT ON (account, bucket) *
                     FROM (SELECT b.*, floor(extract(epoch FROM b.as_of - $4)
                                   / greatest(extract(epoch FROM now() - $4) / $5, 0.001))::bigint AS bucket
                             FROM balance_snapshots b
                            WHERE b.venue_key = $2 AND upper(b.asset) = upper($3) AND b.as_of >= $4) x
                    ORDER BY account, bucket, as_of DESC, id DESC) s
            ORDER BY as_of, id LIMIT 5000"#,
        stale_seconds,
        venue,
        asset,
        since,
        buckets as f64,
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// The source's free balance of `asset`: for every venue / account pair whose venue_key or
/// account is `source` (case-insensitive), its latest snapshot younger than
/// `max_age_seconds`; `covers` when any of them holds `amount` (a source named ambiguously —
/// one address on two chains — is refused only when none could pay). Answers the largest free
/// balance, whether it covers, and the newest `as_of`; `None`: no fresh-enough snapshot (the
/// balance is not known).
pub async fn source_covers(
    conn: &mut PgConnection,
    source: &str,
    asset: &str,
    amount: &str,
    max_age_seconds: f64,
) -> Result<Option<(String, bool, DateTime<Utc>)>> {
    let row = sqlx::query!(
        r#"WITH latest AS (
             SELECT DISTINCT ON (venue_key, account) free, as_of FROM balance_snapshots
              WHERE upper(asset) = upper($2) AND as_of >= now() - make_interval(secs => $3)
                AND (lower(venue_key) = lower($1) OR lower(account) = lower($1)) AND free <> 'NaN'
              ORDER BY venue_key, account, as_of DESC, id DESC)
         SELECT max(free)::text AS "free?", bool_or(free >= $4::text::numeric) AS "covers?", max(as_of) AS "as_of?",
                count(*) AS "n!"
           FROM latest"#,
        source,
        asset,
        max_age_seconds,
        amount,
    )
    .fetch_one(&mut *conn)
    .await?;
    if row.n == 0 {
        return Ok(None);
    }
    // With a snapshot the aggregates are never NULL; were one, the read fails as decoding it did.
    let null = |column: &str| sqlx::Error::ColumnDecode {
        index: format!("{column:?}"),
        source: Box::new(sqlx::error::UnexpectedNullError),
    };
    Ok(Some((
        row.free.ok_or_else(|| null("free"))?,
        row.covers.ok_or_else(|| null("covers"))?,
        row.as_of.ok_or_else(|| null("as_of"))?,
    )))
}
