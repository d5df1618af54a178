//! The CEX lane against a Kraken-shaped venue account (`qtg-venue-sim`'s `sim_k`: Kraken's
//! REST funding API, HMAC-SHA512 signing, a nonce per key, withdrawals by withdrawal key, no
//! client id, the fee deducted from the amount), through separately started workers. What a
//! venue without client ids needs: a dropped answer reconciled by amount, key and time; two
//! candidates handed to a person; and a request that arrives late made harmless by the key's
//! nonce — counted at the venue's own request log.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

const ENV: [(&str, &str); 5] = CEX_ENV;
const ENTRY: &str = CEX_ENTRY;

/// The bed with the Kraken-shaped account's template (sim_k → sim_b).
struct Kraken(CexBed);

impl std::ops::Deref for Kraken {
    type Target = CexBed;
    fn deref(&self) -> &CexBed {
        &self.0
    }
}

impl Kraken {
    async fn start(entry: &str) -> anyhow::Result<Kraken> {
        Ok(Kraken(CexBed::start(&ENV, entry, true, "cex-kraken-demo-template.json").await?))
    }

    /// Creates and approves a movement of `amount` USDT from sim_k to sim_b.
    async fn movement(&self, idem: &str, amount: &str) -> anyhow::Result<String> {
        self.0.movement("demo.cex.k_to_b", "sim_k", idem, amount).await
    }

    /// Every withdraw request sim_k received, in order (Kraken's carry no client id).
    async fn requests(&self) -> anyhow::Result<Vec<Value>> {
        Ok(self.venue.requests().await?.into_iter().filter(|r| r["account"] == "sim_k").collect())
    }

    /// Withdrawals booked for sim_k's requests (not another desk's).
    async fn paid(&self) -> anyhow::Result<Vec<Value>> {
        let ledger = self.venue.admin("GET", "/admin/ledger", None).await?;
        Ok(ledger["withdrawals"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|w| w["account"] == "sim_k" && w["origin"] == "request")
            .collect())
    }
}

/// Withdrawn by withdrawal key with the address and `max_fee`, followed by refid, credited on
/// sim_b: 100 applied for, the 1 USDT fee deducted, 99 arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kraken_withdrawal_by_key_completes_and_the_fee_is_deducted() -> anyhow::Result<()> {
    let k = Kraken::start(ENTRY).await?;
    let workers = (k.worker("qtg-dispatcher").await?, k.worker("qtg-observer").await?);
    let id = k.movement("kraken-happy-1", "100").await?;
    let m = k.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await;
    let m = m.map_err(|e| anyhow::anyhow!("{e}\n{}\n{}", workers.0.log(), workers.1.log()))?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", workers.0.log());
    let withdraw = k.node(&id, "withdraw").await?;
    let (_, w, _) = k.refs(withdraw).await?;
    let refid = w["exchange_withdrawal_id"].as_str().expect("Kraken's refid").to_string();
    assert_eq!((w["fee_model"].as_str(), w["expected_arrival"].as_str()), (Some("deducted"), Some("99")), "{w}");
    let requests = k.requests().await?;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["outcome"], "booked");
    assert_eq!(requests[0]["amount"], "100");
    assert!(requests[0]["client_id"].is_null(), "Kraken takes no client id");
    let paid = k.paid().await?;
    assert_eq!((paid.len(), paid[0]["id"].as_str()), (1, Some(refid.as_str())));
    wait_until("sim_b credited", Duration::from_secs(20), || async {
        let l = k.venue.admin("GET", "/admin/ledger", None).await?;
        Ok(l["balances"]["sim_b"]["USDT"] == "500099.00000000" && l["balances"]["sim_k"]["USDT"] == "999900.00000000")
    })
    .await?;
    let (status, nonce): (String, Option<i64>) =
        sqlx::query_as("SELECT status, nonce FROM cex_submit_keys WHERE request_node_id = $1")
            .bind(withdraw)
            .fetch_one(&k.db.pool)
            .await?;
    assert_eq!(status, "sent");
    assert!(nonce.is_some_and(|n| n > 0), "the nonce it was signed with is noted before it is sent");
    drop(workers);
    k.0.db.drop_db().await;
    Ok(())
}

/// Kraken booked the withdrawal and its answer never came back: UNKNOWN; with no client id,
/// recovery finds it by amount, withdrawal key and time inside the lookback. One request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_answer_is_reconciled_by_amount_key_and_time() -> anyhow::Result<()> {
    let k = Kraken::start(ENTRY).await?;
    k.venue.fault(json!({"kind": "drop_after_commit", "account": "sim_k", "ms": 20000})).await?;
    let workers = (k.worker("qtg-dispatcher").await?, k.worker("qtg-observer").await?, k.worker("qtg-recovery").await?);
    let id = k.movement("kraken-drop-1", "100").await?;
    let m = k.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\n{}", workers.2.log());
    let (_, r, _) = k.refs(k.node(&id, "withdraw").await?).await?;
    assert_eq!(r["__reconciliation"]["by"], "amount_address", "{r}");
    assert_eq!(r["__reconciliation"]["matching"], "amount_address", "{r}");
    let requests = k.requests().await?;
    assert_eq!(requests.len(), 1, "no second withdraw request: {requests:?}");
    assert_eq!(requests[0]["outcome"], "drop_after_commit");
    assert_eq!(k.paid().await?.len(), 1);
    drop(workers);
    k.0.db.drop_db().await;
    Ok(())
}

