//! The CEX lane against `qtg-venue-sim`, through separately started workers: CEX→CEX
//! movements (withdrawal_action → withdrawal_observe → deposit_observe) and, for each fault
//! the venue can inject, the runbook case that results, the markers, and what the venue's own
//! logs show — every withdraw *request* it received (not only what it booked) and what it
//! paid, at most once per movement.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};
use sqlx::PgPool;

const ENV: [(&str, &str); 5] = CEX_ENV;
const ENTRY: &str = CEX_ENTRY;

/// The bed with the CEX→CEX demo template (sim_a → sim_b).
struct Cex(CexBed);

impl std::ops::Deref for Cex {
    type Target = CexBed;
    fn deref(&self) -> &CexBed {
        &self.0
    }
}

impl std::ops::DerefMut for Cex {
    fn deref_mut(&mut self) -> &mut CexBed {
        &mut self.0
    }
}

impl Cex {
    async fn start(entry: &str) -> anyhow::Result<Cex> {
        Ok(Cex(CexBed::start(&ENV, entry, false, "cex-demo-template.json").await?))
    }

    /// Creates and approves a CEX→CEX movement of `amount` USDT from sim_a to sim_b.
    async fn movement(&self, idem: &str, amount: &str) -> anyhow::Result<String> {
        self.0.movement("demo.cex.a_to_b", "sim_a", idem, amount).await
    }

    async fn diagnosis(&self, movement: &str, node: &str) -> anyhow::Result<Value> {
        self.api
            .ok("GET", &format!("/v3/movements/{movement}/nodes/{node}/diagnosis"), &self.keys.operator, None, 200)
            .await
    }
}

