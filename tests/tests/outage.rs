//! Workers survive Postgres going away: a dispatcher and an observer reach the database
//! through a proxy the test cuts — every connection dropped, new ones refused. Their
//! `/readyz` goes 503, a movement approved meanwhile waits, and once the database is back the
//! same processes (no restart) report ready again and complete it.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

async fn ready(p: &Proc) -> anyhow::Result<u16> {
    let admin = p.wait_field("admin_addr", Duration::from_secs(10)).await?;
    Ok(http_client().get(format!("http://{admin}/readyz")).send().await?.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_reconnect_after_the_database_comes_back() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let proxy = DbProxy::start(&db.url).await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    let t: Value = serde_json::from_str(&std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo-template.json"),
    )?)?;
    install_template(&api, &keys, t).await?;
    let env = [("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2"), ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2")];
    let mut dispatcher = Proc::spawn("qtg-dispatcher", &proxy.url, &env).await?;
    let observer = Proc::spawn("qtg-observer", &proxy.url, &env).await?;
    let movement = |idem: &'static str| {
        let (api, keys) = (&api, &keys);
        async move {
            let body = json!({"template_key": "demo.sim.transfer", "idempotency_key": idem,
                "intent": {"asset": "USDC", "amount": "10", "source": "venue-a", "destination": "0xabc"}});
            let m = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
            let id = m["id"].as_str().unwrap_or_default().to_string();
            api.ok("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, None, 200).await?;
            anyhow::Ok(id)
        }
    };
    let done = |id: String| {
        let (api, keys) = (&api, &keys);
        async move {
            wait_state(
                api,
                &keys.requester,
                &id,
                &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
                Duration::from_secs(60),
            )
            .await
        }
    };
    let first = movement("outage-1").await?;
    assert_eq!(done(first).await?["request_state"], "COMPLETED");
    wait_until("ready", Duration::from_secs(20), || async { Ok(ready(&dispatcher).await? == 200) }).await?;
    // The database goes away for the workers.
    proxy.cut();
    wait_until("not ready while the database is gone", Duration::from_secs(30), || async {
        Ok(ready(&dispatcher).await? == 503 && ready(&observer).await? == 503)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", dispatcher.log()))?;
    let second = movement("outage-2").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, m) = api.call("GET", &format!("/v3/movements/{second}"), &keys.requester, None).await?;
    assert_eq!(m["request_state"], "APPROVED", "nothing ran without the database: {m:#}");
    // Back: the same processes reconnect, report ready and finish the work.
    proxy.restore();
    wait_until("ready again", Duration::from_secs(60), || async {
        Ok(ready(&dispatcher).await? == 200 && ready(&observer).await? == 200)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", dispatcher.log()))?;
    let m = done(second).await.map_err(|e| anyhow::anyhow!("{e}\n{}", dispatcher.log()))?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    assert!(dispatcher.wait_exit(Duration::from_millis(100)).await.is_err(), "the dispatcher never exited");
    drop((dispatcher, observer));
    db.drop_db().await;
    Ok(())
}
