//! Never stranded, never stalled (issue 25): one item's failure stays with that item. A worker
//! whose loop sleeps for hours is alive; a dead process is seen dead within a few heartbeat
//! periods; one slow callback receiver delays no other; a nonce reserved by a node that failed
//! before broadcasting is given back at once; an executor's answers are bounded; a retired
//! template version takes no new movement.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

const SECRET: &str = "whsec-stranded-0001";

/// A receiver on its own loopback host (`127.0.0.2`, another host than the fast ones) that
/// takes `delay` to answer each request; counts requests and the most it ever held at once.
#[derive(Clone, Default)]
struct SlowReceiver {
    requests: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

impl SlowReceiver {
    async fn serve(&self, delay: Duration) -> anyhow::Result<String> {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move || {
                let me = me.clone();
                async move {
                    me.requests.fetch_add(1, Ordering::SeqCst);
                    let now = me.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    me.most_at_once.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    me.in_flight.fetch_sub(1, Ordering::SeqCst);
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(url)
    }
}

async fn one_node_template(api: &Api, keys: &Keys, key: &str) -> anyhow::Result<()> {
    install_template(
        api,
        keys,
        json!({"template_key": key, "nodes": [
            {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await
}

async fn outbox_states(db: &TestDb, movement: &str) -> anyhow::Result<Vec<(String, Option<String>)>> {
    Ok(sqlx::query_as(
        "SELECT status, last_error FROM movement_callback_outbox WHERE request_id = $1::uuid ORDER BY sequence",
    )
    .bind(movement)
    .fetch_all(&db.pool)
    .await?)
}

fn worker_rows<'a>(workers: &'a Value, name: &str) -> Vec<&'a Value> {
    workers["items"].as_array().map(|i| i.iter().filter(|w| w["worker"] == name).collect()).unwrap_or_default()
}

/// Liveness comes from the process, not from a worker's loop: a worker whose interval is an
/// hour stays fresh and ready between its ticks, the view says when it last ticked and when
/// it is next due, and a SIGKILLed process is stale within a few heartbeat periods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_follow_the_process_not_its_loop() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let beat = [("MG_HEARTBEAT_INTERVAL_SECONDS", "0.5"), ("MG_WORKER_STALE_SECONDS", "3")];
    let api = Api::start(&db.url, &beat).await?;
    let viewer = api.key("auditor", "viewer").await?;
    let mut env = beat.to_vec();
    env.extend([
        ("MG_EXPIRATION_CHECK_INTERVAL_SECONDS", "3600"),
        ("MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS", "3600"),
    ]);
    let mut worker = Proc::spawn("qtg-expiry", &db.url, &env).await?;
    let admin = worker.wait_field("admin_addr", Duration::from_secs(30)).await?;
    wait_until("the first tick", Duration::from_secs(30), || async {
        Ok(worker.ticks("expiration_checker").await? >= 1)
    })
    .await?;
    // Well past the stale threshold, with the loops asleep for the hour.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let ready = http_client().get(format!("http://{admin}/readyz")).send().await?;
    assert_eq!(ready.status().as_u16(), 200, "{}", ready.text().await?);
    let workers = api.ok("GET", "/v3/workers", &viewer, None, 200).await?;
    for name in ["expiration_checker", "template_proposal_expiration"] {
        let rows = worker_rows(&workers, name);
        assert_eq!(rows.len(), 1, "{workers:#}");
        let row = rows[0];
        assert_eq!(row["stale"], false, "a loop asleep for an hour is not a dead process: {row:#}");
        assert!(row["age_seconds"].as_f64().is_some_and(|a| a < 3.0), "{row:#}");
        let last: chrono::DateTime<chrono::Utc> = serde_json::from_value(row["last_tick_at"].clone())?;
        let next: chrono::DateTime<chrono::Utc> = serde_json::from_value(row["next_tick_at"].clone())?;
        let gap = (next - last).num_seconds();
        assert!((3000..=4000).contains(&gap), "next tick due about an hour after the last: {row:#}");
    }
    assert_eq!(worker.ticks("expiration_checker").await?, 1, "the loop itself slept");

    worker.signal("KILL");
    worker.wait_exit(Duration::from_secs(10)).await?;
    wait_until("the killed process reads stale", Duration::from_secs(30), || async {
        let workers = api.ok("GET", "/v3/workers", &viewer, None, 200).await?;
        Ok(worker_rows(&workers, "expiration_checker").iter().all(|r| r["stale"] == true))
    })
    .await?;
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// A slow receiver (20 s an answer) holds only its own callbacks: another requester's
/// callbacks, enqueued after it, are delivered at once, and the slow one never has more than
/// `MG_CALLBACK_MAX_IN_FLIGHT_PER_RECEIVER` requests open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_callback_receiver_delays_no_other() -> anyhow::Result<()> {
    let slow = SlowReceiver::default();
    let slow_url = slow.serve(Duration::from_secs(20)).await?;
    let fast = Hooks::default();
    let fast_url = fast.serve().await?;
    let db = TestDb::new().await?;
    let env = [
        ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
        ("MG_CALLBACK_SECRET", SECRET),
        ("MG_CALLBACK_TIMEOUT_SECONDS", "30"),
        ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2"),
    ];
    let api = Api::all_in_one(&db.url, &env).await?;
    let keys = Keys::create(&api).await?;
    one_node_template(&api, &keys, "t.cb").await?;
    // The slow receiver's movement first: its callbacks are the oldest in the outbox.
    let slow_id = start_movement(&api, &keys, "t.cb", "slow-1", Some(&slow_url)).await?;
    wait_state(&api, &keys.operator, &slow_id, &["COMPLETED"], Duration::from_secs(60)).await?;
    let fast_id = start_movement(&api, &keys, "t.cb", "fast-1", Some(&fast_url)).await?;
    wait_state(&api, &keys.operator, &fast_id, &["COMPLETED"], Duration::from_secs(60)).await?;
    wait_until("the other receiver's callbacks, while the slow one still answers", Duration::from_secs(15), || async {
        Ok(outbox_states(&db, &fast_id).await?.iter().all(|(s, _)| s == "sent"))
    })
    .await?;
    let slow_rows = outbox_states(&db, &slow_id).await?;
    assert!(slow_rows.len() >= 4, "{slow_rows:?}");
    assert!(slow_rows.iter().any(|(s, _)| s == "pending"), "the slow receiver is still behind: {slow_rows:?}");
    let fast_seen = fast.all().iter().filter(|h| h["movement_id"] == fast_id.as_str()).count();
    assert_eq!(fast_seen, outbox_states(&db, &fast_id).await?.len(), "every event of the other movement arrived");
    assert!(slow.most_at_once.load(Ordering::SeqCst) <= 2, "at most two requests open at the slow receiver");
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// A receiver that never answers, under a short executor deadline (so a short
/// idle-in-transaction timeout): each send ends at its deadline, its outcome is recorded (no
/// transaction was open across it), and the rows reach the dead-letter queue on schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_is_dead_lettered_on_schedule() -> anyhow::Result<()> {
    let silent = SlowReceiver::default();
    let silent_url = silent.serve(Duration::from_secs(3600)).await?;
    let db = TestDb::new().await?;
    let env = [
        ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
        ("MG_CALLBACK_SECRET", SECRET),
        ("MG_CALLBACK_TIMEOUT_SECONDS", "2"),
        ("MG_CALLBACK_MAX_ATTEMPTS", "2"),
        ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2"),
        // Lease 3.4 s, idle-in-transaction timeout 1.7 s: below one send's deadline.
        ("MG_EXECUTOR_TIMEOUT_MS", "1000"),
        ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "5"),
    ];
    let api = Api::all_in_one(&db.url, &env).await?;
    let keys = Keys::create(&api).await?;
    one_node_template(&api, &keys, "t.cb").await?;
    let id = start_movement(&api, &keys, "t.cb", "silent-1", Some(&silent_url)).await?;
    wait_state(&api, &keys.operator, &id, &["COMPLETED"], Duration::from_secs(60)).await?;
    wait_until("every row dead-lettered", Duration::from_secs(90), || async {
        let rows = outbox_states(&db, &id).await?;
        Ok(!rows.is_empty() && rows.iter().all(|(s, _)| s == "dlq"))
    })
    .await?;
    let rows = outbox_states(&db, &id).await?;
    assert!(
        rows.iter().all(|(_, e)| e.as_deref().is_some_and(|e| e.contains("no answer within"))),
        "each ends with why: {rows:?}"
    );
    let attempts: Vec<i32> =
        sqlx::query_scalar("SELECT attempts FROM movement_callback_outbox WHERE request_id = $1::uuid")
            .bind(&id)
            .fetch_all(&db.pool)
            .await?;
    assert!(attempts.iter().all(|a| *a == 2), "two attempts each, no more: {attempts:?}");
    assert!(!api.proc.log().contains("idle-in-transaction"), "no transaction was open across a send");
    drop(api);
    db.drop_db().await;
    Ok(())
}
