//! `make bench`: drives movements of a sequential K-node sim template through separately
//! started release binaries (seed default intervals; speed comes from draining and NOTIFY)
//! and prints throughput and latency next to this machine's raw Postgres ceiling for one
//! audited transition, measured by pgbench in the same run (`QTG_BENCH_PGBENCH` JSON).
//!
//! First the contract's floor: pgbench running scripts/bench-floor.sql (one step of a chained
//! node in the fewest statements its contract allows) on qtg's schema, so the load figure can
//! be read against what the step's writes cost on this machine without any application.
//!
//! Then: the fan-out case (8 branches on a remote executor whose prepare and signer each take
//! 500 ms, dispatcher concurrency 8: approve → last submit, and the dispatcher's connections
//! busy while the calls are in flight), scaling with 1, 2 and 4 dispatcher + observer
//! replicas, the idle load (transactions per second per idle process) and worker RSS.
//!
//! Settings: QTG_BENCH_MOVEMENTS (N, 200), QTG_BENCH_NODES (K, 4), QTG_BENCH_SEQUENTIAL (20),
//! QTG_BENCH_DISPATCHERS (2), QTG_BENCH_DISPATCHER_CONCURRENCY (4), QTG_BENCH_SCALING_MOVEMENTS
//! (100), QTG_BENCH_FLOOR_MOVEMENTS (6000), QTG_BENCH_FLOOR_SECONDS (8), QTG_BENCH_ONLY (the
//! optional phases to run: floor, fan, idle, scal, hist; unset: all), QTG_BENCH_WORKER_THREADS
//! (the dispatchers' and observer's tokio worker threads in the load), QTG_BENCH_WORKER_LOG
//! (RUST_LOG of the workers; with QTG_TEST_ECHO=1 their logs are echoed).

use std::path::PathBuf;
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

/// The figures of one run of the sequential and load phases on one database.
struct Phases {
    seq_steps: Vec<f64>,
    seq_first: Vec<f64>,
    load_steps: Vec<f64>,
    load_first: Vec<f64>,
    /// The median load round (by audited transitions/s).
    load: LoadRound,
    /// Every round's audited transitions/s, in the order they ran.
    load_rates: Vec<f64>,
    rss: Vec<(String, f64)>,
}

/// One normalised statement of `pg_stat_statements` over the load window.
struct Statement {
    calls: i64,
    total_ms: f64,
    /// Planning time (pg_stat_statements.track_planning), apart from `total_ms`.
    plan_ms: f64,
    blocks: i64,
    query: String,
}

