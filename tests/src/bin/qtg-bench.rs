//! `make bench`: drives movements of a sequential K-node sim template through separately
//! started release binaries (seed default intervals; speed comes from draining and NOTIFY)
//! and prints throughput and latency next to this machine's raw Postgres ceiling for one
//! audited transition, measured by pgbench in the same run (`QTG_BENCH_PGBENCH` JSON).
//!
//! Then: the fan-out case (8 branches on a remote executor whose prepare and signer each take
//! 500 ms, dispatcher concurrency 8: approve → last submit, and the dispatcher's connections
//! busy while the calls are in flight), scaling with 1, 2 and 4 dispatcher + observer
//! replicas, the idle load (transactions per second per idle process) and worker RSS.
//!
//! Settings: QTG_BENCH_MOVEMENTS (N, 200), QTG_BENCH_NODES (K, 4), QTG_BENCH_SEQUENTIAL (20),
//! QTG_BENCH_DISPATCHERS (2), QTG_BENCH_DISPATCHER_CONCURRENCY (4), QTG_BENCH_SCALING_MOVEMENTS
//! (100), QTG_BENCH_WORKER_LOG (RUST_LOG of the workers; with QTG_TEST_ECHO=1 their logs are
//! echoed).

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
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM movement_requests WHERE request_state = 'COMPLETED' AND \
             idempotency_key LIKE 'load-%'",
        )
        .fetch_one(&db.pool)
        .await?;
        if done as usize == n {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "load phase did not finish: {done}/{n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let window: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(completed_at) - min(approved_at))::float8 FROM movement_requests WHERE \
         idempotency_key LIKE 'load-%'",
    )
    .fetch_one(&db.pool)
    .await?;
    let window = window.unwrap_or(f64::NAN);
    let row = sqlx::query(
        "SELECT
           (SELECT count(*) FROM node_events e JOIN movement_requests r ON r.id = e.request_id
             WHERE e.kind = 'transition' AND r.idempotency_key LIKE 'load-%') AS node_transitions,
           (SELECT count(*) FROM audit_outbox a JOIN movement_requests r ON r.id = a.movement_id
             WHERE a.action IN ('node.transition', 'movement.transition') AND r.idempotency_key LIKE \
                 'load-%') AS audited",
    )
    .fetch_one(&db.pool)
    .await?;
    let node_transitions: i64 = row.get("node_transitions");
    let audited: i64 = row.get("audited");

    let step_ms = |pattern: &'static str| {
        let pool = db.pool.clone();
        async move {
            let v: Vec<Option<f64>> = sqlx::query_scalar(
                "SELECT extract(epoch FROM n.completed_at - lag(n.completed_at) OVER (PARTITION BY n.request_id \
                 ORDER BY n.node_key))::float8 * 1000
                 FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id WHERE \
                     r.idempotency_key LIKE $1",
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
    println!(
        "workers: {dispatchers} x qtg-dispatcher (concurrency {concurrency}), 1 x qtg-observer (concurrency 2), 1 \
         x qtg-recovery, qtg-api; 2 cores"
    );
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

    let rss: Vec<(String, f64)> = procs.iter().map(|p| (format!("{} (after load)", p.name), rss_mib(p))).collect();
    for (name, mib) in &rss {
        println!("  RSS {name:<28} {mib:>6.1} MiB");
    }
    println!();

    for p in &mut procs {
        p.signal("TERM");
        let _ = p.wait_exit(Duration::from_secs(20)).await;
    }
    drop(api);
    db.drop_db().await;

    let (idle_procs, idle_per_proc) = idle(dispatchers, &concurrency).await?;
    println!(
        "idle: {idle_procs} processes (API, {dispatchers} dispatchers, observer, recovery) on a fresh database, 20 s"
    );
    println!(
        "  transactions/s per idle process {idle_per_proc:>6.2}   (aim <= 1; every idle statement is its \
         own transaction)"
    );
    println!();

    let fan = fan_out().await?;
    println!("fan-out: 8 branches, remote executor prepare 500 ms + signer 500 ms, dispatcher concurrency 8");
    println!("  approve → last submit      {:>8.2} s   (aim < 2 s; serialised would be ~8 s)", fan.last_submit_s);
    println!(
        "  dispatcher connections busy while all 8 calls were in flight: max {} over {} samples (aim 0)",
        fan.held_max, fan.samples
    );
    println!();

    let m = env_usize("QTG_BENCH_SCALING_MOVEMENTS", 100);
    println!("scaling: {m} movements x {k} nodes, r x qtg-dispatcher (concurrency 4) + r x qtg-observer");
    let mut scaling = Vec::new();
    for r in [1, 2, 4] {
        let (tps, mps) = scale(r, m, k).await?;
        println!(
            "  r = {r}: {:>7.1} audited transitions/s ({:.2} of best pgbench), {:>6.1} movements/s",
            tps,
            tps / best_tps,
            mps
        );
        scaling.push((r, tps));
    }
    println!();

    // One block to paste into docs/benchmarks.md.
    let commits_per_step = 4.0;
    let seq_p50 = pct(&seq_steps, 50.0);
    println!("| figure | value | ratio to the same-run ceiling |");
    println!("|---|---|---|");
    println!("| pgbench best (tx/s) | {best_tps:.0} | 1.00 |");
    println!("| pgbench 1-client transition (ms) | {pg1_ms:.2} | 1.00 |");
    println!(
        "| sequential per-step overhead p50 (ms) | {seq_p50:.1} | {:.1} x one transition = {:.2} x (transition x \
         {commits_per_step:.0} commits); target <= 3 |",
        seq_p50 / pg1_ms,
        seq_p50 / (pg1_ms * commits_per_step)
    );
    println!(
        "| load audited transitions/s | {:.0} | {:.2} of best pgbench; target >= 0.7 |",
        audited as f64 / window,
        audited as f64 / window / best_tps
    );
    for (r, tps) in &scaling {
        println!("| scaling r = {r} (audited transitions/s) | {tps:.0} | {:.2} |", tps / best_tps);
    }
    println!("| fan-out approve → last submit (s) | {:.2} | aim < 2 |", fan.last_submit_s);
    println!("| dispatcher connections busy during slow calls | {} | aim 0 |", fan.held_max);
    println!("| idle transactions/s per process ({idle_procs} processes) | {idle_per_proc:.2} | aim <= 1 |");
    for (name, mib) in &rss {
        println!("| RSS {name} (MiB) | {mib:.1} | — |");
    }
    Ok(())
}

/// The idle load: the bench's process set on a fresh database (no autovacuum work), 10 s.
async fn idle(dispatchers: usize, concurrency: &str) -> anyhow::Result<(usize, f64)> {
    let db = TestDb::new().await?;
    // Autovacuum's own transactions count in pg_stat_database: keep them out of the figure.
    sqlx::query(
        "DO $$ DECLARE t text; BEGIN
           FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'public' LOOP
             EXECUTE format('ALTER TABLE %I SET (autovacuum_enabled = false)', t);
           END LOOP; END $$",
    )
    .execute(&db.pool)
    .await?;
    let api = Api::start(&db.url, &[("RUST_LOG", "warn,qtg_api=info")]).await?;
    let env = [
        ("RUST_LOG", "warn,qtg_runtime::admin=info"),
        ("MG_DISPATCHER_CONCURRENCY", concurrency),
        ("MG_OBSERVER_CONCURRENCY", "2"),
    ];
    let mut procs = Vec::new();
    for _ in 0..dispatchers {
        procs.push(Proc::spawn("qtg-dispatcher", &db.url, &env).await?);
    }
    procs.push(Proc::spawn("qtg-observer", &db.url, &env).await?);
    procs.push(Proc::spawn("qtg-recovery", &db.url, &env).await?);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let window = 20.0;
    let before = xact_count(&db.pool).await?;
    tokio::time::sleep(Duration::from_secs_f64(window)).await;
    // Less this function's own two statements.
    let xacts = xact_count(&db.pool).await? - before - 2;
    let n = procs.len() + 1;
    for p in &mut procs {
        p.signal("TERM");
        let _ = p.wait_exit(Duration::from_secs(20)).await;
    }
    drop(api);
    db.drop_db().await;
    Ok((n, xacts as f64 / window / n as f64))
}

async fn xact_count(pool: &sqlx::PgPool) -> anyhow::Result<i64> {
    // Statistics reach pg_stat_database within a second of each backend's transaction.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    Ok(sqlx::query_scalar(
        "SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await?)
}

fn rss_mib(p: &Proc) -> f64 {
    let Some(pid) = p.pid() else { return f64::NAN };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

struct FanOut {
    last_submit_s: f64,
    held_max: i64,
    samples: usize,
}

/// 8 parallel branches on the reference remote executor (prepare 500 ms, signer 500 ms).
async fn fan_out() -> anyhow::Result<FanOut> {
    let db = TestDb::new().await?;
    let remote = start_example(&db, 5000, &[("EXAMPLE_SIGN_DELAY_MS", "500")]).await?;
    let reg = remote.registry.to_string_lossy().to_string();
    let env = [
        ("MG_EXECUTOR_REGISTRY", reg.as_str()),
        ("QTG_EXAMPLE_SECRET", EXAMPLE_HMAC_SECRET),
        ("MG_EXECUTOR_TIMEOUT_MS", "5000"),
        ("MG_DISPATCHER_CONCURRENCY", "8"),
        ("MG_DB_POOL_SIZE", "8"),
        ("RUST_LOG", "warn,qtg_api=info,qtg_runtime::admin=info"),
    ];
    let api = Api::start(&db.url, &env).await?;
    let dispatcher = Proc::spawn("qtg-dispatcher", &db.url, &env).await?;
    let keys = Keys::create(&api).await?;
    let nodes: Vec<Value> = (0..8)
        .map(|i| {
            json!({"node_key": format!("b{i}"), "node_kind": "action", "action_type": "transfer",
                   "executor_key": "exec.ex.http", "signing_required": true, "signer_key": "signer.ex.http",
                   "config": {"example": {"slow": {"prepare": 500}}}})
        })
        .collect();
    install_template(&api, &keys, json!({"template_key": "bench.fan", "nodes": nodes})).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let id = start_movement(&api, &keys, "bench.fan", "fan-1", None).await?;
    let (mut held_max, mut samples) = (0i64, 0usize);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (in_calls, held, armed): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM movement_request_nodes WHERE request_id = $1::uuid
                       AND node_state IN ('PREPARING', 'AWAITING_SIGNATURE')),
                    (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                       AND application_name = 'qtg-dispatcher' AND state <> 'idle'),
                    (SELECT count(*) FROM movement_request_nodes WHERE request_id = $1::uuid AND \
                        started_at IS NOT NULL)",
        )
        .bind(&id)
        .fetch_one(&db.pool)
        .await?;
        if in_calls == 8 {
            samples += 1;
            held_max = held_max.max(held);
        }
        if armed == 8 {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the fan-out never armed its 8 branches");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last_submit_s: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(n.started_at) - r.approved_at)::float8
         FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
         WHERE r.id = $1::uuid GROUP BY r.approved_at",
    )
    .bind(&id)
    .fetch_one(&db.pool)
    .await?;
    drop((dispatcher, api, remote));
    db.drop_db().await;
    Ok(FanOut { last_submit_s, held_max, samples })
}