/// Two withdrawals of the same amount by the same key inside the lookback (another desk's
/// beside ours) and no client id to tell them apart: a person decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_candidates_go_to_a_person() -> anyhow::Result<()> {
    let k = Kraken::start(&format!("{ENTRY}, lookback_seconds = 8")).await?;
    k.venue.fault(json!({"kind": "ambiguous", "account": "sim_k", "ms": 20000})).await?;
    let workers = (k.worker("qtg-dispatcher").await?, k.worker("qtg-observer").await?, k.worker("qtg-recovery").await?);
    let id = k.movement("kraken-ambiguous-1", "100").await?;
    let m = k.wait(&id, &["MANUAL_INTERVENTION", "COMPLETED", "FAILED"], 60).await?;
    assert_eq!(m["request_state"], "MANUAL_INTERVENTION", "{m:#}");
    let (state, r, code) = k.refs(k.node(&id, "withdraw").await?).await?;
    assert_eq!((state.as_str(), code.as_deref()), ("UNKNOWN", Some("RECONCILIATION_AMBIGUOUS")), "{r}");
    assert_eq!(r["__manual_review_required"], "reconciliation_ambiguous", "{r}");
    assert_eq!(r["__reconciliation"]["candidates"].as_array().map(Vec::len), Some(2), "{r}");
    assert_eq!(k.requests().await?.len(), 1);
    assert_eq!(k.paid().await?.len(), 1, "one of the two is the other desk's");
    drop(workers);
    k.0.db.drop_db().await;
    Ok(())
}

/// A withdraw request held in flight (a `latency` fault: it reaches Kraken 25 s later) while
/// qtg's call gives up: recovery finds nothing, asks for the fence, has a call with a higher
/// nonce accepted, and once the history lag has passed concludes the attempt absent (FAILED);
/// when the held request finally arrives, Kraken refuses it (`EAPI:Invalid nonce`) and nothing
/// is paid; the operator's retry is paid. Paid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_request_is_refused_by_the_keys_nonce() -> anyhow::Result<()> {
    let k = Kraken::start(ENTRY).await?;
    k.venue.fault(json!({"kind": "latency", "account": "sim_k", "ms": 25000})).await?;
    let workers = (k.worker("qtg-dispatcher").await?, k.worker("qtg-observer").await?, k.worker("qtg-recovery").await?);
    let id = k.movement("kraken-late-1", "100").await?;
    let withdraw = k.node(&id, "withdraw").await?;
    let m = k.wait(&id, &["FAILED", "COMPLETED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "FAILED", "{m:#}\n{}", workers.2.log());
    assert_eq!(node(&m, "withdraw")["error_code"], "CEX_WITHDRAWAL_NOT_FOUND", "{m:#}");
    let (_, r, _) = k.refs(withdraw).await?;
    let evidence = &r["__reconciliation"];
    assert_eq!(evidence["outcome"], "absent_fenced", "{evidence}");
    assert!(evidence["nonce"].is_u64() && evidence["fenced_at"].is_string(), "the request's nonce, fenced: {evidence}");
    // The held request arrives after the attempt was concluded absent: refused, nothing paid.
    wait_until("the held request reaches the venue", Duration::from_secs(60), || async {
        Ok(k.requests().await?.first().is_some_and(|r| r["outcome"] != "received"))
    })
    .await?;
    let late = k.requests().await?;
    assert_eq!(late[0]["outcome"], "refused:EAPI:Invalid nonce", "{late:?}");
    assert!(k.paid().await?.is_empty(), "nothing booked for a FAILED attempt");
    k.api
        .ok(
            "POST",
            &format!("/v3/movements/{id}/nodes/withdraw/actions/retry"),
            &k.keys.operator,
            Some(json!({"reason": "attempt 1 fenced by nonce"})),
            200,
        )
        .await?;
    let m = k.wait(&id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], 60).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let outcomes: Vec<Value> = k.requests().await?.iter().map(|r| r["outcome"].clone()).collect();
    assert_eq!(outcomes, [json!("refused:EAPI:Invalid nonce"), json!("booked")], "attempt 1 late, attempt 2 on time");
    assert_eq!(k.paid().await?.len(), 1);
    assert_eq!(request_state(&k.db.pool, id.parse()?).await?, "COMPLETED", "the late answer changed nothing");
    drop(workers);
    k.0.db.drop_db().await;
    Ok(())
}

/// The drill against the Kraken-shaped account: every read check, and the nonce fence's
/// precondition — a request signed before a later accepted one is refused (the key's nonce
/// window is 0). Nothing is withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drill_checks_the_nonce_fence_holds() -> anyhow::Result<()> {
    let venue = VenueSim::start("kdrill").await?;
    let registry = venue.kraken_registry(&format!("kdrill-{}", uuid::Uuid::new_v4().simple()), CEX_ENTRY)?;
    let out = std::process::Command::new(bin_dir().join("qtgctl"))
        .args(["venues", "drill", "--venue", "sim_k", "--asset", "USDT"])
        .env_clear()
        .env("MG_EXECUTOR_REGISTRY", &registry)
        .envs(VENUE_SIM_CREDENTIALS.iter().copied())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("ok   nonce_window") && text.contains("drill passed"), "{text}");
    assert!(!text.contains("c2ltLWst"), "the secret is never printed");
    assert!(venue.requests().await?.is_empty(), "the drill sent no withdrawal");
    Ok(())
}