/// Which history a run starts on.
#[derive(Clone, Copy)]
enum History {
    Empty,
    /// `finished` COMPLETED nodes (with their movements, node events, audit rows, artifacts and
    /// delivered callbacks) and `open` nodes of movements pending approval or executing.
    Grown {
        finished: usize,
        open: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n = env_usize("QTG_BENCH_MOVEMENTS", 200);
    let k = env_usize("QTG_BENCH_NODES", 4);
    let seq = env_usize("QTG_BENCH_SEQUENTIAL", 20);
    let fan_runs = env_usize("QTG_BENCH_FANOUT_RUNS", 20);
    let history_nodes = env_usize("QTG_BENCH_HISTORY_NODES", 1_000_000);
    let history_open = env_usize("QTG_BENCH_HISTORY_OPEN", 10_000);
    let only = std::env::var("QTG_BENCH_ONLY").unwrap_or_default();
    let pg: Value = serde_json::from_str(&std::env::var("QTG_BENCH_PGBENCH").unwrap_or_else(|_| "{}".into()))?;
    let dispatchers = env_usize("QTG_BENCH_DISPATCHERS", 2);
    let concurrency = std::env::var("QTG_BENCH_DISPATCHER_CONCURRENCY").unwrap_or_else(|_| "4".into());
    let statements = statements_available().await;

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
    let floor_asked = only.is_empty() || only.contains("floor");
    let floor = if floor_asked && k < 2 {
        // Its script is one step of a chained node, its check counts the successors handed on.
        println!("contract floor: skipped — it measures a step that hands on its successor; QTG_BENCH_NODES={k}");
        println!();
        None
    } else if floor_asked {
        let movements = env_usize("QTG_BENCH_FLOOR_MOVEMENTS", 6000);
        let f = floor(k, movements, env_usize("QTG_BENCH_FLOOR_SECONDS", 8) as u64).await?;
        println!("contract floor (pgbench -M prepared, 4 clients: scripts/bench-floor.sql, one step of a chained node");
        println!("in the fewest statements its contract allows — arm, venue, record with the successor's hand-off —");
        println!("on qtg's schema):");
        println!(
            "  with the sim venue's statement   {:>8.0} node transitions/s, all audited ({:.2} of best pgbench)",
            f.with_venue,
            f.with_venue / best_tps
        );
        println!(
            "  a venue not on this database     {:>8.0} node transitions/s, all audited ({:.2})",
            f.without_venue,
            f.without_venue / best_tps
        );
        println!();
        Some(f)
    } else {
        None
    };

    let empty = phases(History::Empty, n, k, seq, dispatchers, &concurrency, statements).await?;
    print_phases("empty database", &empty, n, k, seq, best_tps, pg1_ms);
    let mut block = Vec::new();
    let seq_p50 = pct(&empty.seq_steps, 50.0);
    let commits_per_step = 4.0;
    block.push("| figure | value | ratio to the same-run ceiling |".to_string());
    block.push("|---|---|---|".to_string());
    block.push(format!("| pgbench best (tx/s) | {best_tps:.0} | 1.00 |"));
    block.push(format!("| pgbench 1-client transition (ms) | {pg1_ms:.2} | 1.00 |"));
    block.push(format!(
        "| sequential per-step overhead p50 (ms) | {seq_p50:.1} | {:.1} x one transition = {:.2} x (transition x \
         {commits_per_step:.0} commits); target <= 3 |",
        seq_p50 / pg1_ms,
        seq_p50 / (pg1_ms * commits_per_step)
    ));
    block.push(format!(
        "| load audited transitions/s | {:.0} | {:.2} of best pgbench; target >= 0.7 |",
        empty.load.audited_tps,
        empty.load.audited_tps / best_tps
    ));
    if let Some(f) = &floor {
        // The floor's audited transitions are all node transitions; the load's node
        // transitions are its comparable figure (its movement transitions come on top).
        println!(
            "load against the contract floor: node transitions/s {:.0} / {:.0} = {:.2} (qtg's whole step, API and \
             workers included, against the floor's statements alone)",
            empty.load.node_tps,
            f.with_venue,
            empty.load.node_tps / f.with_venue
        );
        println!();
        block.push(format!(
            "| contract floor, with the sim venue (audited node transitions/s) | {:.0} | {:.2} of best pgbench |",
            f.with_venue,
            f.with_venue / best_tps
        ));
        block.push(format!(
            "| contract floor, venue off this database (audited node transitions/s) | {:.0} | {:.2} of best pgbench |",
            f.without_venue,
            f.without_venue / best_tps
        ));
        block.push(format!(
            "| load node transitions/s against the contract floor with the venue | {:.2} | — |",
            empty.load.node_tps / f.with_venue
        ));
    }

    if only.is_empty() || only.contains("fan") {
        let fan = fan_out(fan_runs).await?;
        let s = sorted(fan.last_submit_s.clone());
        println!(
            "fan-out: 8 branches, remote executor prepare 500 ms + signer 500 ms, dispatcher concurrency 8, {} runs",
            s.len()
        );
        println!(
            "  approve → last submit p50/p99/max {:.2} / {:.2} / {:.2} s   (aim p99 < 2 s; serialised would be ~8 s)",
            pct(&s, 50.0),
            pct(&s, 99.0),
            s.last().copied().unwrap_or(f64::NAN)
        );
        println!(
            "  dispatcher connections held in a transaction (`idle in transaction`) while all 8 branches were \
             between claim and arm: max {} over {} samples (aim 0)",
            fan.held_max, fan.samples
        );
        println!(
            "  dispatcher connections running a statement at those instants: max {} (the branches' own writes \
             between their calls: the await-signature write, the arm)",
            fan.running_max
        );
        for seen in &fan.busy_seen {
            println!("    busy: {seen}");
        }
        println!();
        block.push(format!(
            "| fan-out approve → last submit p50 / p99 (s, {} runs) | {:.2} / {:.2} | aim p99 < 2 |",
            s.len(),
            pct(&s, 50.0),
            pct(&s, 99.0)
        ));
        block.push(format!(
            "| dispatcher connections held in a transaction during slow calls | {} | aim 0 |",
            fan.held_max
        ));
        block.push(format!(
            "| dispatcher connections running a statement at those instants | {} | the branches' own writes |",
            fan.running_max
        ));
    }

    if only.is_empty() || only.contains("idle") {
        let (idle_procs, idle_per_proc) = idle(dispatchers, &concurrency).await?;
        println!(
            "idle: {idle_procs} processes (API, {dispatchers} dispatchers, observer, recovery) on a fresh database, \
             20 s"
        );
        println!(
            "  transactions/s per idle process {idle_per_proc:>6.2}   (aim <= 1; every idle statement is its own \
             transaction)"
        );
        println!();
        block.push(format!(
            "| idle transactions/s per process ({idle_procs} processes) | {idle_per_proc:.2} | aim <= 1 |"
        ));
    }

    if only.is_empty() || only.contains("scal") {
        let m = env_usize("QTG_BENCH_SCALING_MOVEMENTS", 100);
        println!("scaling: {m} movements x {k} nodes, r x qtg-dispatcher (concurrency 4) + r x qtg-observer");
        for r in [1, 2, 4] {
            let (tps, mps) = scale(r, m, k).await?;
            println!(
                "  r = {r}: {:>7.1} audited transitions/s ({:.2} of best pgbench), {:>6.1} movements/s",
                tps,
                tps / best_tps,
                mps
            );
            block.push(format!("| scaling r = {r} (audited transitions/s) | {tps:.0} | {:.2} |", tps / best_tps));
        }
        println!();
    }

    if only.is_empty() || only.contains("hist") {
        let grown = History::Grown { finished: history_nodes, open: history_open };
        let grown = phases(grown, n, k, seq, dispatchers, &concurrency, statements).await?;
        let title = format!("history grown to {history_nodes} finished + {history_open} open nodes");
        print_phases(&title, &grown, n, k, seq, best_tps, pg1_ms);
        let load_ratio = grown.load.audited_tps / empty.load.audited_tps;
        let seq_ratio = pct(&grown.seq_steps, 50.0) / seq_p50;
        println!("history grown against the empty database (aim: each within 15 %):");
        println!(
            "  load audited transitions/s {:.0} against {:.0}: {:.2} x   {}",
            grown.load.audited_tps,
            empty.load.audited_tps,
            load_ratio,
            within(load_ratio, false)
        );
        println!(
            "  sequential per-step p50 {:.1} ms against {:.1} ms: {:.2} x   {}",
            pct(&grown.seq_steps, 50.0),
            seq_p50,
            seq_ratio,
            within(seq_ratio, true)
        );
        println!();
        block.push(format!(
            "| history grown: load audited transitions/s | {:.0} | {:.2} of the empty run; aim >= 0.85 |",
            grown.load.audited_tps, load_ratio
        ));
        block.push(format!(
            "| history grown: sequential per-step p50 (ms) | {:.1} | {:.2} of the empty run; aim <= 1.15 |",
            pct(&grown.seq_steps, 50.0),
            seq_ratio
        ));
    }
    for (name, mib) in &empty.rss {
        block.push(format!("| RSS {name} (MiB) | {mib:.1} | — |"));
    }

    // One block to paste into docs/benchmarks.md.
    for line in block {
        println!("{line}");
    }
    Ok(())
}

fn within(ratio: f64, lower_is_better: bool) -> &'static str {
    let ok = if lower_is_better { ratio <= 1.15 } else { ratio >= 0.85 };
    if ok {
        "within 15 %"
    } else {
        "NOT within 15 %"
    }
}