/// `m` movements of the K-node chain through `r` dispatchers and `r` observers; returns
/// (audited transitions/s, movements/s).
async fn scale(r: usize, m: usize, k: usize) -> anyhow::Result<(f64, f64)> {
    let db = TestDb::new().await?;
    let log = [("RUST_LOG", "warn,qtg_api=info,qtg_runtime::admin=info")];
    let api = Api::start(&db.url, &log).await?;
    let env = [
        ("RUST_LOG", "warn,qtg_runtime::admin=info"),
        ("MG_DB_POOL_SIZE", "8"),
        ("MG_DISPATCHER_CONCURRENCY", "4"),
        ("MG_OBSERVER_CONCURRENCY", "2"),
    ];
    let mut procs = Vec::new();
    for _ in 0..r {
        procs.push(Proc::spawn("qtg-dispatcher", &db.url, &env).await?);
        procs.push(Proc::spawn("qtg-observer", &db.url, &env).await?);
    }
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
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ids = Vec::new();
    for i in 0..m {
        let body = json!({"template_key": "bench.chain", "intent": {"asset": "USDC", "amount": "1"},
                          "idempotency_key": format!("scale-{i}")});
        let created = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
        ids.push(created["id"].as_str().context("id")?.to_string());
    }
    let mut set = tokio::task::JoinSet::new();
    for id in &ids {
        let (http, url, key) =
            (api.http.clone(), format!("{}/v3/movements/{id}/approve", api.base), keys.approver.clone());
        set.spawn(async move { http.post(url).bearer_auth(key).send().await.map(|r| r.status().as_u16()) });
    }
    while let Some(res) = set.join_next().await {
        anyhow::ensure!(res?? == 200, "approve failed");
    }
    let started = Instant::now();
    loop {
        let done: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_requests WHERE request_state = 'COMPLETED'")
            .fetch_one(&db.pool)
            .await?;
        if done as usize == m {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "scaling r={r} did not finish: {done}/{m}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (window, audited): (f64, i64) = sqlx::query_as(
        "SELECT extract(epoch FROM max(completed_at) - min(approved_at))::float8,
                (SELECT count(*) FROM audit_outbox WHERE action IN ('node.transition', 'movement.transition'))
         FROM movement_requests",
    )
    .fetch_one(&db.pool)
    .await?;
    for p in &mut procs {
        p.signal("TERM");
        let _ = p.wait_exit(Duration::from_secs(20)).await;
    }
    drop(api);
    db.drop_db().await;
    // Audited transitions of the load only (approval included: every movement.transition).
    Ok((audited as f64 / window, m as f64 / window))
}