async fn wait_node(pool: &PgPool, node: uuid::Uuid, condition: &str, secs: u64) -> anyhow::Result<()> {
    let sql = format!("SELECT {condition} FROM movement_request_nodes WHERE id = $1");
    wait_db(pool, &sql, node, Duration::from_secs(secs)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cex_to_cex_movement_completes_through_separate_workers() -> anyhow::Result<()> {
    let cex = Cex::start(ENTRY).await?;
    let dispatcher = cex.worker("qtg-dispatcher").await?;
    let observer = cex.worker("qtg-observer").await?;
    let id = cex.movement("cex-happy-1", "100").await?;
    let m = cex.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await;
    let m = m.map_err(|e| anyhow::anyhow!("{e}\n{}\n{}", dispatcher.log(), observer.log()))?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let withdraw = cex.node(&id, "withdraw").await?;
    let (_, wrefs, _) = cex.refs(withdraw).await?;
    let exchange_id = wrefs["exchange_withdrawal_id"].as_str().expect("the venue's withdrawal id").to_string();
    assert_eq!(wrefs["withdraw_order_id"], format!("{withdraw}:1"), "the client id is qtg's idempotency key");
    let (_, orefs, _) = cex.refs(cex.node(&id, "withdrawal").await?).await?;
    assert!(orefs["txid"].as_str().is_some_and(|t| t.starts_with("0x")), "{orefs}");
    let (_, drefs, _) = cex.refs(cex.node(&id, "deposit").await?).await?;
    assert_eq!(drefs["deposit_status"], 1, "{drefs}");
    // The venue: one request, one withdrawal, paid once; sim_b credited.
    let requests = cex.venue.requests_for(&withdraw.to_string()).await?;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["outcome"], "booked");
    let paid = cex.venue.paid(&withdraw.to_string()).await?;
    assert_eq!(paid.len(), 1);
    assert_eq!(paid[0]["id"], exchange_id.as_str());
    let ledger = cex.venue.admin("GET", "/admin/ledger", None).await?;
    // sim_a deducts its 1 USDT fee from the amount (Binance's model): 100 left, 99 arrived.
    assert_eq!(ledger["balances"]["sim_a"]["USDT"], "999900.00000000", "the amount left sim_a");
    assert_eq!(ledger["balances"]["sim_b"]["USDT"], "500099.00000000", "amount − fee arrived");
    assert_eq!((wrefs["fee_model"].as_str(), wrefs["expected_arrival"].as_str()), (Some("deducted"), Some("99")));
    assert_eq!(drefs["deposit_amount"], "99.00000000", "{drefs}");
    // The key store: sent, signed with the venue's time inside submit_by.
    let (status, window): (String, Option<i32>) =
        sqlx::query_as("SELECT status, recv_window_ms FROM cex_submit_keys WHERE request_node_id = $1")
            .bind(withdraw)
            .fetch_one(&cex.db.pool)
            .await?;
    assert_eq!(status, "sent");
    assert!(window.is_some_and(|w| (1000..=3400).contains(&w)), "recvWindow ≤ submit_by − T: {window:?}");
    drop((dispatcher, observer));
    cex.0.db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preflight_refuses_before_anything_leaves() -> anyhow::Result<()> {
    let cex = Cex::start(ENTRY).await?;
    let dispatcher = cex.worker("qtg-dispatcher").await?;
    // Below the venue's minimum; then more than sim_a holds is above its maximum too; then a
    // destination that is not whitelisted.
    let low = cex.movement("cex-pre-low", "5").await?;
    let m = cex.wait(&low, &["FAILED"], 30).await?;
    assert_eq!(node(&m, "withdraw")["error_code"], "CEX_AMOUNT_OUT_OF_RANGE", "{m:#}");
    let body = json!({"template_key": "demo.cex.a_to_b", "idempotency_key": "cex-pre-wl",
    "intent": {
        "asset": "USDT", "amount": "100", "source": "sim_a",
        "destination": "0x000000000000000000000000000000000000dead"
    }});
    let m = cex.api.ok("POST", "/v3/movements", &cex.keys.requester, Some(body), 201).await?;
    let wl = m["id"].as_str().unwrap_or_default().to_string();
    cex.api.ok("POST", &format!("/v3/movements/{wl}/approve"), &cex.keys.approver, None, 200).await?;
    let m = cex.wait(&wl, &["FAILED"], 30).await?;
    assert_eq!(node(&m, "withdraw")["error_code"], "CEX_ADDRESS_NOT_WHITELISTED", "{m:#}");
    assert!(cex.venue.requests().await?.is_empty(), "no withdraw request reached the venue");
    drop(dispatcher);
    cex.0.db.drop_db().await;
    Ok(())
}

/// The venue booked the withdrawal and its answer never came back (qtg saw a timeout):
/// UNKNOWN, then recovery finds it by client id. One request, paid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_response_dropped_after_commit_is_found_by_client_id() -> anyhow::Result<()> {
    let cex = Cex::start(ENTRY).await?;
    cex.venue.fault(json!({"kind": "drop_after_commit", "ms": 20000})).await?;
    let workers = (cex.worker("qtg-dispatcher").await?, cex.worker("qtg-observer").await?);
    let id = cex.movement("cex-drop-1", "100").await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    wait_node(&cex.db.pool, withdraw, "node_state = 'UNKNOWN'", 30).await?;
    let (_, r, code) = cex.refs(withdraw).await?;
    assert_eq!(code.as_deref(), Some("CEX_NO_ANSWER"));
    assert_eq!(r["__submit_attempt_pending"], true, "{r}");
    assert_eq!(cex.diagnosis(&id, "withdraw").await?["case"], "C1", "recovery imminent");
    let recovery = cex.worker("qtg-recovery").await?;
    let m = cex.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", recovery.log());
    let (_, r, _) = cex.refs(withdraw).await?;
    assert_eq!(r["__reconciliation"]["by"], "client_id", "{r}");
    assert!(r.get("__submit_attempt_pending").is_none(), "recovery's evidence cleared the marker: {r}");
    let requests = cex.venue.requests_for(&withdraw.to_string()).await?;
    assert_eq!(requests.len(), 1, "no second withdraw request: {requests:?}");
    assert_eq!(requests[0]["outcome"], "drop_after_commit");
    assert_eq!(cex.venue.paid(&withdraw.to_string()).await?.len(), 1);
    drop((workers, recovery));
    cex.0.db.drop_db().await;
    Ok(())
}

/// A 5xx before the venue committed: UNKNOWN; recovery finds nothing, and once the venue's
/// clock is past the request's deadline the key is void and the node FAILED; the operator's
/// retry (attempt 2) is paid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_5xx_before_commit_is_fenced_then_retried_once() -> anyhow::Result<()> {
    let cex = Cex::start(ENTRY).await?;
    cex.venue.fault(json!({"kind": "error_before_commit", "status": 503})).await?;
    let workers =
        (cex.worker("qtg-dispatcher").await?, cex.worker("qtg-observer").await?, cex.worker("qtg-recovery").await?);
    let id = cex.movement("cex-5xx-1", "100").await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    let m = cex.wait(&id, &["FAILED", "COMPLETED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "FAILED", "{m:#}");
    let (_, r, code) = cex.refs(withdraw).await?;
    assert_eq!(code.as_deref(), Some("CEX_WITHDRAWAL_NOT_FOUND"), "{r}");
    assert_eq!(r["__reconciliation"]["outcome"], "absent_fenced");
    let key: String = sqlx::query_scalar("SELECT status FROM cex_submit_keys WHERE idempotency_key = $1")
        .bind(format!("{withdraw}:1"))
        .fetch_one(&cex.db.pool)
        .await?;
    assert_eq!(key, "void");
    cex.api
        .ok(
            "POST",
            &format!("/v3/movements/{id}/nodes/withdraw/actions/retry"),
            &cex.keys.operator,
            Some(json!({"reason": "venue 503, fenced by recovery"})),
            200,
        )
        .await?;
    let m = cex.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let requests = cex.venue.requests_for(&withdraw.to_string()).await?;
    let outcomes: Vec<_> = requests.iter().map(|r| (r["client_id"].clone(), r["outcome"].clone())).collect();
    assert_eq!(
        outcomes,
        [
            (json!(format!("{withdraw}:1")), json!("error_before_commit")),
            (json!(format!("{withdraw}:2")), json!("booked"))
        ]
    );
    assert_eq!(cex.venue.paid(&withdraw.to_string()).await?.len(), 1);
    drop(workers);
    cex.0.db.drop_db().await;
    Ok(())
}

/// 401 on the withdraw request: the venue did nothing, FAILED at once. 401 while recovery
/// reconciles (C3b): the node is handed to a person with the gate and review markers and its
/// key kept; once the credentials work again, resume lets recovery find it by client id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn auth_failures_fail_a_submit_and_gate_a_reconciliation() -> anyhow::Result<()> {
    let cex = Cex::start(ENTRY).await?;
    let workers =
        (cex.worker("qtg-dispatcher").await?, cex.worker("qtg-observer").await?, cex.worker("qtg-recovery").await?);
    cex.venue.fault(json!({"kind": "unauthorized"})).await?;
    let refused = cex.movement("cex-401-submit", "100").await?;
    let m = cex.wait(&refused, &["FAILED"], 30).await?;
    assert_eq!(node(&m, "withdraw")["error_code"], "CEX_AUTH_FAILED", "{m:#}");
    let first = cex.node(&refused, "withdraw").await?;
    assert!(cex.venue.paid(&first.to_string()).await?.is_empty());
    // C3b: committed, answer lost, and the history refuses our key meanwhile.
    cex.venue.fault(json!({"kind": "drop_after_commit", "ms": 20000})).await?;
    cex.venue.fault(json!({"kind": "unauthorized", "endpoint": "history", "count": 0})).await?;
    let id = cex.movement("cex-401-recover", "100").await?;
    let m = cex.wait(&id, &["MANUAL_INTERVENTION"], 60).await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    let (state, r, code) = cex.refs(withdraw).await?;
    assert_eq!((state.as_str(), code.as_deref()), ("UNKNOWN", Some("RECONCILIATION_AUTH_FAILED")), "{m:#}");
    assert_eq!(r["__legacy_reconciliation_gated"], true);
    assert_eq!(r["__manual_review_required"], "reconciliation_auth_failed");
    assert_eq!(r["__submit_attempt_pending"], true, "the reservation is kept: {r}");
    assert_eq!(cex.diagnosis(&id, "withdraw").await?["case"], "C3b");
    let key: String = sqlx::query_scalar("SELECT status FROM cex_submit_keys WHERE idempotency_key = $1")
        .bind(format!("{withdraw}:1"))
        .fetch_one(&cex.db.pool)
        .await?;
    assert_eq!(key, "sent", "never voided on an auth failure");
    // Credentials fixed; the operator resumes; recovery reconciles by client id.
    cex.venue.admin("DELETE", "/admin/faults", None).await?;
    cex.api
        .ok(
            "POST",
            &format!("/v3/movements/{id}/actions/resume"),
            &cex.keys.operator,
            Some(json!({"reason": "key rotated"})),
            200,
        )
        .await?;
    let m = cex.wait(&id, &["COMPLETED", "FAILED"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    assert_eq!(cex.venue.requests_for(&withdraw.to_string()).await?.len(), 1);
    assert_eq!(cex.venue.paid(&withdraw.to_string()).await?.len(), 1);
    drop(workers);
    cex.0.db.drop_db().await;
    Ok(())
}

/// The venue's history shows two identical withdrawals and neither carries the client id:
/// RECONCILIATION_AMBIGUOUS while the lookback window is open, then a person (C2), with the
/// candidates as evidence. The movement paid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ambiguous_match_waits_out_the_lookback_then_calls_a_person() -> anyhow::Result<()> {
    let cex = Cex::start(&format!("{ENTRY}, lookback_seconds = 8")).await?;
    cex.venue.fault(json!({"kind": "ambiguous", "ms": 20000})).await?;
    let workers =
        (cex.worker("qtg-dispatcher").await?, cex.worker("qtg-observer").await?, cex.worker("qtg-recovery").await?);
    let id = cex.movement("cex-ambiguous-1", "100").await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    wait_node(&cex.db.pool, withdraw, "error_code = 'RECONCILIATION_AMBIGUOUS'", 30).await?;
    let (state, r, _) = cex.refs(withdraw).await?;
    assert_eq!(state, "UNKNOWN");
    assert!(r.get("__manual_review_required").is_none(), "the window is still open: {r}");
    assert_eq!(request_state(&cex.db.pool, id.parse()?).await?, "EXECUTING");
    let m = cex.wait(&id, &["MANUAL_INTERVENTION"], 30).await?;
    let (_, r, _) = cex.refs(withdraw).await?;
    assert_eq!(r["__manual_review_required"], "reconciliation_ambiguous", "{m:#}");
    let d = cex.diagnosis(&id, "withdraw").await?;
    assert_eq!(d["case"], "C2", "{d:#}");
    let evidence = &d["evidence"]["reconciliation"];
    assert_eq!(evidence["outcome"], "ambiguous", "{d:#}");
    assert_eq!(evidence["candidates"].as_array().map(Vec::len), Some(2), "{evidence}");
    assert_eq!(cex.venue.requests_for(&withdraw.to_string()).await?.len(), 1);
    assert_eq!(cex.venue.paid(&withdraw.to_string()).await?.len(), 1, "one of the two is the other desk's");
    drop(workers);
    cex.0.db.drop_db().await;
    Ok(())
}

/// A status code the mapping does not know: a warning and a counter, the node stays
/// OBSERVING (C5), nothing is guessed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_status_code_keeps_the_node_observing() -> anyhow::Result<()> {
    let cex = Cex::start(ENTRY).await?;
    cex.venue.fault(json!({"kind": "unknown_status", "code": 99})).await?;
    let dispatcher = cex.worker("qtg-dispatcher").await?;
    let observer = cex.worker("qtg-observer").await?;
    let id = cex.movement("cex-unmapped-1", "100").await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    wait_node(&cex.db.pool, withdraw, "provider_state = 'unmapped_status_99'", 30).await?;
    let (state, r, code) = cex.refs(withdraw).await?;
    assert_eq!((state.as_str(), code.as_deref()), ("OBSERVING", Some("CEX_STATUS_UNMAPPED")));
    assert_eq!(r["__status_unmapped"]["code"], 99);
    assert_eq!(cex.diagnosis(&id, "withdraw").await?["case"], "C5");
    assert!(observer.log().contains("unknown_code"), "{}", observer.log());
    let admin = observer.wait_field("admin_addr", Duration::from_secs(5)).await?;
    let metrics = http_client().get(format!("http://{admin}/metrics")).send().await?.text().await?;
    assert!(
        metrics.lines().any(|l| l.starts_with("qtg_venue_unknown_status_total{") && l.contains("code=\"99\"")),
        "{metrics}"
    );
    assert_eq!(request_state(&cex.db.pool, id.parse()?).await?, "EXECUTING");
    assert_eq!(cex.venue.paid(&withdraw.to_string()).await?.len(), 1);
    drop((dispatcher, observer));
    cex.0.db.drop_db().await;
    Ok(())
}

/// A dispatcher frozen after the arm, before its withdraw request left: recovery concludes
/// the attempt absent once the venue's clock is past its deadline, the operator retries, and
/// when the frozen process wakes and sends, the venue refuses the request (its timestamp is
/// outside recvWindow). Paid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_frozen_before_its_withdraw_request_is_refused_by_the_venue() -> anyhow::Result<()> {
    // The venue's clock answers slowly once: the dispatcher is frozen while it waits, and the
    // venue call's own deadline (30 s) outlasts the freeze, so the woken process goes on.
    let cex = Cex::start("timeout_ms = 30000, history_lag_seconds = 1").await?;
    cex.venue.fault(json!({"kind": "latency", "endpoint": "time", "ms": 1500})).await?;
    let frozen = cex.worker("qtg-dispatcher").await?;
    let workers = (cex.worker("qtg-observer").await?, cex.worker("qtg-recovery").await?);
    let id = cex.movement("cex-frozen-1", "100").await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    // Frozen once its key is marked sent, while it waits for the venue's time.
    let sent = "SELECT EXISTS (SELECT 1 FROM cex_submit_keys WHERE request_node_id = $1 AND status = 'sent')";
    wait_db(&cex.db.pool, sent, withdraw, Duration::from_secs(30)).await?;
    frozen.signal("STOP");
    let m = cex.wait(&id, &["FAILED"], 60).await?;
    assert_eq!(node(&m, "withdraw")["error_code"], "CEX_WITHDRAWAL_NOT_FOUND", "{m:#}");
    assert!(cex.venue.requests().await?.is_empty(), "nothing reached the venue yet");
    cex.api
        .ok(
            "POST",
            &format!("/v3/movements/{id}/nodes/withdraw/actions/retry"),
            &cex.keys.operator,
            Some(json!({"reason": "attempt 1 fenced"})),
            200,
        )
        .await?;
    let second = cex.worker("qtg-dispatcher").await?;
    let m = cex.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    frozen.signal("CONT");
    wait_until("the late request reaches the venue", Duration::from_secs(20), || async {
        Ok(cex.venue.requests_for(&withdraw.to_string()).await?.len() >= 2)
    })
    .await?;
    let requests = cex.venue.requests_for(&withdraw.to_string()).await?;
    let late = requests.iter().find(|r| r["client_id"] == format!("{withdraw}:1")).expect("attempt 1's request");
    assert_eq!(late["outcome"], "refused:-1021", "timestamp outside recvWindow: {late}");
    let on_time = requests.iter().find(|r| r["client_id"] == format!("{withdraw}:2")).expect("attempt 2's request");
    assert_eq!(on_time["outcome"], "booked");
    assert_eq!(cex.venue.paid(&withdraw.to_string()).await?.len(), 1);
    assert_eq!(request_state(&cex.db.pool, id.parse()?).await?, "COMPLETED", "the late answer changed nothing");
    drop((frozen, second, workers));
    cex.0.db.drop_db().await;
    Ok(())
}

/// A dispatcher killed between the venue's commit and qtg's: recovery finds the withdrawal by
/// client id, with no second withdraw request at the venue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_killed_after_the_venue_committed_is_reconciled_by_client_id() -> anyhow::Result<()> {
    // The venue call may take 2.5 s (the kill lands well inside it).
    let cex = Cex::start("timeout_ms = 2500, history_lag_seconds = 1").await?;
    cex.venue.fault(json!({"kind": "drop_after_commit", "ms": 20000})).await?;
    let mut killed = cex.worker("qtg-dispatcher").await?;
    let workers = (cex.worker("qtg-observer").await?, cex.worker("qtg-recovery").await?);
    let id = cex.movement("cex-killed-1", "100").await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    wait_until("the venue commits", Duration::from_secs(30), || async {
        Ok(cex.venue.requests_for(&withdraw.to_string()).await?.iter().any(|r| r["outcome"] == "drop_after_commit"))
    })
    .await?;
    killed.signal("KILL");
    killed.wait_exit(Duration::from_secs(10)).await?;
    let (state, r, _) = cex.refs(withdraw).await?;
    assert_eq!(state, "SUBMITTING", "qtg never recorded the answer: {r}");
    let second = cex.worker("qtg-dispatcher").await?;
    let m = cex.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let (_, r, _) = cex.refs(withdraw).await?;
    assert_eq!(r["__reconciliation"]["by"], "client_id", "{r}");
    assert_eq!(cex.venue.requests_for(&withdraw.to_string()).await?.len(), 1, "no second withdraw request");
    assert_eq!(cex.venue.paid(&withdraw.to_string()).await?.len(), 1);
    drop((second, workers));
    cex.0.db.drop_db().await;
    Ok(())
}

