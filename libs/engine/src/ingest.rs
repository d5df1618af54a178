//! cex_transfer_ingest: reads each listed venue account's withdrawal and deposit history
//! (through its `[balances."<venue_key>"]` fetcher, in pages from a cursor the database
//! keeps), upserts it into `venue_transfers`, links each row to the qtg node that explains it,
//! and raises — once, whichever replica gets there first — an audited alert and a
//! `venue_transfer_unexplained` callback for a withdrawal from a treasury account that no qtg
//! node explains: an unauthorised withdrawal is the first thing a treasury wants to know. One
//! venue's failure loses only its own read.

use std::time::Duration;

use chrono::{DateTime, Utc};
use qtg_executor::VenueTransfer;
use qtg_store::audit::AuditRecord;
use qtg_store::venue_transfers::{self as transfers, NewTransfer};
use serde_json::json;

use crate::{Engine, Result};

#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// `MG_CEX_TRANSFER_INGEST_VENUES_CSV`: the `[balances."<venue_key>"]` entries to ingest.
    pub venues: Vec<String>,
    /// `MG_CEX_TRANSFER_INGEST_LOOKBACK_SECONDS`: how far back the first read of a venue goes.
    pub lookback: Duration,
    /// `MG_CEX_TRANSFER_INGEST_PAGE_SECONDS`: the window of one history read.
    pub page: Duration,
    /// `MG_CEX_TRANSFER_INGEST_OVERLAP_SECONDS`: how much behind the cursor each read starts
    /// again (a venue's history lags; statuses change).
    pub overlap: Duration,
    /// `MG_CEX_TRANSFER_UNEXPLAINED_GRACE_SECONDS`: how long a withdrawal may stay unexplained
    /// before it is alerted (qtg's own withdrawal is linked once its node records its id, which
    /// recovery may take a while to do).
    pub unexplained_grace: Duration,
    /// `MG_CEX_TRANSFER_ALERT_URL`, else `MG_CALLBACK_DEFAULT_URL`.
    pub alert_url: Option<String>,
}

impl Default for IngestSettings {
    fn default() -> Self {
        IngestSettings {
            venues: Vec::new(),
            lookback: Duration::from_secs(86_400),
            page: Duration::from_secs(3_600),
            overlap: Duration::from_secs(600),
            unexplained_grace: Duration::from_secs(900),
            alert_url: None,
        }
    }
}

/// History reads one venue takes at most per tick, narrowed ones included (a long backlog is
/// read over several ticks).
const MAX_PAGES: usize = 48;
/// Alerts one tick raises at most.
const ALERT_BATCH: i64 = 50;