fn print_phases(title: &str, p: &Phases, n: usize, k: usize, seq: usize, best_tps: f64, pg1_ms: f64) {
    println!("== {title} ==");
    println!("load: {n} movements x {k} nodes, approved at once; {} rounds, the median shown", p.load_rates.len());
    let rates: Vec<String> = p.load_rates.iter().map(|r| format!("{r:.0}")).collect();
    println!("  audited transitions/s per round {}", rates.join(" / "));
    println!("  movements/s                {:>8.1}", p.load.movements_per_s);
    println!("  node transitions/s         {:>8.1}", p.load.node_tps);
    println!(
        "  audited transitions/s      {:>8.1}   ({:.2} of the best pgbench tx/s {best_tps:.0})",
        p.load.audited_tps,
        p.load.audited_tps / best_tps
    );
    println!("  per-step ms p50/p99        {:>8.1} / {:.1}", pct(&p.load_steps, 50.0), pct(&p.load_steps, 99.0));
    println!("  approve→first submit p50/p99 {:>6.1} / {:.1} ms", pct(&p.load_first, 50.0), pct(&p.load_first, 99.0));
    println!();
    println!("sequential: {seq} movements one at a time");
    println!(
        "  per-step ms p50/p99        {:>8.1} / {:.1}   (p50 = {:.1} x the 1-client pgbench transition {pg1_ms:.2} ms)",
        pct(&p.seq_steps, 50.0),
        pct(&p.seq_steps, 99.0),
        pct(&p.seq_steps, 50.0) / pg1_ms
    );
    println!("  approve→first submit p50/p99 {:>6.1} / {:.1} ms", pct(&p.seq_first, 50.0), pct(&p.seq_first, 99.0));
    println!();
    if !p.load.statements.is_empty() {
        let total: f64 = p.load.statements.iter().map(|s| s.total_ms).sum();
        let calls: i64 = p.load.statements.iter().map(|s| s.calls).sum();
        let planning: f64 = p.load.statements.iter().map(|s| s.plan_ms).sum();
        println!(
            "load statements (pg_stat_statements): {calls} calls, {total:.0} ms executing + {planning:.0} ms planning \
             = {:.1} calls and {:.3} ms per audited transition",
            calls as f64 / p.load.audited.max(1) as f64,
            (total + planning) / p.load.audited.max(1) as f64
        );
        println!(
            "  {:>7} {:>9} {:>6} {:>8} {:>8} {:>7}  statement",
            "calls", "total ms", "share", "mean ms", "plan ms", "blk/call"
        );
        for s in p.load.statements.iter().take(14) {
            println!(
                "  {:>7} {:>9.0} {:>5.1}% {:>8.3} {:>8.3} {:>7.1}  {}",
                s.calls,
                s.total_ms,
                100.0 * s.total_ms / total,
                s.total_ms / s.calls.max(1) as f64,
                s.plan_ms / s.calls.max(1) as f64,
                s.blocks as f64 / s.calls.max(1) as f64,
                s.query
            );
        }
        println!();
    }
    for (name, mib) in &p.rss {
        println!("  RSS {name:<28} {mib:>6.1} MiB");
    }
    println!();
}

/// Whether the server has `pg_stat_statements` loaded (scripts/bench.sh starts one that does).
async fn statements_available() -> bool {
    let Ok(pool) = qtg_store::connect(&admin_url(), 1).await else { return false };
    let ok = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(&pool).await.is_ok()
        && sqlx::query("SELECT pg_stat_statements_reset()").execute(&pool).await.is_ok();
    pool.close().await;
    if !ok {
        println!("(pg_stat_statements is not loaded on this server: no per-statement figures)");
    }
    ok
}

async fn reset_statements() -> anyhow::Result<()> {
    let pool = qtg_store::connect(&admin_url(), 1).await?;
    sqlx::query("SELECT pg_stat_statements_reset()").execute(&pool).await?;
    pool.close().await;
    Ok(())
}

/// The statements of database `db` since the last reset, heaviest first.
async fn read_statements(db: &str) -> anyhow::Result<Vec<Statement>> {
    let pool = qtg_store::connect(&admin_url(), 1).await?;
    let rows: Vec<(i64, f64, f64, i64, String)> = sqlx::query_as(
        "SELECT s.calls, s.total_exec_time, s.total_plan_time,
                (s.shared_blks_hit + s.shared_blks_read)::int8, s.query
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = $1 ORDER BY s.total_exec_time DESC",
    )
    .bind(db)
    .fetch_all(&pool)
    .await?;
    pool.close().await;
    Ok(rows
        .into_iter()
        .map(|(calls, total_ms, plan_ms, blocks, query)| {
            let flat = query.split_whitespace().collect::<Vec<_>>().join(" ");
            let query =
                if flat.chars().count() > 110 { flat.chars().take(110).collect::<String>() + "…" } else { flat };
            Statement { calls, total_ms, plan_ms, blocks, query }
        })
        .collect())
}

