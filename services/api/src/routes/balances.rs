//! Balances (viewer): the latest snapshot per venue / account / asset with `stale` judged at
//! read time, `fresh=true` to read the venues now (through the same fetchers, stored as a
//! snapshot, bounded by the fetch deadline, at most once per caller per
//! `MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS`), and a venue's history for a chart.

use std::time::Instant;

use axum::extract::State;
use axum::Json;
use qtg_store::balances::{Granularity, Rollup, Snapshot};
use serde::Serialize;

use crate::error::ApiError;
use crate::extract::{ListQuery, Params, Viewer};
use crate::AppState;

/// Venues a `fresh=true` read could not read, with why.
#[derive(Serialize, utoipa::ToSchema)]
pub struct FetchFailure {
    venue_key: String,
    error: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Balances {
    items: Vec<Snapshot>,
    /// With `fresh=true`: the venues that did not answer (their rows are the last stored).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failed: Vec<FetchFailure>,
}

fn text(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

#[utoipa::path(
    get,
    path = "/v3/balances",
    summary = "The latest balance per venue, account and asset, with as_of and stale; fresh=true reads the venues \
               now (429 RATE_LIMITED when the caller asked too recently)",
    description = "Role: viewer. Query: venue, asset, fresh.",
    params(
        ("venue" = Option<String>, Query, description = "one venue_key"),
        ("asset" = Option<String>, Query, description = "one asset (case-insensitive)"),
        ("fresh" = Option<bool>, Query, description = "read the venues now and store the result as a snapshot"),
    ),
    responses(
        (status = 200, description = "balances", body = Balances),
        (
            status = 429,
            description = "RATE_LIMITED: this caller asked for fresh=true within MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS",
            body = crate::openapi::ErrorBody
        ),
    ),
)]
pub async fn list_balances(
    State(s): State<AppState>,
    Viewer(who): Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Balances>, ApiError> {
    let q = q.allow(&["venue", "asset", "fresh"])?;
    if q.limit.is_some() || q.cursor.is_some() {
        return Err(ApiError::validation("balances are not paged: filter with venue and asset"));
    }
    let (venue, asset) = (text(&q.venue), text(&q.asset));
    let fresh = match text(&q.fresh) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(ApiError::validation(format!("fresh must be true or false, not {other:?}"))),
    };
    let mut failed = Vec::new();
    if fresh {
        if venue.is_some_and(|v| !s.engine.registry.balance_fetchers().any(|(k, _)| k == v)) {
            return Err(ApiError::not_found("venue (in this deployment's registry)"));
        }
        s.fresh_allowed(&who.name)?;
        let fetched = s
            .engine
            .fetch_balances(venue, "fresh", s.engine.settings.balances.fetch_timeout)
            .await
            .map_err(ApiError::internal)?;
        failed = fetched.failed.into_iter().map(|(venue_key, error)| FetchFailure { venue_key, error }).collect();
    }
    let mut conn = s.pool.acquire().await?;
    let stale = s.engine.settings.balances.stale.as_secs_f64();
    let items = qtg_store::balances::latest(&mut conn, stale, venue, asset).await?;
    Ok(Json(Balances { items, failed }))
}