/// `qtgctl venues drill`: the runbook's submit-safety drill against the venue, reading only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_submit_safety_drill_checks_a_venue_without_moving_funds() -> anyhow::Result<()> {
    let venue = VenueSim::start("drill").await?;
    let registry = venue.registry(&format!("drill-{}", uuid::Uuid::new_v4().simple()), ENTRY)?;
    let drill = |asset: &str, secret: &str| {
        std::process::Command::new(bin_dir().join("qtgctl"))
            .args(["venues", "drill", "--venue", "sim_a", "--asset", asset])
            .env_clear()
            .env("MG_EXECUTOR_REGISTRY", &registry)
            .env("MG_SIM_A_ACCESS_KEY", "sim-a-api-key-0001")
            .env("MG_SIM_A_SECRET", secret)
            .output()
    };
    let ok = drill("USDT", "sim-a-secret-0001")?;
    let text = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&ok.stderr));
    assert!(text.contains("drill passed") && text.contains("withdraw_history"), "{text}");
    assert!(!text.contains("sim-a-secret-0001"), "the secret is never printed");
    // A wrong secret: the venue refuses the signature; USDT stays checkable, BTC is closed.
    let bad = drill("USDT", "not-the-secret")?;
    let text = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(4), "{text}");
    assert!(text.contains("FAIL credentials"), "{text}");
    assert!(!text.contains("not-the-secret"), "{text}");
    let closed = drill("BTC", "sim-a-secret-0001")?;
    let text = String::from_utf8_lossy(&closed.stdout);
    assert_eq!(closed.status.code(), Some(4), "{text}");
    assert!(text.contains("FAIL asset_network"), "{text}");
    assert!(venue.requests().await?.is_empty(), "the drill sent no withdrawal");
    Ok(())
}