fn chain_template(k: usize) -> Value {
    let nodes: Vec<Value> = (0..k)
        .map(|i| {
            json!({"node_key": format!("s{i:02}"), "node_kind": "action", "action_type": "transfer",
                        "executor_key": "exec.sim.transfer", "config": {"sim": {"submit_result": "completed"}}})
        })
        .collect();
    let edges: Vec<Value> =
        (1..k).map(|i| json!({"from": format!("s{:02}", i - 1), "to": format!("s{i:02}")})).collect();
    json!({"template_key": "bench.chain", "nodes": nodes, "edges": edges})
}

/// The sequential and load phases on a fresh database that starts with `history`.
async fn phases(
    history: History,
    n: usize,
    k: usize,
    seq: usize,
    dispatchers: usize,
    concurrency: &str,
    statements: bool,
) -> anyhow::Result<Phases> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[("RUST_LOG", "warn,qtg_api=info,qtg_runtime::admin=info")]).await?;
    let log = std::env::var("QTG_BENCH_WORKER_LOG").unwrap_or_else(|_| "warn,qtg_runtime::admin=info".into());
    let quiet = [("RUST_LOG", log.as_str()), ("MG_DB_POOL_SIZE", "8")];
    // QTG_BENCH_WORKER_THREADS: the workers' tokio threads (TOKIO_WORKER_THREADS; the spawned
    // processes start from a cleared environment, so the bench's own does not reach them).
    let threads = std::env::var("QTG_BENCH_WORKER_THREADS").ok();
    let mut conc = vec![
        ("RUST_LOG", log.as_str()),
        ("MG_DB_POOL_SIZE", "8"),
        ("MG_DISPATCHER_CONCURRENCY", concurrency),
        ("MG_OBSERVER_CONCURRENCY", "2"),
    ];
    if let Some(t) = &threads {
        conc.push(("TOKIO_WORKER_THREADS", t.as_str()));
    }
    let mut procs = Vec::new();
    for _ in 0..dispatchers {
        procs.push(Proc::spawn("qtg-dispatcher", &db.url, &conc).await?);
    }
    procs.push(Proc::spawn("qtg-observer", &db.url, &conc).await?);
    procs.push(Proc::spawn("qtg-recovery", &db.url, &quiet).await?);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let keys = Keys::create(&api).await?;
    install_template(&api, &keys, chain_template(k)).await?;
    if let History::Grown { finished, open } = history {
        grow_history(&db, &api, &keys, finished, open).await?;
    }

    // Phase 1: one movement at a time — per-step overhead and approve→first-submit latency.
    for i in 0..seq {
        let id = start_movement(&api, &keys, "bench.chain", &format!("seq-{i}"), None).await?;
        wait_state(&api, &keys.requester, &id, &["COMPLETED"], Duration::from_secs(60)).await?;
    }

    // Phase 2: N movements created, then approved as fast as the API takes them; `runs` times
    // (QTG_BENCH_LOAD_RUNS), each on its own movements, so one noisy window does not decide
    // the figure: the median round is the load's.
    let runs = env_usize("QTG_BENCH_LOAD_RUNS", 3).max(1);
    let mut rounds = Vec::new();
    for r in 0..runs {
        rounds.push(load_round(&db, &api, &keys, n, &format!("load{r}-"), statements).await?);
    }
    let rates: Vec<f64> = rounds.iter().map(|l| l.audited_tps).collect();
    rounds.sort_by(|a, b| a.audited_tps.total_cmp(&b.audited_tps));
    let median = rounds.swap_remove(rounds.len() / 2);

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
    let phases = Phases {
        seq_steps: step_ms("seq-%").await?,
        seq_first: first_submit_ms("seq-%").await?,
        load_steps: step_ms("load%").await?,
        load_first: first_submit_ms("load%").await?,
        load: median,
        load_rates: rates,
        rss: procs.iter().map(|p| (format!("{} (after load)", p.name), rss_mib(p))).collect(),
    };
    for p in &mut procs {
        p.signal("TERM");
        let _ = p.wait_exit(Duration::from_secs(20)).await;
    }
    drop(api);
    db.drop_db().await;
    Ok(phases)
}

/// One load round: what it did per second of its window, and its statements.
struct LoadRound {
    /// Audited transitions (node and movement) per second of the window.
    audited_tps: f64,
    node_tps: f64,
    movements_per_s: f64,
    statements: Vec<Statement>,
    audited: i64,
}

