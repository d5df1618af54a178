//! cex_transfer_ingest, black-box: two `qtg-balance` replicas ingest sim_a's and sim_b's
//! withdrawal and deposit history while a CEX→CEX movement runs and someone withdraws from
//! sim_a in the exchange's web UI. qtg's withdrawal is linked to its node, the deposit on sim_b
//! to the movement, and the web withdrawal — which no qtg node explains — is alerted exactly
//! once (one audit row, one callback) between the two replicas; `GET /v3/venue-transfers`
//! shows it all.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unexplained_withdrawal_is_alerted_once_across_two_ingest_replicas() -> anyhow::Result<()> {
    let mut bed = CexBed::start(&CEX_ENV, CEX_ENTRY, false, "cex-demo-template.json").await?;
    // The venue accounts the workers read through ([balances.*], as make run has them).
    let registry =
        bed.env.iter().find(|(k, _)| k == "MG_EXECUTOR_REGISTRY").map(|(_, v)| v.clone()).unwrap_or_default();
    let mut text = std::fs::read_to_string(&registry)?;
    for account in ["sim_a", "sim_b"] {
        text.push_str(&format!(
            "\n[balances.\"{account}\"]\ntransport = \"local\"\nimpl = \"cex\"\n\
             config = {{ venue = \"{account}\", base_url = \"{}\" }}\n",
            bed.venue.base
        ));
    }
    std::fs::write(&registry, text)?;
    bed.env.extend(
        [
            ("MG_CEX_TRANSFER_INGEST_VENUES_CSV", "sim_a,sim_b"),
            ("MG_CEX_TRANSFER_INGEST_INTERVAL_SECONDS", "0.5"),
            ("MG_CEX_TRANSFER_UNEXPLAINED_GRACE_SECONDS", "3"),
            ("MG_CEX_TRANSFER_ALERT_URL", "http://127.0.0.1:9/treasury-alerts"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let ingest = (bed.worker("qtg-balance").await?, bed.worker("qtg-balance").await?);
    let workers = (bed.worker("qtg-dispatcher").await?, bed.worker("qtg-observer").await?);
    let logs = || format!("{}\n{}", ingest.0.log(), ingest.1.log());
    let id = bed.movement("demo.cex.a_to_b", "sim_a", "ingest-1", "100").await?;
    let m = bed.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let web = bed
        .venue
        .admin(
            "POST",
            "/admin/withdrawals",
            Some(
                json!({"account": "sim_a", "coin": "USDT", "network": "ETH", "address": SIM_B_DEPOSIT, "amount": "77"}),
            ),
        )
        .await?;
    let web_id = web["id"].as_str().unwrap_or_default().to_string();
    let (api, key) = (&bed.api, bed.keys.requester.clone());
    let list = |query: &'static str| {
        let key = key.clone();
        async move {
            let v = api.ok("GET", &format!("/v3/venue-transfers{query}"), &key, None, 200).await?;
            anyhow::Ok(v["items"].as_array().cloned().unwrap_or_default())
        }
    };
    wait_until("the web withdrawal alerted", Duration::from_secs(60), || async {
        Ok(list("?unexplained=true&direction=withdrawal").await?.iter().any(|t| t["alerted_at"].is_string()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    // qtg's own withdrawal and the deposit it made are explained by the movement.
    let withdraw = bed.node(&id, "withdraw").await?;
    wait_until("qtg's transfers linked", Duration::from_secs(30), || async {
        let all = list("?venue=sim_a&direction=withdrawal").await?;
        let ours = all.iter().find(|t| t["venue_ref"] != web_id.as_str());
        let deposits = list("?venue=sim_b&direction=deposit").await?;
        Ok(ours.is_some_and(|t| t["request_node_id"] == withdraw.to_string())
            && deposits.iter().any(|d| d["movement_id"] == id.as_str()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    let unexplained = list("?unexplained=true&direction=withdrawal").await?;
    assert_eq!(unexplained.len(), 1, "{unexplained:#?}");
    assert_eq!(
        (unexplained[0]["venue_ref"].as_str(), unexplained[0]["amount"].as_str()),
        (Some(web_id.as_str()), Some("77.00000000"))
    );
    // Once, however many ticks of the two replicas pass.
    ingest.0.wait_ticks("cex_transfer_ingest", 3, Duration::from_secs(30)).await?;
    ingest.1.wait_ticks("cex_transfer_ingest", 3, Duration::from_secs(30)).await?;
    let audits: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_outbox WHERE action = 'venue_transfer.unexplained'")
            .fetch_one(&bed.db.pool)
            .await?;
    let alerts: Vec<Value> = sqlx::query_scalar(
        "SELECT payload FROM movement_callback_outbox WHERE event_type = 'venue_transfer_unexplained'",
    )
    .fetch_all(&bed.db.pool)
    .await?;
    assert_eq!(audits, 1, "one audit row");
    assert_eq!(alerts.len(), 1, "one callback: {alerts:#?}");
    assert_eq!(alerts[0]["data"]["venue_ref"], web_id.as_str());
    assert_eq!(alerts[0]["data"]["account"], "sim_a");
    drop((ingest, workers));
    bed.db.drop_db().await;
    Ok(())
}

/// A venue whose history answers at most 3 rows a read: a read that comes back full is never
/// stored as complete — the same start is read again over half the window — so every row lands,
/// and a second tick writes nothing new.
#[tokio::test]
async fn a_full_page_is_read_again_narrower_and_nothing_is_lost() -> anyhow::Result<()> {
    use chrono::{DateTime, Utc};
    use qtg_executor::{Balance, BalanceFetcher, ExecutorError, TransferPage, VenueTransfer};

    struct Paged {
        at: DateTime<Utc>,
    }
    #[async_trait::async_trait]
    impl BalanceFetcher for Paged {
        async fn fetch(&self) -> Result<Vec<Balance>, ExecutorError> {
            Ok(Vec::new())
        }
        async fn transfers(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<TransferPage, ExecutorError> {
            // Ten withdrawals a minute apart, ending ten minutes before now.
            let all: Vec<VenueTransfer> = (0..10)
                .map(|i| VenueTransfer {
                    account: "paged".into(),
                    direction: "withdrawal",
                    venue_ref: format!("w{i}"),
                    asset: "USDT".into(),
                    network: None,
                    amount: "1".into(),
                    fee: None,
                    address: "0xabc".into(),
                    address_tag: None,
                    tx_id: None,
                    client_id: None,
                    status: "6".into(),
                    occurred_at: Some(self.at - chrono::Duration::minutes(20 - i)),
                })
                .filter(|t| t.occurred_at.is_some_and(|o| o >= from && o <= to))
                .collect();
            let truncated = all.len() >= 3;
            Ok(TransferPage { transfers: all.into_iter().take(3).collect(), truncated })
        }
    }

    let db = TestDb::new().await?;
    let mut registry = qtg_executor::Registry::default();
    registry.insert_balance_fetcher("paged", std::sync::Arc::new(Paged { at: Utc::now() }));
    let mut settings = test_settings();
    settings.ingest.venues = vec!["paged".into()];
    settings.ingest.lookback = Duration::from_secs(3600);
    settings.ingest.overlap = Duration::ZERO;
    let engine = qtg_engine::Engine {
        pool: db.pool.clone(),
        registry: std::sync::Arc::new(registry),
        settings,
        actor: "test".into(),
        shutdown: Default::default(),
    };
    assert_eq!(engine.ingest_venue_transfers_tick().await?, 10, "every row, none cut off");
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM venue_transfers").fetch_one(&db.pool).await?;
    assert_eq!(stored, 10);
    assert_eq!(engine.ingest_venue_transfers_tick().await?, 0, "read again: nothing new to write");
    db.drop_db().await;
    Ok(())
}
