//! qtg-health against real executors: roster health (local, remote, orphaned), signer
//! identity posture, the approval gate refusing while a bound executor is down and
//! accepting once it is back, and the workers view.

use std::time::{Duration, Instant};

use qtg_tests::*;
use serde_json::{json, Value};

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn roster_until(
    api: &Api,
    key: &str,
    path: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = api.ok("GET", path, key, None, 200).await?;
        if pred(&v) {
            return Ok(v);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: {v:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn entry<'a>(roster: &'a Value, field: &str, key: &str) -> &'a Value {
    roster["items"].as_array().and_then(|i| i.iter().find(|e| e[field] == key)).unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_drives_the_roster_and_the_approval_gate() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let (grpc_port, http_port) = (free_port()?, free_port()?);
    let (grpc, http) = (format!("127.0.0.1:{grpc_port}"), format!("127.0.0.1:{http_port}"));
    let keys = std::env::temp_dir().join(format!("{}-health-keys.jsonl", db.name)).to_string_lossy().to_string();
    let example_env = [
        ("EXAMPLE_GRPC_ADDR", grpc.as_str()),
        ("EXAMPLE_HTTP_ADDR", http.as_str()),
        ("EXAMPLE_KEY_STORE", keys.as_str()),
    ];
    let mut example = Proc::spawn("qtg-remote-executor-example", "unused", &example_env).await?;
    example.wait_field("http_addr", Duration::from_secs(20)).await?;
    let registry = std::env::temp_dir().join(format!("{}-health.toml", db.name));
    std::fs::write(
        &registry,
        format!(
            "{}\n[executors.\"exec.ex.http\"]\ntransport = \"http\"\nendpoint = \"http://{http}\"\ntimeout_ms = 1000\n\
             [signers.\"signer.ex\"]\ntransport = \"http\"\nendpoint = \"http://{http}/signer\"\ntimeout_ms = 1000\n",
            std::fs::read_to_string(registry_file())?
        ),
    )?;
    let reg = registry.to_string_lossy().to_string();
    let env = [("MG_EXECUTOR_REGISTRY", reg.as_str()), ("MG_EXECUTOR_HEALTH_INTERVAL_SECONDS", "0.3")];
    let api = Api::start(&db.url, &env).await?;
    let keys = Keys::create(&api).await?;
    let viewer = api.key("auditor", "viewer").await?;
    // A row for an executor no registry knows any more.
    sqlx::query(
        "INSERT INTO executors (executor_key, transport, lane, health_state) VALUES ('exec.gone', 'local', \
         'other', 'up')",
    )
    .execute(&db.pool)
    .await?;
    let _health = Proc::spawn("qtg-health", &db.url, &env).await?;

    let roster = roster_until(&api, &viewer, "/v3/executors", "executors up", |r| {
        entry(r, "executor_key", "exec.ex.http")["health_state"] == "up"
            && entry(r, "executor_key", "exec.gone")["health_state"] == "orphan"
    })
    .await?;
    assert_eq!(entry(&roster, "executor_key", "exec.sim.transfer")["health_state"], "up");
    assert_eq!(entry(&roster, "executor_key", "exec.ex.http")["transport"], "http");

    // Identity posture: observed by qtg-health, expected only by an admin.
    let signers = roster_until(&api, &viewer, "/v3/signers", "signer observed", |r| {
        entry(r, "signer_key", "signer.ex")["observed_signer_address"].is_string()
    })
    .await?;
    let observed = entry(&signers, "signer_key", "signer.ex")["observed_signer_address"].as_str().unwrap().to_string();
    assert!(observed.starts_with("0x") && observed.len() == 42 && observed == observed.to_lowercase());
    assert_eq!(entry(&signers, "signer_key", "signer.ex")["identity_posture"], "unverified");
    let path = "/v3/signers/signer.ex/expected-identity";
    assert_eq!(api.call("PUT", path, &viewer, Some(json!({"address": observed}))).await?.0, 403);
    assert_eq!(
        api.call("PUT", path, &api.admin_key, Some(json!({"address": "0x0000000000000000000000000000000000000000"})))
            .await?
            .0,
        400
    );
    assert_eq!(
        api.call(
            "PUT",
            "/v3/signers/signer.nope/expected-identity",
            &api.admin_key,
            Some(json!({"address": observed}))
        )
        .await?
        .0,
        404
    );
    let wrong = api
        .ok("PUT", path, &api.admin_key, Some(json!({"address": "0x1111111111111111111111111111111111111111"})), 200)
        .await?;
    assert_eq!(wrong["identity_posture"], "mismatch");
    let right = api
        .ok("PUT", path, &api.admin_key, Some(json!({"address": observed.to_uppercase().replace("0X", "0x")})), 200)
        .await?;
    assert_eq!(right["identity_posture"], "match");

    // The approval gate.
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.gate", "nodes": [
        {"node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.ex.http"}]}),
    )
    .await?;
    let m = api
        .ok(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(
                json!({"template_key": "t.gate", "intent": {"asset": "USDC", "amount": "5"}, "idempotency_key": "g-1"}),
            ),
            201,
        )
        .await?;
    let id = m["id"].as_str().unwrap().to_string();
    example.signal("KILL");
    example.wait_exit(Duration::from_secs(10)).await?;
    roster_until(&api, &viewer, "/v3/executors", "executor down", |r| {
        entry(r, "executor_key", "exec.ex.http")["health_state"] == "down"
    })
    .await?;
    let (s, b) = api.call("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("EXECUTOR_DOWN")), "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("exec.ex.http"), "names the binding: {b}");
    let restarted = Proc::spawn("qtg-remote-executor-example", "unused", &example_env).await?;
    restarted.wait_field("http_addr", Duration::from_secs(20)).await?;
    roster_until(&api, &viewer, "/v3/executors", "executor up again", |r| {
        entry(r, "executor_key", "exec.ex.http")["health_state"] == "up"
    })
    .await?;
    let approved = api.ok("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, None, 200).await?;
    assert_eq!(approved["request_state"], "APPROVED");

    let workers = api.ok("GET", "/v3/workers", &viewer, None, 200).await?;
    let beat = entry(&workers, "worker", "executor_health");
    assert_eq!(beat["stale"], false, "{workers:#}");
    assert!(beat["age_seconds"].as_f64().unwrap() < 60.0);

    drop((api, restarted));
    let _ = std::fs::remove_file(&registry);
    db.drop_db().await;
    Ok(())
}