/// The address a withdrawal pays is the intent's `destination` the approver reads, given once
/// and as a string: a destination object the lane cannot use, an `address` beside it that says
/// something else, and a source that is not the venue account the template withdraws from are
/// refused when the movement is created, with what the lane expects. Nothing is recorded and
/// nothing reaches the venue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_paid_is_the_destination_shown() -> anyhow::Result<()> {
    let cex = Cex::start(ENTRY).await?;
    let create =
        |intent: Value| json!({"template_key": "demo.cex.a_to_b", "idempotency_key": "shown", "intent": intent});
    for (intent, expect) in [
        (
            json!({
                "asset": "USDT", "amount": "100", "source": "sim_a",
                "destination": {"address": SIM_B_DEPOSIT, "memo": "1"}
            }),
            "as a string",
        ),
        (
            json!({"asset": "USDT", "amount": "100", "source": "sim_a", "destination": SIM_B_DEPOSIT,
                   "address": "0x000000000000000000000000000000000000beef"}),
            "is not the address paid",
        ),
        (
            json!({"asset": "USDT", "amount": "100", "source": "sim_b", "destination": SIM_B_DEPOSIT}),
            "not the account this template pays from (sim_a)",
        ),
    ] {
        let (s, b) = cex.api.call("POST", "/v3/movements", &cex.keys.requester, Some(create(intent))).await?;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{expect}: {b}");
        assert!(b["error"]["message"].as_str().unwrap_or_default().contains(expect), "{expect}: {b}");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_requests").fetch_one(&cex.db.pool).await?;
    assert_eq!(n, 0, "nothing recorded");
    assert!(cex.venue.requests().await?.is_empty(), "nothing reached the venue");
    cex.0.db.drop_db().await;
    Ok(())
}

