//! Remote executors through the whole system: the example executor (built on the SDK) serves
//! one node over gRPC and one over HTTP JSON for separately started workers; its failures map
//! to the protocol's semantics.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

/// qtg-api, a dispatcher, an observer and recovery, all reading the example's registry.
async fn start_system(db: &TestDb, remote: &Remote) -> anyhow::Result<(Api, Vec<Proc>)> {
    let reg = remote.registry.to_string_lossy().to_string();
    let env = [
        ("MG_EXECUTOR_REGISTRY", reg.as_str()),
        ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "3"),
        ("MG_EXECUTOR_TIMEOUT_MS", "1500"),
        ("QTG_EXAMPLE_SECRET", EXAMPLE_HMAC_SECRET),
    ];
    let api = Api::start(&db.url, &env).await?;
    let mut workers = Vec::new();
    for bin in ["qtg-dispatcher", "qtg-observer", "qtg-recovery"] {
        workers.push(Proc::spawn(bin, &db.url, &env).await?);
    }
    Ok((api, workers))
}

fn remote_node(key: &str, executor: &str, example: Value) -> Value {
    json!({
        "node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": executor,
        "config": {"example": example}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remote_nodes_over_grpc_and_http_complete_and_fail_by_the_contract() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let remote = start_example(&db, 1000, &[]).await?;
    let (api, mut workers) = start_system(&db, &remote).await?;
    let keys = Keys::create(&api).await?;

    // One node over gRPC, its successor over HTTP JSON, with observation polls on both.
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.remote",
            "nodes": [
                remote_node("g", "exec.ex.grpc", json!({"observe_polls": 2})),
                remote_node("h", "exec.ex.http", json!({"observe_polls": 2}))
            ],
            "edges": [{"from": "g", "to": "h"}],
        }),
    )
    .await?;
    // Submit slower than the 1 s deadline: UNKNOWN, then recovery finds the order.
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.slow", "nodes": [remote_node("s", "exec.ex.grpc", json!({"submit_delay_ms": 2500}))]
        }),
    )
    .await?;
    // Observe answers garbage: no state change, a protocol_error event, the worker lives on.
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.garbage", "nodes": [remote_node("x", "exec.ex.http", json!({"garbage": "observe"}))]
        }),
    )
    .await?;
    // Prepare answers a payload whose hash is wrong: FAILED, nothing was sent.
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.badhash", "nodes": [remote_node("p", "exec.ex.grpc", json!({"garbage": "prepare"}))]
        }),
    )
    .await?;
    // Submit answers garbage: UNKNOWN (the venue may have it), then recovery finds the order.
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.badsubmit", "nodes": [remote_node("b", "exec.ex.http", json!({"garbage": "submit"}))]
        }),
    )
    .await?;
    // Signing through remote signers on both transports.
    let signed = |key: &str, signer: &str| {
        let mut n = remote_node(key, "exec.ex.http", json!({}));
        n["signing_required"] = json!(true);
        n["signer_key"] = json!(signer);
        n
    };
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.signed", "nodes": [signed("sg", "signer.ex.grpc"), signed("sh", "signer.ex.http")],
        "edges": [{"from": "sg", "to": "sh"}]}),
    )
    .await?;
    // Preflight refuses: FAILED before anything is sent.
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.refuse", "nodes": [remote_node("r", "exec.ex.http", json!({"preflight": "fail"}))]}),
    )
    .await?;

    let ok = start_movement(&api, &keys, "t.remote", "r-1", None).await?;
    let slow = start_movement(&api, &keys, "t.slow", "r-2", None).await?;
    let garbage = start_movement(&api, &keys, "t.garbage", "r-3", None).await?;
    let refuse = start_movement(&api, &keys, "t.refuse", "r-4", None).await?;
    let badhash = start_movement(&api, &keys, "t.badhash", "r-6", None).await?;
    let badsubmit = start_movement(&api, &keys, "t.badsubmit", "r-7", None).await?;
    let signed_id = start_movement(&api, &keys, "t.signed", "r-8", None).await?;
    let t = Duration::from_secs(60);
    let r = &keys.requester;

    let m = wait_state(&api, r, &ok, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], t).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    for k in ["g", "h"] {
        let n = node(&m, k);
        assert!(n["provider_ref_id"].as_str().unwrap().starts_with("ex-"), "{n}");
        assert!(n["provider_refs"]["example_txid"].is_string(), "{n}");
    }

    let m = wait_state(&api, r, &slow, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], t).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let path: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT e.to_state, e.error_code FROM node_events e WHERE e.request_id = $1::uuid AND e.kind = \
         'transition' ORDER BY e.id",
    )
    .bind(&slow)
    .fetch_all(&db.pool)
    .await?;
    let states: Vec<&str> = path.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(states, ["READY", "PREPARING", "SUBMITTING", "UNKNOWN", "SUBMITTED", "COMPLETED"], "{path:?}");
    assert_eq!(path[3].1.as_deref(), Some("EXECUTOR_TIMEOUT"), "a submit past its deadline is UNKNOWN, never FAILED");

    let m = wait_state(&api, r, &refuse, &["FAILED", "COMPLETED"], t).await?;
    assert_eq!(node(&m, "r")["error_code"], "EXAMPLE_PREFLIGHT_REFUSED");

    let m = wait_state(&api, r, &badhash, &["FAILED", "COMPLETED"], t).await?;
    assert_eq!(node(&m, "p")["error_code"], "EXECUTOR_PROTOCOL_ERROR", "{m:#}");
    assert_eq!(node(&m, "p")["attempt_no"], 0, "nothing was submitted");

    let m = wait_state(&api, r, &badsubmit, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], t).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");
    let unknown_code: Option<String> = sqlx::query_scalar(
        "SELECT error_code FROM node_events WHERE request_id = $1::uuid AND kind = 'transition' AND \
         to_state = 'UNKNOWN'",
    )
    .bind(&badsubmit)
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(unknown_code.as_deref(), Some("EXECUTOR_PROTOCOL_ERROR"), "a garbled submit answer is UNKNOWN");

    let m = wait_state(&api, r, &signed_id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], t).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}");

    // At the venue: every submit call the executor received, and at most one execution per node
    // across all of its keys (the slow and garbled submits were recovered, not re-submitted).
    let mut calls: std::collections::HashMap<String, (u32, u32)> = Default::default();
    for line in remote.proc.log().lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        if v["message"] == "submit call" {
            let key = v["idempotency_key"].as_str().unwrap_or_default();
            let node = key.rsplit_once(':').map(|(n, _)| n.to_string()).unwrap_or_default();
            let e = calls.entry(node).or_default();
            e.0 += 1;
            e.1 += u32::from(v["executed"] == true);
        }
    }
    assert!(!calls.is_empty(), "the example logged its submit calls");
    for (node, (n, executed)) in &calls {
        assert_eq!((*n, *executed), (1, 1), "node {node}: {n} submit call(s), {executed} execution(s)");
    }
    let addresses: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT payload->>'signer_address' FROM artifacts WHERE request_id = $1::uuid AND kind = 'sign_result' \
         ORDER BY created_at",
    )
    .bind(&signed_id)
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(addresses.len(), 2, "one signature per node");
    assert!(
        addresses.iter().all(|a| a.as_deref().is_some_and(|a| a.starts_with("0x") && a.len() == 42)),
        "{addresses:?}"
    );

    // The garbage observer: the node stays SUBMITTED and every observe is a protocol error.
    let deadline = std::time::Instant::now() + t;
    loop {
        let errors: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM node_events WHERE request_id = $1::uuid AND method = 'observe' AND outcome = \
             'protocol_error'",
        )
        .bind(&garbage)
        .fetch_one(&db.pool)
        .await?;
        if errors >= 1 {
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "no protocol_error recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = api.ok("GET", &format!("/v3/movements/{garbage}"), r, None, 200).await?;
    assert_eq!(node(&m, "x")["node_state"], "SUBMITTED", "a malformed observe answer changes no state");
    assert_eq!(m["request_state"], "EXECUTING");

    // The remote executor goes away mid-movement: a node it is observing stays OBSERVING
    // (transport errors, no state change), and a new movement fails at preflight with
    // EXECUTOR_UNAVAILABLE.
    install_template(
        &api,
        &keys,
        json!({
            "template_key": "t.long", "nodes": [remote_node("l", "exec.ex.http", json!({"observe_polls": 100000}))]
        }),
    )
    .await?;
    let long = start_movement(&api, &keys, "t.long", "r-9", None).await?;
    let deadline = std::time::Instant::now() + t;
    loop {
        let m = api.ok("GET", &format!("/v3/movements/{long}"), r, None, 200).await?;
        if node(&m, "l")["node_state"] == "OBSERVING" {
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "never OBSERVING: {m:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut example = remote.proc;
    example.signal("KILL");
    example.wait_exit(Duration::from_secs(10)).await?;
    let deadline = std::time::Instant::now() + t;
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM node_events WHERE request_id = $1::uuid AND method = 'observe' AND outcome = \
             'transport_error'",
        )
        .bind(&long)
        .fetch_one(&db.pool)
        .await?;
        if n > 0 {
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "no observe transport_error after the executor died");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = api.ok("GET", &format!("/v3/movements/{long}"), r, None, 200).await?;
    assert_eq!(node(&m, "l")["node_state"], "OBSERVING", "an unreachable executor changes no state");
    assert_eq!(m["request_state"], "EXECUTING");
    let gone = start_movement(&api, &keys, "t.refuse", "r-5", None).await?;
    let m = wait_state(&api, r, &gone, &["FAILED", "COMPLETED"], t).await?;
    assert_eq!(node(&m, "r")["error_code"], "EXECUTOR_UNAVAILABLE", "{m:#}");

    for w in &mut workers {
        w.signal("TERM");
        assert_eq!(w.wait_exit(Duration::from_secs(20)).await?, Some(0), "{}", w.log());
    }
    drop(api);
    let _ = std::fs::remove_file(&remote.registry);
    db.drop_db().await;
    Ok(())
}

fn target(addr: &str, transport: qtg_conformance::Transport) -> qtg_conformance::Target {
    qtg_conformance::Target {
        endpoint: format!("http://{addr}"),
        transport,
        executor_key: "exec.ex.conformance".into(),
        auth: qtg_wire_auth::Credentials::None,
        timeout: Duration::from_secs(5),
        tls: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_passes_conformance_on_both_transports_and_a_broken_one_fails() -> anyhow::Result<()> {
    use qtg_conformance::{run, Transport};
    let keys = std::env::temp_dir().join(format!("qtg-conformance-keys-{}.jsonl", uuid::Uuid::new_v4()));
    let keys = keys.to_string_lossy().to_string();
    let env = [
        ("EXAMPLE_GRPC_ADDR", "127.0.0.1:0"),
        ("EXAMPLE_HTTP_ADDR", "127.0.0.1:0"),
        ("EXAMPLE_KEY_STORE", keys.as_str()),
    ];
    let good = Proc::spawn("qtg-remote-executor-example", "unused", &env).await?;
    let grpc = good.wait_field("grpc_addr", Duration::from_secs(20)).await?;
    let http = good.wait_field("http_addr", Duration::from_secs(20)).await?;
    for (addr, transport) in [(&grpc, Transport::Grpc), (&http, Transport::Http)] {
        let report = run(&target(addr, transport)).await;
        assert!(report.passed(), "{transport:?}:\n{}", report.table());
    }
    // The binary: exit 0 and a table.
    let out = std::process::Command::new(bin_dir().join("qtg-executor-conformance"))
        .args(["--endpoint", &format!("http://{grpc}"), "--transport", "grpc"])
        .output()?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}");
    assert!(table.contains("13 of 13 checks passed"), "{table}");

    let broken_keys = format!("{keys}.broken");
    let broken_env = [env[0], env[1], ("EXAMPLE_BROKEN", "double-submit"), ("EXAMPLE_KEY_STORE", broken_keys.as_str())];
    let broken = Proc::spawn("qtg-remote-executor-example", "unused", &broken_env).await?;
    let http = broken.wait_field("http_addr", Duration::from_secs(20)).await?;
    let report = run(&target(&http, Transport::Http)).await;
    assert!(!report.passed());
    let line = report.checks.iter().find(|c| c.name == "repeated submit, same key").expect("check ran");
    assert!(!line.passed && line.detail.contains("executed again"), "{}", report.table());
    let out = std::process::Command::new(bin_dir().join("qtg-executor-conformance"))
        .args(["--endpoint", &format!("http://{http}"), "--transport", "http"])
        .output()?;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL    repeated submit, same key"));

    // An executor that answers FAILED for a key it executed, replayed late, fails the suite.
    let late_keys = format!("{keys}.late");
    let late_env = [env[0], env[1], ("EXAMPLE_BROKEN", "late-replay"), ("EXAMPLE_KEY_STORE", late_keys.as_str())];
    let late = Proc::spawn("qtg-remote-executor-example", "unused", &late_env).await?;
    let grpc = late.wait_field("grpc_addr", Duration::from_secs(20)).await?;
    let report = run(&target(&grpc, Transport::Grpc)).await;
    let line = report.checks.iter().find(|c| c.name == "executed key keeps outcome").expect("check ran");
    assert!(!line.passed && line.detail.contains("answered FAILED"), "{}", report.table());

    // Bearer-protected: refused without the token, conformant with it.
    let token_keys = format!("{keys}.token");
    let token_env =
        [env[0], env[1], ("EXAMPLE_BEARER_TOKEN", "s3cret-token"), ("EXAMPLE_KEY_STORE", token_keys.as_str())];
    let guarded = Proc::spawn("qtg-remote-executor-example", "unused", &token_env).await?;
    let grpc = guarded.wait_field("grpc_addr", Duration::from_secs(20)).await?;
    let mut t = target(&grpc, Transport::Grpc);
    let report = run(&t).await;
    assert!(!report.passed(), "no token must be refused:\n{}", report.table());
    assert!(report.table().contains("Unauthenticated"), "{}", report.table());
    t.auth = qtg_wire_auth::Credentials::Bearer("s3cret-token".into());
    let report = run(&t).await;
    assert!(report.passed(), "{}", report.table());
    assert!(report.checks.iter().any(|c| c.name == "auth: unsigned refused" && c.passed), "{}", report.table());

    // HMAC-protected: the suite also checks that a replayed and a re-targeted request are
    // refused, on both transports, and the binary takes --hmac-env.
    let hmac_keys = format!("{keys}.hmac");
    let hmac_env =
        [env[0], env[1], ("EXAMPLE_HMAC_SECRET", EXAMPLE_HMAC_SECRET), ("EXAMPLE_KEY_STORE", hmac_keys.as_str())];
    let signed = Proc::spawn("qtg-remote-executor-example", "unused", &hmac_env).await?;
    let grpc = signed.wait_field("grpc_addr", Duration::from_secs(20)).await?;
    let http = signed.wait_field("http_addr", Duration::from_secs(20)).await?;
    for (addr, transport) in [(&grpc, Transport::Grpc), (&http, Transport::Http)] {
        let mut t = target(addr, transport);
        t.auth = qtg_wire_auth::Credentials::Hmac(EXAMPLE_HMAC_SECRET.as_bytes().to_vec());
        let report = run(&t).await;
        assert!(report.passed(), "{transport:?}:\n{}", report.table());
        for check in ["auth: unsigned refused", "auth: replay refused", "auth: re-target refused"] {
            assert!(report.checks.iter().any(|c| c.name == check && c.passed), "{check}:\n{}", report.table());
        }
    }
    let out = std::process::Command::new(bin_dir().join("qtg-executor-conformance"))
        .args(["--endpoint", &format!("http://{http}"), "--transport", "http", "--hmac-env", "CONFORMANCE_HMAC"])
        .env("CONFORMANCE_HMAC", EXAMPLE_HMAC_SECRET)
        .output()?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}");
    assert!(table.contains("16 of 16 checks passed"), "{table}");
    drop((good, broken, guarded, signed));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_calls_run_over_tls_verified_by_a_ca_file() -> anyhow::Result<()> {
    use qtg_conformance::{run, Transport};
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    let dir = std::env::temp_dir().join(format!("qtg-tls-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem())?;
    std::fs::write(&key_path, cert.signing_key.serialize_pem())?;
    let (c, k) = (cert_path.to_string_lossy().to_string(), key_path.to_string_lossy().to_string());
    let keys = dir.join("keys.jsonl").to_string_lossy().to_string();
    let env = [
        ("EXAMPLE_GRPC_ADDR", "127.0.0.1:0"),
        ("EXAMPLE_HTTP_ADDR", "127.0.0.1:0"),
        ("EXAMPLE_TLS_CERT", c.as_str()),
        ("EXAMPLE_TLS_KEY", k.as_str()),
        ("EXAMPLE_KEY_STORE", keys.as_str()),
    ];
    let example = Proc::spawn("qtg-remote-executor-example", "unused", &env).await?;
    let grpc = example.wait_field("grpc_addr", Duration::from_secs(20)).await?;
    let http = example.wait_field("http_addr", Duration::from_secs(20)).await?;
    let tls = qtg_executor::remote::TlsClient { ca_pem: cert.cert.pem().into_bytes(), domain: None };
    for (addr, transport) in [(&grpc, Transport::Grpc), (&http, Transport::Http)] {
        let mut t = target(addr, transport);
        t.endpoint = format!("https://{addr}");
        t.tls = Some(tls.clone());
        let report = run(&t).await;
        assert!(report.passed(), "{transport:?} over TLS:\n{}", report.table());
        // Another CA's view of the same server: refused, never "passed".
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
        t.tls = Some(qtg_executor::remote::TlsClient { ca_pem: other.cert.pem().into_bytes(), domain: None });
        assert!(!run(&t).await.passed(), "{transport:?}: a certificate from an unknown CA must be refused");
    }
    drop(example);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Waits until movement `id` has a node event with `method` and `outcome`.
async fn wait_event(db: &TestDb, id: &str, method: &str, outcome: &str) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM node_events WHERE request_id = $1::uuid AND method = $2 AND outcome = $3",
        )
        .bind(id)
        .bind(method)
        .bind(outcome)
        .fetch_one(&db.pool)
        .await?;
        if n > 0 {
            return Ok(());
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "no {method} {outcome} event for {id}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_remote_failure_has_its_protocol_semantics() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let remote = start_example(&db, 1000, &[]).await?;
    let (api, _workers) = start_system(&db, &remote).await?;
    let keys = Keys::create(&api).await?;
    let cases = [
        ("t.prepare503", remote_node("n", "exec.ex.http", json!({"fail": ["prepare"]}))),
        ("t.preflightslow", remote_node("n", "exec.ex.grpc", json!({"slow": {"preflight": 2000}}))),
        ("t.observe503", remote_node("n", "exec.ex.http", json!({"fail": ["observe"]}))),
        ("t.oversize", remote_node("n", "exec.ex.http", json!({"oversize": "observe"}))),
        ("t.recover503", remote_node("n", "exec.ex.http", json!({"garbage": "submit", "fail": ["recover"]}))),
    ];
    let mut ids = std::collections::HashMap::new();
    for (template, n) in cases {
        install_template(&api, &keys, json!({"template_key": template, "nodes": [n]})).await?;
        ids.insert(template, start_movement(&api, &keys, template, template, None).await?);
    }
    let r = &keys.requester;
    let t = Duration::from_secs(30);

    // Before submit nothing left qtg: an outage or a deadline is a plain, retryable FAILED.
    for template in ["t.prepare503", "t.preflightslow"] {
        let m = wait_state(&api, r, &ids[template], &["FAILED", "COMPLETED"], t).await?;
        assert_eq!(node(&m, "n")["error_code"], "EXECUTOR_UNAVAILABLE", "{template}: {m:#}");
        assert_eq!(node(&m, "n")["attempt_no"], 0, "{template}: never reached submit");
    }

    // Observe outage: the node stays as it is and backs off.
    let id = &ids["t.observe503"];
    wait_event(&db, id, "observe", "transport_error").await?;
    let m = api.ok("GET", &format!("/v3/movements/{id}"), r, None, 200).await?;
    assert_eq!(node(&m, "n")["node_state"], "SUBMITTED");
    let backoff: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM next_observe_at - now())::float8 FROM movement_request_nodes WHERE \
         request_id = $1::uuid",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await?;
    assert!(backoff > 5.0, "next observation is pushed back, got {backoff:.1}s");

    // An answer over the size limit is a protocol error, not a state.
    let id = &ids["t.oversize"];
    wait_event(&db, id, "observe", "protocol_error").await?;
    let m = api.ok("GET", &format!("/v3/movements/{id}"), r, None, 200).await?;
    assert_eq!(node(&m, "n")["node_state"], "SUBMITTED");

    // Recover outage: the node stays UNKNOWN with its marker; the movement keeps EXECUTING.
    let id = &ids["t.recover503"];
    wait_event(&db, id, "recover", "transport_error").await?;
    let m = api.ok("GET", &format!("/v3/movements/{id}"), r, None, 200).await?;
    assert_eq!(node(&m, "n")["node_state"], "UNKNOWN");
    assert_eq!(node(&m, "n")["provider_refs"]["__submit_attempt_pending"], true);
    assert_eq!(m["request_state"], "EXECUTING");

    // Diagnosis: past its grace with the marker, recovery unable to decide → C2.
    let d = api.ok("GET", &format!("/v3/movements/{id}/nodes/n/diagnosis"), &keys.operator, None, 200).await?;
    assert_eq!(d["case"], "C2", "{d:#}");
    assert_eq!(d["automatic_resolution"], false);
    assert_eq!(d["evidence"]["markers"]["__submit_attempt_pending"], true);
    assert!(!d["evidence"]["recent_events"].as_array().unwrap().is_empty());
    assert_eq!(api.call("GET", &format!("/v3/movements/{id}/nodes/n/diagnosis"), &keys.requester, None).await?.0, 403);
    assert_eq!(api.call("GET", &format!("/v3/movements/{id}/nodes/zz/diagnosis"), &keys.operator, None).await?.0, 404);
    let observing = &ids["t.observe503"];
    let d = api.ok("GET", &format!("/v3/movements/{observing}/nodes/n/diagnosis"), &keys.operator, None, 200).await?;
    assert_eq!(d["case"], "C7", "{d:#}");

    // Operators cannot retry or plainly cancel it: only recovery (or C6 evidence) decides.
    let (s, b) = api
        .call(
            "POST",
            &format!("/v3/movements/{id}/nodes/n/actions/retry"),
            &keys.operator,
            Some(json!({"reason": "again"})),
        )
        .await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("SUBMIT_ATTEMPT_PENDING")), "{b}");
    let (s, b) = api
        .call("POST", &format!("/v3/movements/{id}/actions/cancel"), &keys.operator, Some(json!({"reason": "stop"})))
        .await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("CONFLICT")), "{b}");
    let (s, _) = api
        .call("POST", &format!("/v3/movements/{id}/actions/cancel"), &keys.requester, Some(json!({"reason": "stop"})))
        .await?;
    assert_eq!(s, 403, "cancel is an operator action");
    let (s, b) = api
        .call("POST", &format!("/v3/movements/{id}/actions/cancel"), &keys.operator, Some(json!({"reason": ""})))
        .await?;
    assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")));

    drop(api);
    let _ = std::fs::remove_file(&remote.registry);
    db.drop_db().await;
    Ok(())
}

