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

/// Deletes snapshots older than `retention_seconds` — with `keep_unrolled`, only those the
/// hourly rollup has already covered (a rollup that is behind keeps its snapshots).
pub async fn delete_older_than(conn: &mut PgConnection, retention_seconds: f64, keep_unrolled: bool) -> Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM balance_snapshots WHERE as_of < now() - make_interval(secs => $1)
           AND (NOT $2 OR as_of < COALESCE((SELECT rolled_until FROM balance_rollup_progress
                                              WHERE granularity = 'hour'), '-infinity'))",
        retention_seconds,
        keep_unrolled
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

/// A granularity of the balance history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    Hour,
    Day,
}

impl Granularity {
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Hour => "hour",
            Granularity::Day => "day",
        }
    }
}

/// One rollup row: a venue / account / asset's snapshots within one UTC hour or day.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rollup {
    /// `hour` or `day`.
    pub granularity: String,
    pub venue_key: String,
    pub account: String,
    pub asset: String,
    /// The bucket's start (UTC hour or day).
    pub bucket_start: DateTime<Utc>,
    /// Decimal strings: the free balance of the bucket's first and last snapshot, its least
    /// and greatest.
    pub free_first: String,
    pub free_last: String,
    pub free_min: String,
    pub free_max: String,
    pub locked_first: String,
    pub locked_last: String,
    pub locked_min: String,
    pub locked_max: String,
    /// How many snapshots the bucket holds.
    pub samples: i64,
    /// The bucket's first and last snapshot's time.
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
}

/// What one roll of a granularity did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rolled {
    /// Buckets written.
    pub buckets: u64,
    /// Rolled up to here now (exclusive); none: nothing to roll yet.
    pub until: Option<DateTime<Utc>>,
}