/// `d` as a `chrono::Duration`, to the millisecond (saturating).
fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::milliseconds(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Engine {
    /// One ingest of every listed venue, then linking and alerts; the rows written.
    pub async fn ingest_venue_transfers_tick(&self) -> Result<usize> {
        let settings = &self.settings.ingest;
        let mut written = 0;
        for key in &settings.venues {
            match self.ingest_venue(key).await {
                Ok(n) => written += n,
                Err(why) => {
                    tracing::warn!(
                        venue_key = %key, error = %why,
                        "cex_transfer_ingest: the venue's history was not read; the other venues are"
                    )
                }
            }
        }
        let mut conn = self.pool.acquire().await?;
        let within = settings.lookback.max(settings.unexplained_grace).as_secs_f64() * 2.0;
        let linked = transfers::link(&mut conn, within).await?;
        if linked > 0 {
            tracing::info!(linked, "venue transfers linked to the nodes that explain them");
        }
        drop(conn);
        self.alert_unexplained().await?;
        Ok(written)
    }

    /// Reads `venue_key`'s history from its cursor (less the overlap) to the venue's time, page
    /// by page, each page upserted and the cursor moved in one transaction.
    async fn ingest_venue(&self, venue_key: &str) -> std::result::Result<usize, String> {
        let settings = &self.settings.ingest;
        let timeout = self.settings.balances.fetch_timeout;
        let Some((_, fetcher)) = self.registry.balance_fetchers().find(|(k, _)| k.as_str() == venue_key) else {
            return Err(format!(
                "MG_CEX_TRANSFER_INGEST_VENUES_CSV names {venue_key:?}, which is no [balances.\"{venue_key}\"] \
                 entry of the registry"
            ));
        };
        let fetcher = fetcher.clone();
        let now = bounded(timeout, fetcher.venue_time()).await?;
        let cursor = {
            let mut conn = self.pool.acquire().await.map_err(|e| e.to_string())?;
            transfers::cursor(&mut conn, venue_key).await.map_err(|e| e.to_string())?
        };
        let mut from = cursor.unwrap_or(now - chrono_of(settings.lookback)) - chrono_of(settings.overlap);
        let page = chrono_of(settings.page.max(Duration::from_secs(1)));
        let mut span = page;
        let mut written = 0;
        for _ in 0..MAX_PAGES {
            if from >= now {
                break;
            }
            let to = (from + span).min(now);
            let read = bounded(timeout, fetcher.transfers(from, to)).await?;
            if read.truncated && to - from > chrono::Duration::seconds(1) {
                // As many rows as the venue answers in one read: some may be missing. The same
                // start again, over half the window; the cursor does not move past a cut list.
                span = (to - from) / 2;
                continue;
            }
            if read.truncated {
                tracing::warn!(
                    venue_key, %from, %to,
                    "a one-second window fills the venue's page: rows of it may be missing"
                );
            }
            written += self.store_page(venue_key, &read.transfers, to).await.map_err(|e| e.to_string())?;
            from = to;
            span = page;
        }
        Ok(written)
    }

    async fn store_page(&self, venue_key: &str, rows: &[VenueTransfer], to: DateTime<Utc>) -> Result<usize> {
        let new: Vec<NewTransfer<'_>> = rows
            .iter()
            .map(|t| NewTransfer {
                account: &t.account,
                direction: t.direction,
                venue_ref: &t.venue_ref,
                asset: &t.asset,
                network: t.network.as_deref(),
                amount: &t.amount,
                fee: t.fee.as_deref(),
                address: &t.address,
                address_tag: t.address_tag.as_deref(),
                tx_id: t.tx_id.as_deref(),
                client_id: t.client_id.as_deref(),
                status: &t.status,
                occurred_at: t.occurred_at,
            })
            .collect();
        let mut tx = self.pool.begin().await?;
        let written = transfers::upsert(&mut tx, venue_key, &new).await?;
        transfers::advance_cursor(&mut tx, venue_key, to).await?;
        tx.commit().await?;
        Ok(written as usize)
    }

    /// Each withdrawal unexplained past the grace: marked alerted (compare-and-set), audited
    /// and told to the alert URL, in one transaction — once, across replicas.
    async fn alert_unexplained(&self) -> Result<()> {
        let settings = &self.settings.ingest;
        let due = {
            let mut conn = self.pool.acquire().await?;
            transfers::unexplained_due(&mut conn, settings.unexplained_grace.as_secs_f64(), ALERT_BATCH).await?
        };
        for t in due {
            let mut tx = self.pool.begin().await?;
            if !transfers::mark_alerted(&mut tx, t.id).await? {
                continue;
            }
            let data = json!({
                "venue_transfer_id": t.id, "venue_key": t.venue_key, "account": t.account, "venue_ref": t.venue_ref,
                "asset": t.asset, "network": t.network, "amount": t.amount, "fee": t.fee, "address": t.address,
                "address_tag": t.address_tag, "tx_id": t.tx_id, "status": t.status, "occurred_at": t.occurred_at,
                "first_seen_at": t.first_seen_at,
                "reason": "a withdrawal from this venue account that no qtg movement explains",
            });
            AuditRecord::new(&self.actor, "venue_transfer.unexplained", "venue_transfer", t.id)
                .data(data.clone())
                .record(&mut tx)
                .await?;
            match settings.alert_url.as_deref() {
                Some(url) => {
                    qtg_store::callbacks::enqueue_event(&mut tx, None, "venue_transfer_unexplained", url, &data).await?
                }
                None => tracing::warn!(venue_transfer_id = t.id, "unexplained withdrawal; no alert URL to tell"),
            }
            tx.commit().await?;
            tracing::error!(
                venue_key = %t.venue_key, account = %t.account, venue_ref = %t.venue_ref, asset = %t.asset,
                amount = %t.amount, address = %t.address,
                "UNEXPLAINED_WITHDRAWAL: a withdrawal from a treasury account that no qtg movement explains"
            );
        }
        Ok(())
    }
}

async fn bounded<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = std::result::Result<T, qtg_executor::ExecutorError>>,
) -> std::result::Result<T, String> {
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {} s", timeout.as_secs_f64())),
    }
}