/// On a venue that keeps qtg's client id on every withdrawal (the default, as Binance does),
/// a withdrawal of the same amount to the same address *without* it — made in the exchange's
/// web UI while qtg's own request failed before commit — is never claimed: recovery shows it
/// to a person (RECONCILIATION_AMBIGUOUS, then MANUAL_INTERVENTION), and neither completes the
/// movement with nothing paid by qtg nor fails it while money of that shape left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lookalike_without_our_client_id_is_never_claimed() -> anyhow::Result<()> {
    let cex = Cex::start(&format!("{ENTRY}, lookback_seconds = 8")).await?;
    cex.venue.fault(json!({"kind": "lookalike"})).await?;
    let workers =
        (cex.worker("qtg-dispatcher").await?, cex.worker("qtg-observer").await?, cex.worker("qtg-recovery").await?);
    let id = cex.movement("cex-lookalike-1", "100").await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    let m = cex.wait(&id, &["MANUAL_INTERVENTION", "COMPLETED", "FAILED"], 60).await?;
    assert_eq!(m["request_state"], "MANUAL_INTERVENTION", "{m:#}");
    let (state, r, code) = cex.refs(withdraw).await?;
    assert_eq!((state.as_str(), code.as_deref()), ("UNKNOWN", Some("RECONCILIATION_AMBIGUOUS")), "{r}");
    assert_eq!(r["__manual_review_required"], "reconciliation_ambiguous", "{r}");
    assert_eq!(r["__reconciliation"]["matching"], "client_id_only", "{r}");
    assert_eq!(r["__reconciliation"]["candidates"].as_array().map(Vec::len), Some(1), "{r}");
    let outcomes: Vec<_> =
        cex.venue.requests_for(&withdraw.to_string()).await?.iter().map(|q| q["outcome"].clone()).collect();
    assert_eq!(outcomes, [json!("lookalike")], "one request, never booked");
    assert!(cex.venue.paid(&withdraw.to_string()).await?.is_empty(), "nothing paid for qtg's node");
    drop(workers);
    cex.0.db.drop_db().await;
    Ok(())
}