/// Holds `granularity`'s progress row for this transaction, or `None` when another replica
/// holds it (it is rolling that granularity now). Answers how far it is rolled.
pub async fn lock_progress(conn: &mut PgConnection, granularity: Granularity) -> Result<Option<Option<DateTime<Utc>>>> {
    Ok(sqlx::query_scalar!(
        "SELECT rolled_until FROM balance_rollup_progress WHERE granularity = $1 FOR UPDATE SKIP LOCKED",
        granularity.as_str()
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Rolls every UTC hour that ended at least `lag_seconds` ago and is not rolled yet (from
/// `from`, the progress [`lock_progress`] answered, else the first snapshot's hour) out of the
/// snapshots, and advances the progress — in the caller's transaction, under the progress lock.
/// A bucket already written is left as it is.
pub async fn roll_hours(conn: &mut PgConnection, from: Option<DateTime<Utc>>, lag_seconds: f64) -> Result<Rolled> {
    let row = sqlx::query!(
        r#"WITH bounds AS (
             SELECT COALESCE($1::timestamptz,
                             (SELECT date_trunc('hour', min(as_of), 'UTC') FROM balance_snapshots)) AS lo,
                    date_trunc('hour', now() - make_interval(secs => $2), 'UTC') AS hi
         ), written AS (
             INSERT INTO balance_history (granularity, venue_key, account, asset, bucket_start,
                 free_first, free_last, free_min, free_max, locked_first, locked_last, locked_min, locked_max,
                 samples, first_at, last_at)
             SELECT 'hour', venue_key, account, asset, date_trunc('hour', as_of, 'UTC'),
                    (array_agg(free ORDER BY as_of, id))[1], (array_agg(free ORDER BY as_of DESC, id DESC))[1],
                    min(free), max(free),
                    (array_agg(locked ORDER BY as_of, id))[1], (array_agg(locked ORDER BY as_of DESC, id DESC))[1],
                    min(locked), max(locked), count(*), min(as_of), max(as_of)
               FROM balance_snapshots, bounds
              WHERE as_of >= bounds.lo AND as_of < bounds.hi
              GROUP BY venue_key, account, asset, date_trunc('hour', as_of, 'UTC')
             ON CONFLICT DO NOTHING
             RETURNING 1
         ), advanced AS (
             UPDATE balance_rollup_progress p SET rolled_until = GREATEST(p.rolled_until, b.hi), updated_at = now()
               FROM bounds b WHERE p.granularity = 'hour' AND b.lo IS NOT NULL
             RETURNING p.rolled_until
         )
         SELECT (SELECT count(*) FROM written) AS "buckets!", (SELECT rolled_until FROM advanced) AS until"#,
        from,
        lag_seconds
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Rolled { buckets: row.buckets as u64, until: row.until })
}

/// Rolls every UTC day whose hours are all rolled and that is not rolled yet (from `from`,
/// else the first hour's day) out of the hourly rows, and advances the progress — in the
/// caller's transaction, under the progress lock.
pub async fn roll_days(conn: &mut PgConnection, from: Option<DateTime<Utc>>) -> Result<Rolled> {
    let row = sqlx::query!(
        r#"WITH bounds AS (
             SELECT COALESCE($1::timestamptz,
                             (SELECT date_trunc('day', min(bucket_start), 'UTC') FROM balance_history
                               WHERE granularity = 'hour')) AS lo,
                    (SELECT date_trunc('day', rolled_until, 'UTC') FROM balance_rollup_progress
                      WHERE granularity = 'hour') AS hi
         ), written AS (
             INSERT INTO balance_history (granularity, venue_key, account, asset, bucket_start,
                 free_first, free_last, free_min, free_max, locked_first, locked_last, locked_min, locked_max,
                 samples, first_at, last_at)
             SELECT 'day', venue_key, account, asset, date_trunc('day', bucket_start, 'UTC'),
                    (array_agg(free_first ORDER BY bucket_start))[1],
                    (array_agg(free_last ORDER BY bucket_start DESC))[1],
                    min(free_min), max(free_max),
                    (array_agg(locked_first ORDER BY bucket_start))[1],
                    (array_agg(locked_last ORDER BY bucket_start DESC))[1],
                    min(locked_min), max(locked_max), sum(samples)::bigint, min(first_at), max(last_at)
               FROM balance_history, bounds
              WHERE granularity = 'hour' AND bucket_start >= bounds.lo AND bucket_start < bounds.hi
              GROUP BY venue_key, account, asset, date_trunc('day', bucket_start, 'UTC')
             ON CONFLICT DO NOTHING
             RETURNING 1
         ), advanced AS (
             UPDATE balance_rollup_progress p SET rolled_until = GREATEST(p.rolled_until, b.hi), updated_at = now()
               FROM bounds b WHERE p.granularity = 'day' AND b.lo IS NOT NULL AND b.hi IS NOT NULL
             RETURNING p.rolled_until
         )
         SELECT (SELECT count(*) FROM written) AS "buckets!", (SELECT rolled_until FROM advanced) AS until"#,
        from,
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Rolled { buckets: row.buckets as u64, until: row.until })
}

/// Deletes `granularity`'s rollups whose bucket started more than `retention_seconds` ago.
pub async fn delete_rollups_older_than(
    conn: &mut PgConnection,
    granularity: Granularity,
    retention_seconds: f64,
) -> Result<u64> {
    Ok(sqlx::query!(
        "DELETE FROM balance_history WHERE granularity = $1 AND bucket_start < now() - make_interval(secs => $2)",
        granularity.as_str(),
        retention_seconds
    )
    .execute(&mut *conn)
    .await?
    .rows_affected())
}

/// A venue's rollups of one asset (case-insensitive) at `granularity` since `since`, oldest
/// first (at most `limit`).
pub async fn rollups(
    conn: &mut PgConnection,
    granularity: Granularity,
    venue: &str,
    asset: &str,
    since: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<Rollup>> {
    Ok(sqlx::query_as!(
        Rollup,
        r#"SELECT granularity, venue_key, account, asset, bucket_start,
                  free_first::text AS "free_first!", free_last::text AS "free_last!", free_min::text AS "free_min!",
                  free_max::text AS "free_max!", locked_first::text AS "locked_first!",
                  locked_last::text AS "locked_last!", locked_min::text AS "locked_min!",
                  locked_max::text AS "locked_max!", samples, first_at, last_at
             FROM balance_history
            WHERE granularity = $1 AND venue_key = $2 AND upper(asset) = upper($3)
              AND ($4::timestamptz IS NULL OR bucket_start >= $4)
            ORDER BY bucket_start, account LIMIT $5"#,
        granularity.as_str(),
        venue,
        asset,
        since,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?)
}
