//! Signed callbacks end to end, against a real HTTP receiver that checks every signature with
//! its own HMAC (not libs/wire-auth's): retries keep their timestamp and nonce, the backoff
//! schedule is 2, 4, 8, 16 s (read from `next_attempt_at`, with the test moving the clock of
//! due rows), the fifth failure dead-letters the row, a replay delivers the same event once
//! the receiver is back, and private destinations are refused unless allowed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, KeyInit, Mac};
use qtg_tests::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const SECRET: &str = "whsec-e2e-0001";
const OWN_SECRET: &str = "movement-own-secret-0001";

#[derive(Clone, Debug)]
struct Delivery {
    timestamp: String,
    nonce: String,
    body: Value,
    valid: bool,
    /// Which secret signed it.
    own_secret: bool,
}

#[derive(Clone, Default)]
struct Receiver {
    failing: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Delivery>>>,
}

fn header(h: &HeaderMap, k: &str) -> String {
    h.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

async fn receive(
    axum::extract::State(r): axum::extract::State<Receiver>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let (ts, nonce, sig) = (
        header(&headers, "x-qtg-callback-timestamp"),
        header(&headers, "x-qtg-callback-nonce"),
        header(&headers, "x-qtg-callback-signature"),
    );
    let message = format!("{ts}\n{nonce}\n{}", hex::encode(Sha256::digest(&body)));
    let signs = |secret: &str| {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(message.as_bytes());
        hex::encode(mac.finalize().into_bytes()) == sig
    };
    let v3 = header(&headers, "x-qtg-callback-signature-version") == "v3";
    let own_secret = v3 && signs(OWN_SECRET);
    let valid = v3 && (signs(SECRET) || own_secret);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    r.seen.lock().unwrap().push(Delivery { timestamp: ts, nonce, body, valid, own_secret });
    if r.failing.load(Ordering::SeqCst) {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callbacks_are_signed_retried_dead_lettered_and_replayed() -> anyhow::Result<()> {
    let receiver = Receiver::default();
    receiver.failing.store(true, Ordering::SeqCst);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(receiver.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[("MG_CALLBACK_ALLOW_PRIVATE", "true")]).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.cb", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await?;

    // The guard at creation: an API that does not allow private hosts refuses the URL.
    let strict = Api::start(&db.url, &[("MG_MIGRATE", "false")]).await?;
    let body = json!({
        "template_key": "t.cb", "intent": {"asset": "USDC", "amount": "1"}, "idempotency_key": "cb-0",
        "callback_url": hook
    });
    let (s, b) = strict.call("POST", "/v3/movements", &keys.requester, Some(body)).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{b}");
    drop(strict);

    let id = start_movement(&api, &keys, "t.cb", "cb-1", Some(&hook)).await?;
    let first: uuid::Uuid = sqlx::query_scalar(
        "SELECT id FROM movement_callback_outbox WHERE request_id = $1::uuid ORDER BY sequence LIMIT 1",
    )
    .bind(&id)
    .fetch_one(&db.pool)
    .await?;

    // A worker that does not allow private destinations refuses before sending anything.
    let base = [("MG_CALLBACK_SECRET", SECRET), ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2")];
    let mut guarded = Proc::spawn("qtg-callback", &db.url, &base).await?;
    wait_until("a refused delivery", Duration::from_secs(30), || async {
        let e: Option<String> = sqlx::query_scalar("SELECT last_error FROM movement_callback_outbox WHERE id = $1")
            .bind(first)
            .fetch_one(&db.pool)
            .await?;
        Ok(e.is_some_and(|e| e.contains("refused")))
    })
    .await?;
    assert!(receiver.seen.lock().unwrap().is_empty(), "nothing reached the private receiver");
    guarded.signal("TERM");
    guarded.wait_exit(Duration::from_secs(10)).await?;
    sqlx::query("UPDATE movement_callback_outbox SET attempts = 0, last_error = NULL, next_attempt_at = now()")
        .execute(&db.pool)
        .await?;

    let allowed = [base[0], base[1], ("MG_CALLBACK_ALLOW_PRIVATE", "true")];
    let _worker = Proc::spawn("qtg-callback", &db.url, &allowed).await?;
    // Five failures of the first event, each followed by its backoff; the test moves the row's
    // clock forward instead of sleeping 30 s.
    let mut delays = Vec::new();
    for attempt in 1..=5 {
        wait_until("an attempt", Duration::from_secs(30), || async {
            // An attempt is counted when it is claimed; its outcome is recorded after the send.
            let (a, in_flight): (i32, bool) = sqlx::query_as(
                "SELECT attempts, lease_expires_at IS NOT NULL FROM movement_callback_outbox WHERE id = $1",
            )
            .bind(first)
            .fetch_one(&db.pool)
            .await?;
            Ok(a >= attempt && !in_flight)
        })
        .await?;
        let (status, delay): (String, f64) = sqlx::query_as(
            "SELECT status, extract(epoch FROM next_attempt_at - updated_at)::float8 FROM \
             movement_callback_outbox WHERE id = $1",
        )
        .bind(first)
        .fetch_one(&db.pool)
        .await?;
        if attempt < 5 {
            assert_eq!(status, "pending");
            delays.push(delay.round() as i64);
            sqlx::query("UPDATE movement_callback_outbox SET next_attempt_at = now() WHERE id = $1")
                .bind(first)
                .execute(&db.pool)
                .await?;
        } else {
            assert_eq!(status, "dlq", "the fifth failure dead-letters the row");
        }
    }
    assert_eq!(delays, [2, 4, 8, 16], "backoff 2^min(attempts, 6) s");
    let row: (String, Option<String>) =
        sqlx::query_as("SELECT status, last_error FROM movement_callback_outbox WHERE id = $1")
            .bind(first)
            .fetch_one(&db.pool)
            .await?;
    assert_eq!(row.0, "dlq");
    assert!(row.1.unwrap_or_default().contains("500"));

    let event_id = {
        let seen = receiver.seen.lock().unwrap();
        let attempts: Vec<&Delivery> = seen.iter().filter(|d| d.body["sequence"] == 1).collect();
        assert_eq!(attempts.len(), 5, "five attempts of the first event");
        assert!(attempts.iter().all(|d| d.valid), "every delivery carries a valid v3 signature");
        assert!(
            attempts.iter().all(|d| d.timestamp == attempts[0].timestamp && d.nonce == attempts[0].nonce),
            "retries reuse timestamp and nonce"
        );
        attempts[0].body["event_id"].clone()
    };

    // The receiver comes back; an operator replays the dead letter.
    receiver.failing.store(false, Ordering::SeqCst);
    let list = api.ok("GET", &format!("/v3/callbacks?status=dlq&movement_id={id}"), &keys.operator, None, 200).await?;
    assert!(list["items"].as_array().unwrap().iter().any(|c| c["id"] == first.to_string()));
    let (s, _) = api.call("POST", &format!("/v3/callbacks/{first}/actions/replay"), &keys.requester, None).await?;
    assert_eq!(s, 403, "replay is an operator action");
    let replay = api.ok("POST", &format!("/v3/callbacks/{first}/actions/replay"), &keys.operator, None, 201).await?;
    assert_eq!(replay["replay_of"], first.to_string());
    assert_eq!(replay["event_id"], event_id);
    let replay_id = replay["id"].as_str().unwrap().to_string();
    wait_until("the replay delivered", Duration::from_secs(30), || async {
        let s: String = sqlx::query_scalar("SELECT status FROM movement_callback_outbox WHERE id = $1::uuid")
            .bind(&replay_id)
            .fetch_one(&db.pool)
            .await?;
        Ok(s == "sent")
    })
    .await?;
    {
        let seen = receiver.seen.lock().unwrap();
        let delivered: Vec<&Delivery> = seen.iter().filter(|d| d.body["event_id"] == event_id).collect();
        let last = delivered.last().unwrap();
        assert!(last.valid);
        assert_ne!(last.nonce, delivered[0].nonce, "a replay is a new delivery: new nonce");
    }
    let old: String = sqlx::query_scalar("SELECT status FROM movement_callback_outbox WHERE id = $1")
        .bind(first)
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(old, "dlq", "the dead letter stays");
    let (s, _) = api.call("POST", &format!("/v3/callbacks/{replay_id}/actions/replay"), &keys.operator, None).await?;
    assert_eq!(s, 409, "only dlq rows replay");
    // A movement with its own secret is signed with it.
    let body = json!({"template_key": "t.cb", "intent": {"asset": "USDC", "amount": "2"}, "idempotency_key": "cb-own",
                      "callback_url": hook, "callback_secret": OWN_SECRET});
    let own = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
    assert!(own.get("callback_secret").is_none(), "the secret is never returned");
    let own_id = own["id"].as_str().unwrap().to_string();
    api.ok("POST", &format!("/v3/movements/{own_id}/approve"), &keys.approver, None, 200).await?;
    wait_until("own-secret deliveries", Duration::from_secs(30), || async {
        let seen = receiver.seen.lock().unwrap();
        Ok(seen.iter().any(|d| d.body["movement_id"] == own_id.as_str()))
    })
    .await?;
    {
        let seen = receiver.seen.lock().unwrap();
        assert!(seen.iter().filter(|d| d.body["movement_id"] == own_id.as_str()).all(|d| d.valid && d.own_secret));
        assert!(seen.iter().filter(|d| d.body["movement_id"] == id.as_str()).all(|d| !d.own_secret));
    }

    // The other events of the movement went through once the receiver was back.
    wait_until("all sent", Duration::from_secs(30), || async {
        let pending: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM movement_callback_outbox WHERE request_id = $1::uuid AND status = 'pending'",
        )
        .bind(&id)
        .fetch_one(&db.pool)
        .await?;
        Ok(pending == 0)
    })
    .await?;
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// Standard Webhooks beside v3: deliveries checked by the reference `standardwebhooks`
/// library (tests/py/webhook_receiver.py), not by qtg's code — under the deployment's secret,
/// through a rotation (old and new both verify while both sign; the old one no longer after),
/// under a movement's own `whsec_` secret; a retry keeps its `webhook-id` and signs its own
/// time; a v3 movement beside them keeps v3; bad choices are refused at creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standard_webhooks_verify_with_the_reference_library_through_a_rotation() -> anyhow::Result<()> {
    const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NEW: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const OWN: &str = "whsec_dGhpcy1pcy1hLW1vdmVtZW50cy1vd24ta2V5IQ==";
    let receiver = PyHelper::spawn(
        "webhook_receiver.py",
        &[format!("--secret=old={OLD}"), format!("--secret=new={NEW}"), format!("--secret=own={OWN}")],
    )
    .await?;
    let hook = format!("http://127.0.0.1:{}/hook", receiver.port);
    let db = TestDb::new().await?;
    let api =
        Api::start(&db.url, &[("MG_CALLBACK_ALLOW_PRIVATE", "true"), ("MG_CALLBACK_WEBHOOK_SECRETS", OLD)]).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.sw", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await?;
    let create = |idem: &str, extra: Value| {
        let mut body = json!({"template_key": "t.sw", "intent": {"asset": "USDC", "amount": "1"},
                              "idempotency_key": idem, "callback_url": hook,
                              "callback_signature": "standard_webhooks"});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            body[k] = v;
        }
        body
    };
    // Refused at creation, nothing created: an unknown scheme, a secret that is not whsec_.
    for (idem, extra) in [
        ("sw-bad-1", json!({"callback_signature": "v9"})),
        ("sw-bad-2", json!({"callback_secret": "not-a-standard-webhooks-secret"})),
        ("sw-bad-3", json!({"callback_secret": "whsec_c2hvcnQ="})),
    ] {
        let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(create(idem, extra))).await?;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{idem}: {b}");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM movement_requests").fetch_one(&db.pool).await?;
    assert_eq!(n, 0, "a refused creation creates nothing");

    let start = |idem: &'static str, extra: Value| {
        let (api, keys, body) = (&api, &keys, create(idem, extra));
        async move {
            let m = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
            let id = m["id"].as_str().context("id")?.to_string();
            api.ok("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, None, 200).await?;
            anyhow::Ok(id)
        }
    };
    let all_sent = |id: String| {
        let pool = db.pool.clone();
        async move {
            wait_until("every callback of the movement sent", Duration::from_secs(60), || async {
                let (pending, sent): (i64, i64) = sqlx::query_as(
                    "SELECT count(*) FILTER (WHERE status <> 'sent'), count(*) FILTER (WHERE status = 'sent')
                       FROM movement_callback_outbox WHERE request_id = $1::uuid",
                )
                .bind(&id)
                .fetch_one(&pool)
                .await?;
                Ok(pending == 0 && sent > 0)
            })
            .await
        }
    };
    let verified = |id: &str| -> Vec<Vec<String>> {
        receiver
            .lines()
            .into_iter()
            .filter(|l| {
                serde_json::from_str::<Value>(l["body"].as_str().unwrap_or_default())
                    .is_ok_and(|b| b["movement_id"] == id)
            })
            .map(|l| l["verified_by"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .collect()
    };
    let worker = |secrets: &'static str| {
        let url = db.url.clone();
        async move {
            let env = [
                ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
                ("MG_CALLBACK_SIGNATURE", "standard_webhooks"),
                ("MG_CALLBACK_WEBHOOK_SECRETS", secrets),
                ("MG_CALLBACK_SECRET", SECRET),
                ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.2"),
            ];
            Proc::spawn("qtg-callback", &url, &env).await
        }
    };

    // The deployment's secret.
    let mut w = worker(OLD).await?;
    let before = start("sw-1", json!({})).await?;
    let v3 = start("sw-v3", json!({"callback_signature": "v3"})).await?;
    let own = start("sw-own", json!({"callback_secret": OWN})).await?;
    for id in [&before, &v3, &own] {
        all_sent(id.clone()).await?;
    }
    assert!(verified(&before).iter().all(|v| v == &["old"]), "{:?}", verified(&before));
    assert!(verified(&own).iter().all(|v| v == &["own"]), "{:?}", verified(&own));
    assert!(verified(&v3).iter().all(Vec::is_empty), "a v3 movement is not signed as Standard Webhooks");
    let v3_lines: Vec<Value> =
        receiver.lines().into_iter().filter(|l| l["body"].as_str().unwrap().contains(&v3)).collect();
    assert!(v3_lines
        .iter()
        .all(|l| l["headers"]["x-qtg-callback-signature-version"] == "v3"
            && l["headers"].get("webhook-signature").is_none()));

    // The rotation: the new secret first, the old one still signing.
    w.signal("TERM");
    w.wait_exit(Duration::from_secs(10)).await?;
    let mut w = worker("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD,whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").await?;
    let during = start("sw-2", json!({})).await?;
    all_sent(during.clone()).await?;
    assert!(verified(&during).iter().all(|v| v == &["old", "new"]), "{:?}", verified(&during));
    // The rotation over: only the new one.
    w.signal("TERM");
    w.wait_exit(Duration::from_secs(10)).await?;
    let _w = worker("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").await?;
    let after = start("sw-3", json!({})).await?;
    all_sent(after.clone()).await?;
    assert!(verified(&after).iter().all(|v| v == &["new"]), "{:?}", verified(&after));

    // A failing receiver: each retry carries the event's id and a fresh, verifiable signature.
    let failing = start("sw-fail", json!({"callback_url": format!("http://127.0.0.1:{}/fail", receiver.port)})).await?;
    // Two attempts of one event reached the receiver (the test brings each retry forward).
    let twice = || {
        let mut ids: Vec<String> = receiver
            .lines()
            .into_iter()
            .filter(|l| l["path"] == "/fail")
            .map(|l| l["headers"]["webhook-id"].as_str().unwrap_or_default().to_string())
            .collect();
        ids.sort();
        ids.windows(2).any(|w| w[0] == w[1])
    };
    wait_until("two attempts of one event at the receiver", Duration::from_secs(60), || async {
        sqlx::query(
            "UPDATE movement_callback_outbox SET next_attempt_at = now()
              WHERE request_id = $1::uuid AND status = 'pending' AND lease_expires_at IS NULL",
        )
        .bind(&failing)
        .execute(&db.pool)
        .await?;
        Ok(twice())
    })
    .await?;
    let tries: Vec<Value> = receiver.lines().into_iter().filter(|l| l["path"] == "/fail").collect();
    let event = |l: &Value| serde_json::from_str::<Value>(l["body"].as_str().unwrap()).unwrap()["event_id"].clone();
    let retried = tries.iter().map(event).find(|e| tries.iter().filter(|l| event(l) == *e).count() >= 2);
    let retried = retried.context("an event tried twice")?;
    let same: Vec<&Value> = tries.iter().filter(|l| event(l) == retried).collect();
    assert!(same.len() >= 2, "{tries:?}");
    assert!(same.iter().all(|l| l["headers"]["webhook-id"] == retried), "webhook-id is the event id");
    assert!(same.iter().all(|l| l["verified_by"] == json!(["new"])), "{same:?}");
    db.drop_db().await;
    Ok(())
}