/// A balance history: snapshots (`raw`) or rollups (`hour`, `day`).
#[derive(Serialize, utoipa::ToSchema)]
pub struct BalanceHistory {
    /// `raw`, `hour` or `day`.
    granularity: &'static str,
    items: Vec<HistoryItem>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum HistoryItem {
    Snapshot(Snapshot),
    Rollup(Rollup),
}

#[utoipa::path(
    get,
    path = "/v3/balances/history",
    summary = "A venue's history of one asset since a time, oldest first (at most limit): \
               granularity=raw (the default) its snapshots — spread=true cuts the time since `since` into limit \
               intervals, the last snapshot of each per account; hour or day its rollups (first, last, min, max \
               and count per UTC hour or day, kept after the snapshots are gone)",
    description = "Role: viewer. Query: venue and asset (required), granularity (raw|hour|day), since (RFC 3339), \
                   limit, spread (raw only, needs since).",
    params(
        ("venue" = String, Query, description = "the venue_key"),
        ("asset" = String, Query, description = "the asset"),
        ("granularity" = Option<String>, Query, description = "raw (default), hour or day"),
        ("since" = Option<String>, Query, description = "RFC 3339 time"),
        ("limit" = Option<i64>, Query, description = "default 50; 1-200 snapshots, 1-2000 rollups"),
        ("spread" = Option<bool>, Query, description = "raw only — a chart's view: limit intervals since `since`, \
                                                          the last snapshot of each per account"),
    ),
    responses((status = 200, description = "snapshots or rollups", body = BalanceHistory)),
)]
pub async fn balance_history(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<BalanceHistory>, ApiError> {
    let q = q.allow(&["venue", "asset", "since", "spread", "granularity"])?;
    let spread = ListQuery::flag("spread", &q.spread)?;
    let (Some(venue), Some(asset)) = (text(&q.venue), text(&q.asset)) else {
        return Err(ApiError::validation("venue and asset are required"));
    };
    let granularity = match text(&q.granularity) {
        None | Some("raw") => None,
        Some("hour") => Some(Granularity::Hour),
        Some("day") => Some(Granularity::Day),
        Some(other) => {
            return Err(ApiError::validation(format!("granularity must be raw, hour or day, not {other:?}")))
        }
    };
    let since = match text(&q.since) {
        None => None,
        Some(t) => Some(
            chrono::DateTime::parse_from_rfc3339(t)
                .map_err(|_| ApiError::validation("since must be an RFC 3339 time"))?
                .with_timezone(&chrono::Utc),
        ),
    };
    // A chart of rollups reads a period at once: up to 2,000 buckets (e.g. 90 days of 20 accounts).
    let limit = if granularity.is_some() { q.limit_up_to(2000)? } else { q.limit()? };
    let mut conn = s.pool.acquire().await?;
    if let Some(g) = granularity {
        if spread {
            return Err(ApiError::validation("spread=true is for granularity=raw"));
        }
        let items = qtg_store::balances::rollups(&mut conn, g, venue, asset, since, limit).await?;
        return Ok(Json(BalanceHistory {
            granularity: g.as_str(),
            items: items.into_iter().map(HistoryItem::Rollup).collect(),
        }));
    }
    let stale = s.engine.settings.balances.stale.as_secs_f64();
    let items = match (spread, since) {
        (true, Some(since)) => {
            qtg_store::balances::history_spread(&mut conn, stale, venue, asset, since, limit).await?
        }
        (true, None) => return Err(ApiError::validation("spread=true needs since")),
        (false, _) => qtg_store::balances::history(&mut conn, stale, venue, asset, since, limit).await?,
    };
    Ok(Json(BalanceHistory { granularity: "raw", items: items.into_iter().map(HistoryItem::Snapshot).collect() }))
}

impl AppState {
    /// A caller's `fresh=true` read, at most once per `MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS`
    /// (per API process).
    fn fresh_allowed(&self, principal: &str) -> Result<(), ApiError> {
        let min = self.settings.balance_fresh_min_interval;
        let mut last = self.fresh_reads.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if let Some(at) = last.get(principal).filter(|at| now.duration_since(**at) < min) {
            let wait = (min - now.duration_since(*at)).as_secs_f64();
            return Err(ApiError::of(
                qtg_core::codes::RATE_LIMITED,
                format!(
                    "a fresh read was made {:.1} s ago; try again in {wait:.1} s",
                    now.duration_since(*at).as_secs_f64()
                ),
            ));
        }
        last.insert(principal.to_string(), now);
        // Bounded: callers seen longer ago than the interval are forgotten.
        if last.len() > 10_000 {
            last.retain(|_, at| now.duration_since(*at) < min);
        }
        Ok(())
    }
}

#[utoipa::path(
    get,
    path = "/v3/venue-transfers",
    summary = "Withdrawals and deposits cex_transfer_ingest read from the venue accounts' history, newest first, \
               each with the node and movement that explain it (null while none does) and, for a withdrawal nothing \
               explains, when it was alerted",
    description = "Role: viewer. Query: venue, direction (withdrawal, deposit), unexplained (true: only rows no \
                   movement explains), limit, cursor.",
    params(
        crate::extract::PageQuery,
        ("venue" = Option<String>, Query, description = "one venue_key"),
        ("direction" = Option<String>, Query, description = "withdrawal or deposit"),
        ("unexplained" = Option<bool>, Query, description = "only rows no movement explains"),
    ),
    responses((
        status = 200,
        description = "venue transfers",
        body = crate::extract::Page<qtg_store::venue_transfers::VenueTransfer>
    )),
)]
pub async fn list_venue_transfers(
    State(s): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<crate::extract::Page<qtg_store::venue_transfers::VenueTransfer>>, ApiError> {
    let q = q.allow(&["venue", "direction", "unexplained"])?;
    let direction = text(&q.direction);
    if direction.is_some_and(|d| !["withdrawal", "deposit"].contains(&d)) {
        return Err(ApiError::validation("direction must be withdrawal or deposit"));
    }
    let unexplained = match text(&q.unexplained) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::validation("unexplained must be true or false")),
    };
    let limit = q.limit()?;
    let bad = || ApiError::validation("cursor is not one this API returned");
    let before = match q.cursor.as_deref() {
        None => None,
        Some(c) => {
            let (ts, id) = c.split_once('_').ok_or_else(bad)?;
            let micros: i64 = ts.parse().map_err(|_| bad())?;
            Some((
                chrono::DateTime::from_timestamp_micros(micros).ok_or_else(bad)?,
                id.parse::<i64>().map_err(|_| bad())?,
            ))
        }
    };
    let mut conn = s.pool.acquire().await?;
    let rows =
        qtg_store::venue_transfers::list(&mut conn, text(&q.venue), direction, unexplained, before, limit + 1).await?;
    Ok(crate::extract::Page::from_rows(rows, limit, |t| format!("{}_{}", t.first_seen_at.timestamp_micros(), t.id)))
}
