//! `qtg` (API + every worker in one process) runs a movement to COMPLETED, serves its admin
//! endpoints, keeps heartbeats per network class, and stops cleanly on SIGTERM.

use std::time::Duration;

use qtg_tests::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_all_in_one_binary_runs_a_movement_and_serves_admin() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let qtg =
        Proc::spawn("qtg", &db.url, &[("MG_API_BOOTSTRAP_ADMIN_KEY", BOOTSTRAP_KEY), ("MG_NETWORK_CLASS", "mainnet")])
            .await?;
    let addr = qtg.wait_field("api_addr", Duration::from_secs(30)).await?;
    let admin = qtg.wait_field("admin_addr", Duration::from_secs(30)).await?;
    let mut api =
        Api { proc: qtg, base: format!("http://{addr}"), http: http_client(), admin_key: BOOTSTRAP_KEY.into() };
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.aio", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"},
        {
            "node_key": "b", "node_kind": "observe", "action_type": "deposit_observe",
            "executor_key": "exec.sim.observe", "config": {"sim": {"submit_result": "completed"}}
        },
    ], "edges": [{"from": "a", "to": "b"}]}),
    )
    .await?;
    let id = start_movement(&api, &keys, "t.aio", "aio-1", None).await?;
    let m = wait_state(
        &api,
        &keys.requester,
        &id,
        &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
        Duration::from_secs(60),
    )
    .await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");

    let http = http_client();
    let get = |path: &str| http.get(format!("http://{admin}{path}")).send();
    let health = get("/healthz").await?;
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(get("/readyz").await?.status().as_u16(), 200);
    let metrics = get("/metrics").await?.text().await?;
    assert!(metrics.contains("qtg_worker_items_processed_total{worker=\"node_dispatcher\"}"), "{metrics}");
    assert!(metrics.contains("qtg_worker_tick_duration_seconds_bucket"), "{metrics}");
    for signal in [
        "qtg_oldest_unknown_node_age_seconds 0",
        "qtg_oldest_stale_submitting_node_age_seconds 0",
        "qtg_oldest_manual_intervention_age_seconds 0",
        "qtg_oldest_observing_node_age_seconds 0",
        "qtg_callback_dlq_size 0",
        "qtg_outbox_backlog{outbox=\"callback\"} 0",
        "qtg_worker_heartbeat_age_seconds{worker=\"node_dispatcher\"}",
    ] {
        assert!(metrics.contains(signal), "missing {signal}:\n{metrics}");
    }
    let beats: Vec<(String, String)> =
        sqlx::query_as("SELECT worker, network_class FROM worker_heartbeats ORDER BY worker")
            .fetch_all(&db.pool)
            .await?;
    for w in ["node_dispatcher", "node_observer", "node_recovery"] {
        assert!(beats.iter().any(|(n, c)| n == w && c == "mainnet"), "{w} heartbeat: {beats:?}");
    }

    api.proc.signal("TERM");
    assert_eq!(api.proc.wait_exit(Duration::from_secs(20)).await?, Some(0), "log:\n{}", api.proc.log());
    db.drop_db().await;
    Ok(())
}

#[tokio::test]
async fn migrate_only_applies_the_schema_and_exits() -> anyhow::Result<()> {
    let db = TestDb::empty().await?;
    let mut job = Proc::spawn_args("qtg-dispatcher", &["--migrate-only"], &db.url, &[]).await?;
    assert_eq!(job.wait_exit(Duration::from_secs(30)).await?, Some(0), "{}", job.log());
    // Every migration file in migrations/ ran, by version, and succeeded.
    let mut files: Vec<i64> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.split('_').next()?.parse().ok())
        .collect();
    files.sort();
    assert!(files.len() >= 7, "migration files: {files:?}");
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(&db.pool)
        .await?;
    assert_eq!(applied, files, "applied migrations vs migrations/");
    // And the schema of the last one is there.
    let lease_column: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'movement_request_nodes' AND \
         column_name = 'claim_token'",
    )
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(lease_column, 1, "0007's columns exist");
    db.drop_db().await;
    Ok(())
}

/// `--print-config` prints every effective setting of the binary — its workers' included — as
/// `KEY=value`, secrets masked, and exits without touching the database.
#[test]
fn print_config_shows_every_setting_and_no_secret() -> anyhow::Result<()> {
    let run = |binary: &str| {
        std::process::Command::new(bin_dir().join(binary))
            .arg("--print-config")
            .env_clear()
            .env("MG_DATABASE_URL", "postgres://qtg:pa55-w0rd@db.invalid:5432/qtg")
            .env("MG_CALLBACK_SECRET", "whsec-do-not-print")
            .env("MG_API_BOOTSTRAP_ADMIN_KEY", "bootstrap-key-do-not-print")
            .env("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.5")
            .output()
    };
    let out = run("qtg-dispatcher")?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout)?;
    for line in [
        "MG_DATABASE_URL=postgres://qtg:***@db.invalid:5432/qtg",
        "MG_CALLBACK_SECRET=***",
        "MG_API_BOOTSTRAP_ADMIN_KEY=***",
        "MG_NODE_DISPATCH_INTERVAL_SECONDS=0.5",
        "MG_DISPATCHER_CONCURRENCY=1",
        "MG_EXPIRATION_CHECK_INTERVAL_SECONDS=30",
        "MG_SUBMIT_WINDOW_SECONDS=40",
        "MG_DISPATCH_LEASE_SECONDS=100",
        "MG_EXECUTOR_REGISTRY=(unset)",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
    }
    assert!(!text.contains("pa55-w0rd") && !text.contains("do-not-print"), "{text}");
    assert!(text.lines().all(|l| l.starts_with("MG_") || l.starts_with("OTEL_")), "{text}");
    // A bad value is refused by name, before anything starts.
    let bad = std::process::Command::new(bin_dir().join("qtg"))
        .arg("--print-config")
        .env_clear()
        .env("MG_DATABASE_URL", "postgres://h/db")
        .env("MG_OBSERVER_CONCURRENCY", "0")
        .output()?;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("MG_OBSERVER_CONCURRENCY"));
    Ok(())
}