/// The strict gate (every process's default) fails closed: an approval needs each bound
/// executor up and checked within three health intervals — never checked or stale refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_gate_fails_closed_on_unknown_and_stale_health() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let strict = [("MG_APPROVAL_HEALTH_GATE", "strict"), ("MG_EXECUTOR_HEALTH_INTERVAL_SECONDS", "1")];
    let api = Api::start(&db.url, &strict).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.gate", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await?;
    let create = |idem: &str| {
        json!({
            "template_key": "t.gate", "intent": {"asset": "USDC", "amount": "1"}, "idempotency_key": idem
        })
    };
    let m = api.ok("POST", "/v3/movements", &keys.requester, Some(create("g-1")), 201).await?;
    let id = m["id"].as_str().unwrap().to_string();
    let approve = format!("/v3/movements/{id}/approve");

    // No health worker has run: nothing vouches for the executor.
    let (s, b) = api.call("POST", &approve, &keys.approver, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("EXECUTOR_HEALTH_UNKNOWN")), "{b}");
    assert!(b["error"]["message"].as_str().unwrap_or("").contains("exec.sim.transfer"), "{b}");
    assert_eq!(request_state(&db.pool, id.parse()?).await?, "PENDING_APPROVAL", "a refused approval changes nothing");

    // Once qtg-health has checked it, the approval goes through.
    let mut health = Proc::spawn("qtg-health", &db.url, &strict).await?;
    let fresh = "SELECT bool_and(health_state = 'up' AND last_health_checked_at > now() - interval '2 seconds')
                 FROM executors WHERE executor_key = 'exec.sim.transfer' AND $1 IS NOT NULL";
    wait_db(&db.pool, fresh, id.parse()?, Duration::from_secs(20)).await?;
    api.ok("POST", &approve, &keys.approver, None, 200).await?;
    // No dispatcher runs: the approved node waits READY, and /metrics says for how long.
    let admin = api.proc.wait_field("admin_addr", Duration::from_secs(10)).await?;
    let waiting = "qtg_oldest_ready_node_age_seconds{executor_key=\"exec.sim.transfer\"}";
    let metrics = http_client().get(format!("http://{admin}/metrics")).send().await?.text().await?;
    assert!(metrics.contains(waiting), "{metrics}");

    // The health worker stops: after three intervals its last check no longer vouches.
    health.signal("KILL");
    health.wait_exit(Duration::from_secs(10)).await?;
    let m = api.ok("POST", "/v3/movements", &keys.requester, Some(create("g-2")), 201).await?;
    let id2 = m["id"].as_str().unwrap().to_string();
    let stale = "SELECT bool_and(last_health_checked_at < now() - interval '3.2 seconds')
                 FROM executors WHERE executor_key = 'exec.sim.transfer' AND $1 IS NOT NULL";
    wait_db(&db.pool, stale, id2.parse()?, Duration::from_secs(20)).await?;
    let (s, b) = api.call("POST", &format!("/v3/movements/{id2}/approve"), &keys.approver, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("EXECUTOR_HEALTH_STALE")), "{b}");
    db.drop_db().await;
    Ok(())
}