/// A signed executor request cannot be replayed nor re-targeted to another operation: the
/// v4 signature covers the operation and the SDK refuses a nonce it has seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_requests_cannot_be_replayed_or_retargeted() -> anyhow::Result<()> {
    use qtg_wire_auth::{target, Credentials, EXECUTOR_SERVICE};
    let db = TestDb::new().await?;
    let remote = start_example(&db, 2000, &[]).await?;
    let http = remote.proc.wait_field("http_addr", Duration::from_secs(20)).await?;
    let client = http_client();
    let body = br#"{"executorKey":"exec.ex.http"}"#.to_vec();
    let send = |op: &'static str, headers: Vec<(&'static str, String)>| {
        let mut req = client.post(format!("http://{http}/{op}")).header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.body(body.clone()).send()
    };
    let creds = Credentials::Hmac(EXAMPLE_HMAC_SECRET.as_bytes().to_vec());
    let signed = creds.headers(&target(EXECUTOR_SERVICE, "preflight"), &body);
    // Authenticated (the body itself is then refused as incomplete, not as unauthorized).
    let first = send("preflight", signed.clone()).await?;
    assert_ne!(first.status().as_u16(), 401, "{:?}", first.text().await?);
    // The same request again: a replay.
    let again = send("preflight", signed).await?;
    assert_eq!(again.status().as_u16(), 401);
    assert!(again.text().await?.contains("replayed"));
    // Signed for preflight, sent to submit: refused.
    let retargeted = send("submit", creds.headers(&target(EXECUTOR_SERVICE, "preflight"), &body)).await?;
    assert_eq!(retargeted.status().as_u16(), 401);
    // An old v3 signature (no operation in it) is refused too.
    let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs().to_string();
    let v3 = qtg_wire_auth::signature_headers(EXAMPLE_HMAC_SECRET.as_bytes(), &ts, "v3-nonce", &body);
    assert_eq!(send("preflight", v3).await?.status().as_u16(), 401);
    db.drop_db().await;
    Ok(())
}