/// Creates `n` movements keyed `{prefix}{i}`, approves them all at once and waits until every
/// one has completed; the window runs from the first approval to the last completion.
async fn load_round(
    db: &TestDb,
    api: &Api,
    keys: &Keys,
    n: usize,
    prefix: &str,
    statements: bool,
) -> anyhow::Result<LoadRound> {
    let mut ids = Vec::new();
    for i in 0..n {
        let m = api
            .ok(
                "POST",
                "/v3/movements",
                &keys.requester,
                Some(json!({"template_key": "bench.chain",
                "intent": {"asset": "USDC", "amount": "1"}, "idempotency_key": format!("{prefix}{i}")})),
                201,
            )
            .await?;
        ids.push(m["id"].as_str().context("id")?.to_string());
    }
    if statements {
        reset_statements().await?;
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
    // Polled by the load's own ids: a filter on state and idempotency key read every finished
    // movement of a grown history ten times a second (the bench's own load, measured as qtg's).
    let load_ids: Vec<uuid::Uuid> = ids.iter().map(|i| i.parse()).collect::<Result<_, _>>()?;
    loop {
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM movement_requests WHERE id = ANY($1) AND request_state = 'COMPLETED'",
        )
        .bind(&load_ids)
        .fetch_one(&db.pool)
        .await?;
        if done as usize == n {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "load phase did not finish: {done}/{n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let statements = if statements { read_statements(&db.name).await? } else { Vec::new() };
    let row = sqlx::query(
        "SELECT
           (SELECT extract(epoch FROM max(completed_at) - min(approved_at))::float8 FROM movement_requests
             WHERE id = ANY($1)) AS window,
           (SELECT count(*) FROM movement_request_nodes n JOIN node_events e ON e.request_node_id = n.id
             WHERE n.request_id = ANY($1) AND e.kind = 'transition') AS node_transitions,
           (SELECT count(*) FROM audit_outbox a
             WHERE a.action IN ('node.transition', 'movement.transition') AND a.movement_id = ANY($1)) AS audited",
    )
    .bind(&load_ids)
    .fetch_one(&db.pool)
    .await?;
    let window = row.get::<Option<f64>, _>("window").unwrap_or(f64::NAN);
    let node_transitions: i64 = row.get("node_transitions");
    let audited: i64 = row.get("audited");
    Ok(LoadRound {
        audited_tps: audited as f64 / window,
        node_tps: node_transitions as f64 / window,
        movements_per_s: n as f64 / window,
        statements,
        audited,
    })
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
    // A backend that goes idle reports its transaction counts to pg_stat_database up to 10 s
    // later (PostgreSQL 15's idle statistics flush): the processes' start-up (session checks,
    // heartbeat seeds, the LISTEN probe) is over and reported before the window opens.
    tokio::time::sleep(Duration::from_secs(15)).await;
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
    // This connection's own statistics reach pg_stat_database within a second. The others'
    // arrive up to 10 s late when their backend idles, as many before a window as within it
    // for a steady load (the start-up burst is kept out by the wait before the window).
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
    last_submit_s: Vec<f64>,
    /// Most dispatcher connections seen `idle in transaction` (held, not working) at once.
    held_max: i64,
    /// Most dispatcher connections seen running a statement at once.
    running_max: i64,
    samples: usize,
    /// `state: statement` of the dispatcher connections seen busy during the calls.
    busy_seen: std::collections::BTreeSet<String>,
}

/// 8 parallel branches on the reference remote executor (prepare 500 ms, signer 500 ms),
/// `runs` movements one after another on one dispatcher.
async fn fan_out(runs: usize) -> anyhow::Result<FanOut> {
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
    let (mut held_max, mut running_max, mut samples) = (0i64, 0i64, 0usize);
    let mut busy_seen = std::collections::BTreeSet::new();
    let mut last_submit_s = Vec::new();
    for run in 0..runs {
        let id = start_movement(&api, &keys, "bench.fan", &format!("fan-{run}"), None).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // One statement, so the connections' states named below are those of the counted
            // instant (the activity view is read once per transaction): a second read a moment
            // later catches short transactions between their write and COMMIT.
            let (in_calls, held, running, armed, seen): (i64, i64, i64, i64, Vec<String>) = sqlx::query_as(
                "SELECT (SELECT count(*) FROM movement_request_nodes WHERE request_id = $1::uuid
                           AND node_state IN ('PREPARING', 'AWAITING_SIGNATURE')),
                        (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                           AND application_name = 'qtg-dispatcher' AND state LIKE 'idle in transaction%'),
                        (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                           AND application_name = 'qtg-dispatcher' AND state = 'active'),
                        (SELECT count(*) FROM movement_request_nodes WHERE request_id = $1::uuid AND \
                            started_at IS NOT NULL),
                        ARRAY(SELECT coalesce(state, '?') || ': '
                                     || left(regexp_replace(coalesce(query, ''), '\\s+', ' ', 'g'), 70)
                              FROM pg_stat_activity WHERE datname = current_database()
                                AND application_name = 'qtg-dispatcher' AND state <> 'idle')",
            )
            .bind(&id)
            .fetch_one(&db.pool)
            .await?;
            if in_calls == 8 {
                samples += 1;
                held_max = held_max.max(held);
                running_max = running_max.max(running);
                // What the busy connections were doing, to tell a claim loop's statement from a
                // connection held across a call (`idle in transaction`).
                busy_seen.extend(seen);
            }
            if armed == 8 {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the fan-out never armed its 8 branches");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        last_submit_s.push(
            sqlx::query_scalar(
                "SELECT extract(epoch FROM max(n.started_at) - r.approved_at)::float8
                 FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
                 WHERE r.id = $1::uuid GROUP BY r.approved_at",
            )
            .bind(&id)
            .fetch_one(&db.pool)
            .await?,
        );
        // The branches' submits are recorded before the next movement starts (no observer runs
        // here: they stay SUBMITTED).
        loop {
            let busy: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM movement_request_nodes WHERE request_id = $1::uuid
                   AND node_state IN ('READY', 'PREPARING', 'AWAITING_SIGNATURE', 'SUBMITTING')",
            )
            .bind(&id)
            .fetch_one(&db.pool)
            .await?;
            if busy == 0 {
                break;
            }
            if Instant::now() > deadline {
                println!("  (fan-out run {run}: {busy} branches still in flight after 60 s; going on)");
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    drop((dispatcher, api, remote));
    db.drop_db().await;
    Ok(FanOut { last_submit_s, held_max, running_max, samples, busy_seen })
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
    install_template(&api, &keys, chain_template(k)).await?;
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

/// The columns of `table` an INSERT may name (generated ones left out), comma-separated.
async fn insertable_columns(pool: &sqlx::PgPool, table: &str) -> anyhow::Result<String> {
    let cols: Vec<String> = sqlx::query_scalar(
        "SELECT quote_ident(column_name::text) FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name = $1 AND is_generated = 'NEVER' ORDER BY ordinal_position",
    )
    .bind(table)
    .fetch_all(pool)
    .await?;
    anyhow::ensure!(!cols.is_empty(), "no table {table}");
    Ok(cols.join(", "))
}

/// Copies rows of `table`: `source` is a FROM clause that yields `src` (a row of `table`),
/// and `over` a JSON object (evaluated per copied row) of the columns that differ in the copy.
async fn clone_rows(pool: &sqlx::PgPool, table: &str, over: &str, source: &str) -> anyhow::Result<u64> {
    let cols = insertable_columns(pool, table).await?;
    let picked = cols.split(", ").map(|c| format!("x.{c}")).collect::<Vec<_>>().join(", ");
    let sql = format!(
        "INSERT INTO {table} ({cols}) SELECT {picked}
         FROM (SELECT to_jsonb(src) || {over} AS row FROM {source}) s
         CROSS JOIN LATERAL jsonb_populate_record(NULL::{table}, s.row) x"
    );
    Ok(sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await?.rows_affected())
}

/// A deployment's history, made before the phases run: `finished` COMPLETED nodes over the
/// last 90 days — copies of a movement that ran here, with its node events, audit rows
/// (promoted), artifacts and delivered callbacks — and `open` nodes of movements still pending
/// approval (half) or executing with a node observed again in a day (half). Then VACUUM
/// ANALYZE, as autovacuum leaves a table that has settled.
async fn grow_history(db: &TestDb, api: &Api, keys: &Keys, finished: usize, open: usize) -> anyhow::Result<()> {
    let t = Instant::now();
    let seed = start_movement(api, keys, "bench.chain", "hist-seed", None).await?;
    wait_state(api, &keys.requester, &seed, &["COMPLETED"], Duration::from_secs(60)).await?;
    let pending = api
        .ok(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(json!({"template_key": "bench.chain", "intent": {"asset": "USDC", "amount": "1"},
                        "idempotency_key": "open-seed"})),
            201,
        )
        .await?;
    let pending = pending["id"].as_str().context("id")?.to_string();
    let pool = &db.pool;
    let k: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_request_nodes WHERE request_id = $1::uuid")
        .bind(&seed)
        .fetch_one(pool)
        .await?;
    let k = k.max(1) as usize;
    let movements = finished.div_ceil(k);
    let open_movements = open.div_ceil(k);
    // Rows keyed as qtg keys them (migration 0034): time-ordered, each at the time it pretends
    // to be from (`qtg_uuid7(at)`); a movement's own id random.
    let mut steps = vec![
        format!(
            "CREATE TABLE bench_hist_m AS SELECT g, gen_random_uuid() AS id,
               now() - interval '90 days' + interval '90 days' * (g::float8 / {movements}) - interval '1 hour' AS at
             FROM generate_series(1, {movements}) g"
        ),
        format!(
            "CREATE TABLE bench_hist_n AS SELECT m.id AS req, m.at, n.id AS seed_node, qtg_uuid7(m.at) AS id
             FROM bench_hist_m m CROSS JOIN movement_request_nodes n WHERE n.request_id = '{seed}' ORDER BY m.g"
        ),
        format!(
            "CREATE TABLE bench_open_m AS SELECT g, gen_random_uuid() AS id, g % 2 = 0 AS executing,
               now() - interval '1 minute' * g AS at FROM generate_series(1, {open_movements}) g"
        ),
    ];
    for s in steps.drain(..) {
        sqlx::query(sqlx::AssertSqlSafe(s)).execute(pool).await?;
    }
    let mut rows = Vec::new();
    // (table, the columns that differ as a JSON object, where the copied rows come from)
    let clones = [
        (
            "movement_requests",
            "jsonb_build_object('id', m.id, 'idempotency_key', 'hist-' || m.g, 'created_at', m.at,
               'approved_at', m.at + interval '1 second', 'updated_at', m.at + interval '5 seconds',
               'completed_at', m.at + interval '5 seconds', 'expires_at', m.at + interval '1 day',
               'callback_url', 'https://hooks.example.com/qtg')"
                .to_string(),
            format!("movement_requests src CROSS JOIN bench_hist_m m WHERE src.id = '{seed}'"),
        ),
        (
            "movement_request_nodes",
            "jsonb_build_object('id', h.id, 'request_id', h.req, 'created_at', h.at,
               'started_at', h.at + interval '2 seconds', 'submit_by', h.at + interval '62 seconds',
               'completed_at', h.at + interval '3 seconds', 'updated_at', h.at + interval '3 seconds',
               'claim_token', NULL)"
                .to_string(),
            "bench_hist_n h JOIN movement_request_nodes src ON src.id = h.seed_node".to_string(),
        ),
        (
            "node_events",
            "jsonb_build_object('id', nextval('node_events_id_seq'), 'request_id', h.req, 'request_node_id', h.id,
               'created_at', h.at + interval '2 seconds')"
                .to_string(),
            "bench_hist_n h JOIN node_events src ON src.request_node_id = h.seed_node".to_string(),
        ),
        (
            "artifacts",
            "jsonb_build_object('id', qtg_uuid7(h.at), 'request_id', h.req, 'request_node_id', h.id,
               'created_at', h.at + interval '2 seconds')"
                .to_string(),
            "bench_hist_n h JOIN artifacts src ON src.request_node_id = h.seed_node".to_string(),
        ),
        (
            "audit_outbox",
            "jsonb_build_object('id', nextval('audit_outbox_id_seq'), 'event_id', qtg_uuid7(h.at),
               'movement_id', h.req, 'entity_id', h.id::text, 'created_at', h.at + interval '2 seconds',
               'promoted_at', h.at + interval '10 seconds')"
                .to_string(),
            format!(
                "bench_hist_n h JOIN audit_outbox src ON src.entity_type = 'node' AND src.entity_id = h.seed_node::text
                   AND src.movement_id = '{seed}'"
            ),
        ),
        (
            "audit_outbox",
            "jsonb_build_object('id', nextval('audit_outbox_id_seq'), 'event_id', qtg_uuid7(m.at),
               'movement_id', m.id, 'entity_id', m.id::text, 'created_at', m.at + interval '1 second',
               'promoted_at', m.at + interval '10 seconds')"
                .to_string(),
            format!(
                "bench_hist_m m JOIN audit_outbox src ON src.movement_id = '{seed}' AND src.entity_type = 'movement'"
            ),
        ),
        (
            "movement_requests",
            "jsonb_build_object('id', m.id, 'idempotency_key', 'open-' || m.g, 'created_at', m.at, 'updated_at', m.at,
               'expires_at', now() + interval '30 days', 'completed_at', NULL,
               'request_state', CASE WHEN m.executing THEN 'EXECUTING' ELSE 'PENDING_APPROVAL' END)"
                .to_string(),
            format!(
                "bench_open_m m JOIN movement_requests src ON src.id = CASE WHEN m.executing THEN '{seed}'::uuid
                   ELSE '{pending}'::uuid END"
            ),
        ),
        (
            "movement_request_nodes",
            "CASE WHEN NOT m.executing THEN
                 jsonb_build_object('id', qtg_uuid7(m.at), 'request_id', m.id, 'created_at', m.at, 'updated_at', m.at)
               WHEN src.node_key = 's00' THEN
                 jsonb_build_object('id', qtg_uuid7(m.at), 'request_id', m.id, 'created_at', m.at,
                   'updated_at', m.at, 'node_state', 'OBSERVING', 'completed_at', NULL,
                   'next_observe_at', now() + interval '1 day', 'claim_token', NULL)
               ELSE jsonb_build_object('id', qtg_uuid7(m.at), 'request_id', m.id, 'created_at', m.at,
                   'updated_at', m.at, 'node_state', 'BLOCKED', 'attempt_no', 0, 'started_at', NULL,
                   'completed_at', NULL, 'submit_by', NULL, 'submit_accepted_at', NULL, 'claim_token', NULL,
                   'provider_refs', '{}'::jsonb, 'provider_state', NULL, 'provider_ref_id', NULL) END"
                .to_string(),
            format!(
                "bench_open_m m JOIN movement_request_nodes src ON src.request_id = CASE WHEN m.executing
                   THEN '{seed}'::uuid ELSE '{pending}'::uuid END"
            ),
        ),
    ];
    for (table, over, source) in &clones {
        rows.push((table.to_string(), clone_rows(pool, table, over, source).await?));
    }
    // The delivered callbacks: one per node transition to COMPLETED and one per movement's.
    let callbacks = sqlx::query(
        "INSERT INTO movement_callback_outbox (id, request_id, event_id, event_type, sequence, payload, callback_url,
             status, attempts, callback_timestamp, callback_nonce, sent_at, created_at, updated_at, next_attempt_at)
         SELECT qtg_uuid7(h.at), h.req, qtg_uuid7(h.at), 'node_state_changed', 1,
             jsonb_build_object('event_type', 'node_state_changed',
                 'data', jsonb_build_object('node_state', 'COMPLETED')),
             'https://hooks.example.com/qtg', 'sent', 1, extract(epoch FROM h.at)::bigint, gen_random_uuid()::text,
             h.at + interval '4 seconds', h.at + interval '3 seconds', h.at + interval '4 seconds', h.at
         FROM bench_hist_n h
         UNION ALL
         SELECT qtg_uuid7(m.at), m.id, qtg_uuid7(m.at), 'request_state_changed', 2,
             jsonb_build_object('event_type', 'request_state_changed', 'data',
                 jsonb_build_object('request_state', 'COMPLETED')),
             'https://hooks.example.com/qtg', 'sent', 1, extract(epoch FROM m.at)::bigint, gen_random_uuid()::text,
             m.at + interval '6 seconds', m.at + interval '5 seconds', m.at + interval '6 seconds', m.at
         FROM bench_hist_m m",
    )
    .execute(pool)
    .await?
    .rows_affected();
    rows.push(("movement_callback_outbox".into(), callbacks));
    for s in ["DROP TABLE bench_hist_m", "DROP TABLE bench_hist_n", "DROP TABLE bench_open_m"] {
        sqlx::query(s).execute(pool).await?;
    }
    let loaded = t.elapsed();
    sqlx::query(
        "VACUUM (ANALYZE) movement_requests, movement_request_nodes, node_events, artifacts, audit_outbox,
           movement_callback_outbox",
    )
    .execute(pool)
    .await?;
    // The load's gigabytes are written out now, not by a checkpoint during the phases.
    sqlx::query("CHECKPOINT").execute(pool).await?;
    let (nodes, open_nodes, bytes): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM movement_request_nodes WHERE completed_at IS NOT NULL),
                (SELECT count(*) FROM movement_request_nodes WHERE completed_at IS NULL),
                pg_database_size(current_database())",
    )
    .fetch_one(pool)
    .await?;
    println!(
        "history: {nodes} finished and {open_nodes} open nodes, database {:.0} MiB; loaded in {:.0} s, vacuumed \
         and checkpointed in {:.0} s",
        bytes as f64 / 1048576.0,
        loaded.as_secs_f64(),
        (t.elapsed() - loaded).as_secs_f64()
    );
    for (table, n) in rows {
        println!("  {table:<26} +{n}");
    }
    println!();
    Ok(())
}

