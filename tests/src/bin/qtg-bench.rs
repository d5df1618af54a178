//! `make bench`: drives movements of a sequential K-node sim template through separately
//! started release binaries (seed default intervals; speed comes from draining and NOTIFY)
//! and prints throughput and latency next to this machine's raw Postgres ceiling for one
//! audited transition, measured by pgbench in the same run (`QTG_BENCH_PGBENCH` JSON).
//!
//! Settings: QTG_BENCH_MOVEMENTS (N, 200), QTG_BENCH_NODES (K, 4), QTG_BENCH_SEQUENTIAL (20),
//! QTG_BENCH_DISPATCHERS (2), QTG_BENCH_DISPATCHER_CONCURRENCY (4), QTG_BENCH_WORKER_LOG
//! (RUST_LOG of the workers; with QTG_TEST_ECHO=1 their logs are echoed).

use std::time::{Duration, Instant};

use anyhow::Context;
use qtg_tests::*;
use serde_json::{json, Value};
use sqlx::Row;

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n = env_usize("QTG_BENCH_MOVEMENTS", 200);
    let k = env_usize("QTG_BENCH_NODES", 4);
    let seq = env_usize("QTG_BENCH_SEQUENTIAL", 20);
    let pg: Value = serde_json::from_str(&std::env::var("QTG_BENCH_PGBENCH").unwrap_or_else(|_| "{}".into()))?;

    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[("RUST_LOG", "warn,qtg_api=info,qtg_runtime::admin=info")]).await?;
    let log = std::env::var("QTG_BENCH_WORKER_LOG").unwrap_or_else(|_| "warn,qtg_runtime::admin=info".into());
    let dispatchers = env_usize("QTG_BENCH_DISPATCHERS", 2);
    let concurrency = std::env::var("QTG_BENCH_DISPATCHER_CONCURRENCY").unwrap_or_else(|_| "4".into());
    let quiet = [("RUST_LOG", log.as_str()), ("MG_DB_POOL_SIZE", "8")];
    let conc = [
        ("RUST_LOG", log.as_str()),
        ("MG_DB_POOL_SIZE", "8"),
        ("MG_DISPATCHER_CONCURRENCY", concurrency.as_str()),
        ("MG_OBSERVER_CONCURRENCY", "2"),
    ];
    let mut procs = Vec::new();
    for _ in 0..dispatchers {
        procs.push(Proc::spawn("qtg-dispatcher", &db.url, &conc).await?);
    }
    procs.push(Proc::spawn("qtg-observer", &db.url, &conc).await?);
    procs.push(Proc::spawn("qtg-recovery", &db.url, &quiet).await?);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let keys = Keys::create(&api).await?;
    let nodes: Vec<Value> = (0..k)
        .map(|i| {
            json!({"node_key": format!("s{i:02}"), "node_kind": "action", "action_type": "transfer",
                        "executor_key": "exec.sim.transfer", "config": {"sim": {"submit_result": "completed"}}})
        })
        .collect();
    let edges: Vec<Value> =
        (1..k).map(|i| json!({"from": format!("s{:02}", i - 1), "to": format!("s{i:02}")})).collect();
    install_template(&api, &keys, json!({"template_key": "bench.chain", "nodes": nodes, "edges": edges})).await?;

    // Phase 1: one movement at a time — per-step overhead and approve→first-submit latency.
    let mut seq_ids = Vec::new();
    for i in 0..seq {
        let id = start_movement(&api, &keys, "bench.chain", &format!("seq-{i}"), None).await?;
        wait_state(&api, &keys.requester, &id, &["COMPLETED"], Duration::from_secs(60)).await?;
        seq_ids.push(id);
    }

    // Phase 2: N movements created, then approved as fast as the API takes them.
    let mut ids = Vec::new();
    for i in 0..n {
        let m = api
            .ok(
                "POST",
                "/v3/movements",
                &keys.requester,
                Some(json!({"template_key": "bench.chain",
                "intent": {"asset": "USDC", "amount": "1"}, "idempotency_key": format!("load-{i}")})),
                201,
            )
            .await?;
        ids.push(m["id"].as_str().context("id")?.to_string());
    }
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for id in &ids {
        let (http, url, key) =
            (api.http.clone(), format!("{}/v3/movements/{id}/approve", api.base), keys.approver.clone());
        set.spawn(async move { http.post(url).bearer_auth(key).send().await.map(|r| r.status().as_u16()) });
    }
    while let Some(r) = set.join_next().await {
        anyhow::ensure!(r?? == 200, "approve failed");
    }
    loop {
        let done: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_requests WHERE request_state = 'COMPLETED' AND idempotency_key LIKE 'load-%'")
            .fetch_one(&db.pool)
            .await?;
        if done as usize == n {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "load phase did not finish: {done}/{n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let window: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(completed_at) - min(approved_at))::float8 FROM movement_requests WHERE idempotency_key LIKE 'load-%'",
    )
    .fetch_one(&db.pool)
    .await?;
    let window = window.unwrap_or(f64::NAN);
    let row = sqlx::query(
        "SELECT
           (SELECT count(*) FROM node_events e JOIN movement_requests r ON r.id = e.request_id
             WHERE e.kind = 'transition' AND r.idempotency_key LIKE 'load-%') AS node_transitions,
           (SELECT count(*) FROM audit_outbox a JOIN movement_requests r ON r.id = a.movement_id
             WHERE a.action IN ('node.transition', 'movement.transition') AND r.idempotency_key LIKE 'load-%') AS audited",
    )
    .fetch_one(&db.pool)
    .await?;
    let node_transitions: i64 = row.get("node_transitions");
    let audited: i64 = row.get("audited");

    let step_ms = |pattern: &'static str| {
        let pool = db.pool.clone();
        async move {
            let v: Vec<Option<f64>> = sqlx::query_scalar(
                "SELECT extract(epoch FROM n.completed_at - lag(n.completed_at) OVER (PARTITION BY n.request_id ORDER BY n.node_key))::float8 * 1000
                 FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id WHERE r.idempotency_key LIKE $1",
            )
            .bind(pattern)
            .fetch_all(&pool)
            .await?;
            anyhow::Ok(sorted(v.into_iter().flatten().collect()))
        }
    };
    let first_submit_ms = |pattern: &'static str| {
        let pool = db.pool.clone();
        async move {
            let v: Vec<f64> = sqlx::query_scalar(
                "SELECT extract(epoch FROM min(n.started_at) - r.approved_at)::float8 * 1000
                 FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
                 WHERE r.idempotency_key LIKE $1 GROUP BY r.id, r.approved_at",
            )
            .bind(pattern)
            .fetch_all(&pool)
            .await?;
            anyhow::Ok(sorted(v))
        }
    };
    let seq_steps = step_ms("seq-%").await?;
    let seq_first = first_submit_ms("seq-%").await?;
    let load_steps = step_ms("load-%").await?;
    let load_first = first_submit_ms("load-%").await?;

    let pg1_ms = pg["1"]["latency_ms"].as_f64().unwrap_or(f64::NAN);
    let best_tps = ["1", "2", "4", "8"].iter().filter_map(|c| pg[c]["tps"].as_f64()).fold(f64::NAN, f64::max);
    println!();
    println!("qtg bench — {k}-node sequential sim chain (submit completes), release build, seed default intervals");
    println!("workers: {dispatchers} x qtg-dispatcher (concurrency {concurrency}), 1 x qtg-observer (concurrency 2), 1 x qtg-recovery, qtg-api; 2 cores");
    println!();
    println!("raw Postgres ceiling (pgbench: SKIP LOCKED claim + update + two inserts, commit):");
    for c in ["1", "2", "4", "8"] {
        println!(
            "  {c} client(s): {:>8.0} tx/s   latency {:>6.2} ms",
            pg[c]["tps"].as_f64().unwrap_or(f64::NAN),
            pg[c]["latency_ms"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!();
    println!("load: {n} movements x {k} nodes, approved at once");
    println!("  movements/s                {:>8.1}", n as f64 / window);
    println!("  node transitions/s         {:>8.1}", node_transitions as f64 / window);
    println!(
        "  audited transitions/s      {:>8.1}   ({:.2} of the best pgbench tx/s {best_tps:.0})",
        audited as f64 / window,
        audited as f64 / window / best_tps
    );
    println!("  per-step ms p50/p99        {:>8.1} / {:.1}", pct(&load_steps, 50.0), pct(&load_steps, 99.0));
    println!("  approve→first submit p50/p99 {:>6.1} / {:.1} ms", pct(&load_first, 50.0), pct(&load_first, 99.0));
    println!();
    println!("sequential: {seq} movements one at a time");
    println!(
        "  per-step ms p50/p99        {:>8.1} / {:.1}   (p50 = {:.1} x the 1-client pgbench transition {pg1_ms:.2} ms)",
        pct(&seq_steps, 50.0),
        pct(&seq_steps, 99.0),
        pct(&seq_steps, 50.0) / pg1_ms
    );
    println!("  approve→first submit p50/p99 {:>6.1} / {:.1} ms", pct(&seq_first, 50.0), pct(&seq_first, 99.0));
    println!();

    for p in &mut procs {
        p.signal("TERM");
        let _ = p.wait_exit(Duration::from_secs(20)).await;
    }
    drop(api);
    db.drop_db().await;
    Ok(())
}