/// One venue fee model end to end, with qtg's entries configured for it (`fee_model`) and the
/// venue's account charging that way: a movement of 100 "sent", an "arrive exactly 50" movement
/// (grossed up by the fee within the template's `max_fee`), and a capital transfer of 30 — each
/// completes, the venue's books move exactly as the model says, and the transfer's settlement
/// records what left, the fee and what arrived.
async fn fee_model_end_to_end(model: &str) -> anyhow::Result<()> {
    let mut cex = Cex::start(&format!("{ENTRY}, fee_model = \"{model}\"")).await?;
    cex.venue.admin("POST", "/admin/fee-model", Some(json!({"account": "sim_a", "fee_model": model}))).await?;
    cex.env.extend(
        [
            ("MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED", "true"),
            ("MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS", "0.3"),
            ("MG_CAPITAL_TRANSFER_FOLLOWUP_STALE_SECONDS", "1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut exact: Value = serde_json::from_str(&std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/cex-demo-template.json"),
    )?)?;
    exact["template_key"] = json!("demo.cex.a_to_b.exact");
    exact["risk_controls"] = json!({"max_fee": {"USDT": "2"}});
    install_template(&cex.api, &cex.keys, exact).await?;
    let workers =
        (cex.worker("qtg-dispatcher").await?, cex.worker("qtg-observer").await?, cex.worker("qtg-followup").await?);
    let logs = || format!("{}\n{}\n{}", workers.0.log(), workers.1.log(), workers.2.log());
    let usdt = |ledger: &Value, account: &str| -> f64 {
        ledger["balances"][account]["USDT"].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
    };
    let books = || async { cex.venue.admin("GET", "/admin/ledger", None).await };
    let settled = |want_a: f64, want_b: f64| async move {
        wait_until("the deposit credited", Duration::from_secs(30), || async {
            let l = books().await?;
            Ok(usdt(&l, "sim_a") == want_a && usdt(&l, "sim_b") == want_b)
        })
        .await
    };
    let deducted = model == "deducted";
    // 100 applied for: deducted → 100 leaves, 99 arrive; added → 101 leaves, 100 arrive.
    let id = cex.movement(&format!("fees-{model}-sent"), "100").await?;
    let m = cex.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await;
    let m = m.map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", logs());
    let (a, b) = if deducted { (999_900.0, 500_099.0) } else { (999_899.0, 500_100.0) };
    settled(a, b).await?;
    // "Arrive exactly 50": deducted → 51 applied for and debited; added → 50 applied for, 51 debited.
    let body = json!({
        "template_key": "demo.cex.a_to_b.exact",
        "intent": {"asset": "USDT", "amount": "50", "amount_is": "received", "source": "sim_a",
                   "destination": SIM_B_DEPOSIT},
        "idempotency_key": format!("fees-{model}-exact"),
    });
    let m = cex.api.ok("POST", "/v3/movements", &cex.keys.requester, Some(body), 201).await?;
    let id = m["id"].as_str().unwrap_or_default().to_string();
    cex.api.ok("POST", &format!("/v3/movements/{id}/approve"), &cex.keys.approver, None, 200).await?;
    let m = cex.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", logs());
    settled(a - 51.0, b + 50.0).await?;
    let withdraw = cex.node(&id, "withdraw").await?;
    let requests = cex.venue.requests_for(&withdraw.to_string()).await?;
    let applied = if deducted { "51" } else { "50" };
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["amount"], applied, "the withdraw request's amount: {requests:?}");
    // The same intent on the template without a fee cap is refused at creation, nothing recorded.
    if deducted {
        let uncapped = json!({"template_key": "demo.cex.a_to_b", "idempotency_key": "fees-uncapped",
            "intent": {"asset": "USDT", "amount": "50", "amount_is": "received", "source": "sim_a",
                       "destination": SIM_B_DEPOSIT}});
        let refused = cex.api.ok("POST", "/v3/movements", &cex.keys.requester, Some(uncapped), 400).await?;
        assert!(refused["error"]["message"].as_str().is_some_and(|m| m.contains("max_fee")), "{refused}");
    }
    // A capital transfer of 30: its settlement follows the model.
    let body = json!({"from": "sim_a", "to": SIM_B_DEPOSIT, "asset": "USDT", "amount": "30", "reason": "fees",
                      "template_key": "demo.cex.a_to_b", "idempotency_key": format!("fees-{model}-ct")});
    let ct = cex.api.ok("POST", "/v3/capital-transfers", &cex.keys.requester, Some(body), 201).await?;
    let ct_id = ct["id"].as_str().unwrap_or_default().to_string();
    let movement = ct["movement_id"].as_str().unwrap_or_default().to_string();
    cex.api.ok("POST", &format!("/v3/movements/{movement}/approve"), &cex.keys.approver, None, 200).await?;
    let path = format!("/v3/capital-transfers/{ct_id}");
    let get = || cex.api.ok("GET", &path, &cex.keys.requester, None, 200);
    wait_until("the transfer closed", Duration::from_secs(60), || async {
        Ok(get().await?["state"] != "MOVEMENT_CREATED")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    let done = get().await?;
    assert_eq!(done["state"], "COMPLETED", "{done:#}\n{}", logs());
    let (debit, arrived) = if deducted { ("30", "29.00000000") } else { ("31", "30.00000000") };
    let s = &done["settlement"];
    assert_eq!(
        (s["fee_model"].as_str(), s["debit"].as_str(), s["fee_charged"].as_str(), s["arrived"].as_str()),
        (Some(model), Some(debit), Some("1"), Some(arrived)),
        "{done:#}"
    );
    let (a, b) = if deducted { (a - 51.0 - 30.0, b + 50.0 + 29.0) } else { (a - 51.0 - 31.0, b + 50.0 + 30.0) };
    settled(a, b).await?;
    drop(workers);
    cex.0.db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_venue_that_deducts_its_fee_the_books_follow_the_model() -> anyhow::Result<()> {
    fee_model_end_to_end("deducted").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_venue_that_adds_its_fee_the_books_follow_the_model() -> anyhow::Result<()> {
    fee_model_end_to_end("added").await
}