/// The contract's floor: audited node transitions/s of pgbench running scripts/bench-floor.sql
/// (one step of a chained sim node in the fewest statements its contract allows) on qtg's
/// schema, with the venue's statement and without it.
struct Floor {
    with_venue: f64,
    without_venue: f64,
}

/// Runs the floor on a fresh database seeded with `movements` copies of a `k`-node chain
/// movement, executing, its first node PREPARING (claimed) and the others BLOCKED.
async fn floor(k: usize, movements: usize, seconds: u64) -> anyhow::Result<Floor> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[("RUST_LOG", "warn,qtg_api=info")]).await?;
    let keys = Keys::create(&api).await?;
    install_template(&api, &keys, chain_template(k)).await?;
    let seed = api
        .ok(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(json!({"template_key": "bench.chain", "intent": {"asset": "USDC", "amount": "1"},
                        "idempotency_key": "floor-seed"})),
            201,
        )
        .await?;
    let seed = seed["id"].as_str().context("id")?.to_string();
    drop(api);
    let pool = &db.pool;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE bench_floor_m AS SELECT g, gen_random_uuid() AS id FROM generate_series(1, {movements}) g"
    )))
    .execute(pool)
    .await?;
    clone_rows(
        pool,
        "movement_requests",
        "jsonb_build_object('id', m.id, 'idempotency_key', 'floor-' || m.g, 'request_state', 'EXECUTING',
           'approval_status', 'approved', 'approved_at', now())",
        &format!("movement_requests src CROSS JOIN bench_floor_m m WHERE src.id = '{seed}'"),
    )
    .await?;
    clone_rows(
        pool,
        "movement_request_nodes",
        "CASE WHEN src.node_key = 's00' THEN
             jsonb_build_object('id', qtg_uuid7(), 'request_id', m.id, 'node_state', 'PREPARING',
               'claim_token', gen_random_uuid(), 'lease_expires_at', now() + interval '1 hour')
           ELSE jsonb_build_object('id', qtg_uuid7(), 'request_id', m.id, 'node_state', 'BLOCKED') END",
        &format!("bench_floor_m m JOIN movement_request_nodes src ON src.request_id = '{seed}'"),
    )
    .await?;
    for s in ["DROP TABLE bench_floor_m", "VACUUM (ANALYZE)", "CHECKPOINT"] {
        sqlx::query(s).execute(pool).await?;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench-floor.sql");
    let mut rates = Vec::new();
    for venue in ["1", "0"] {
        let counts = || async {
            sqlx::query_as::<_, (i64, i64, i64)>(
                "SELECT (SELECT count(*) FROM audit_outbox),
                        (SELECT count(*) FROM movement_request_nodes WHERE node_state = 'COMPLETED'),
                        (SELECT count(*) FROM movement_request_nodes WHERE node_state = 'BLOCKED')",
            )
            .fetch_one(pool)
            .await
        };
        let (audit_before, completed_before, blocked_before) = counts().await?;
        let out = tokio::process::Command::new("pgbench")
            .args(["-n", "-M", "prepared", "-c", "4", "-j", "2", "-D", &format!("venue={venue}"), "-T"])
            .arg(seconds.to_string())
            .arg("-f")
            .arg(&script)
            .arg(&db.url)
            .output()
            .await
            .context("running pgbench (on PATH, as scripts/bench.sh runs it)")?;
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        anyhow::ensure!(
            out.status.success() && !text.contains("aborted"),
            "the floor's pgbench failed (more seeded movements: QTG_BENCH_FLOOR_MOVEMENTS):\n{text}"
        );
        let field = |prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
                .with_context(|| format!("no `{prefix}` in pgbench's output:\n{text}"))
        };
        let (tps, processed) = (field("tps = ")?, field("number of transactions actually processed: ")?);
        let (audit_after, completed_after, blocked_after) = counts().await?;
        // Every script run completes one node with two audit rows, and hands on its successor
        // (if it has one) with two more: anything else means its statements matched rows they
        // should not have, or none, and the figure would not be the step's.
        let audited = (audit_after - audit_before) as f64;
        let completed = (completed_after - completed_before) as f64;
        let handed = (blocked_before - blocked_after) as f64;
        anyhow::ensure!(
            completed == processed && handed > 0.0 && audited == 2.0 * (processed + handed),
            "the floor's {processed} script runs completed {completed} nodes and handed on {handed} with {audited} \
             audit rows: scripts/bench-floor.sql no longer matches the schema or the seeded rows"
        );
        rates.push(audited * tps / processed.max(1.0));
    }
    db.drop_db().await;
    Ok(Floor { with_venue: rates[0], without_venue: rates[1] })
}
