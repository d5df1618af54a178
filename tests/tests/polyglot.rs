//! An executor in another language: `tests/py/grpc_executor.py`, written from `proto/` and
//! `docs/executors.md` alone, its stubs generated from `proto/` at test time, checks qtg's v4
//! HMAC over gRPC (RFC 8785 canonical JSON computed by an independent library) on every call.
//! A node config full of awkward numbers (`0.00001`, `1e21`, `2.0`, `-0.0`) and non-ASCII keys
//! must not break the signature, and a movement through it completes. The same executor, with
//! its fence's key store in a temp file (`PY_EXECUTOR_KEY_STORE`), then passes the conformance
//! suite over gRPC with its HMAC secret — the fence and auth checks included — so the guide is
//! also tested by code that is not Rust.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use qtg_tests::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_grpc_executor_verifies_qtgs_signature_and_completes_a_movement() -> anyhow::Result<()> {
    let venv = tokio::process::Command::new(repo().join("scripts/ensure-test-venv.sh")).output().await?;
    anyhow::ensure!(venv.status.success(), "{}", String::from_utf8_lossy(&venv.stderr));
    let python = String::from_utf8(venv.stdout)?.trim().to_string();
    let db = TestDb::new().await?;
    let stubs = std::env::temp_dir().join(format!("{}-py-stubs", db.name));
    std::fs::create_dir_all(&stubs)?;
    let key_store = std::env::temp_dir().join(format!("{}-py-keys.jsonl", db.name));
    let secret = "polyglot-hmac-secret-0001";
    let mut py = tokio::process::Command::new(&python)
        .arg(repo().join("tests/py/grpc_executor.py"))
        .args(["--proto-dir", &repo().join("proto").to_string_lossy(), "--out", &stubs.to_string_lossy()])
        .args(["--secret-env", "PY_EXECUTOR_SECRET"])
        .env("PY_EXECUTOR_SECRET", secret)
        .env("PY_EXECUTOR_KEY_STORE", &key_store)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdout = BufReader::new(py.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), stdout.next_line()).await??.unwrap_or_default();
    let port = line.strip_prefix("LISTENING ").ok_or_else(|| anyhow::anyhow!("python executor said {line:?}"))?;
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = log.clone();
    let mut stderr = BufReader::new(py.stderr.take().expect("stderr")).lines();
    tokio::spawn(async move {
        while let Ok(Some(l)) = stderr.next_line().await {
            sink.lock().expect("log").push(l);
        }
    });

    let sim = std::fs::read_to_string(registry_file())?;
    let registry = std::env::temp_dir().join(format!("{}-polyglot.toml", db.name));
    std::fs::write(
        &registry,
        format!(
            "{sim}\n[executors.\"exec.py.transfer\"]\ntransport = \"grpc\"\nendpoint = \"http://127.0.0.1:{port}\"\n\
             timeout_ms = 1500\nauth = {{ hmac_env = \"QTG_PY_SECRET\" }}\n"
        ),
    )?;
    let registry_path = registry.to_string_lossy().to_string();
    let api = Api::all_in_one(
        &db.url,
        &[
            ("MG_EXECUTOR_REGISTRY", registry_path.as_str()),
            ("QTG_PY_SECRET", secret),
            ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2"),
            ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2"),
        ],
    )
    .await?;
    let keys = Keys::create(&api).await?;
    // (A line separator U+2028 no longer reaches an executor: qtg refuses it in what a person
    // reads, issue 26.)
    let config: serde_json::Value = serde_json::from_str(
        r#"{"fee": 0.00001, "big": 1e21, "whole": 2.0, "neg_zero": -0.0, "small": 1e-7, "e": 123456789012.345,
            "keys": {"é": 1, "e": 2, "E": 3, "😀": 4, "！": 5}, "text": "a \"quote\", a \\ and ü", "amount": "1000000000000000000"}"#,
    )?;
    install_template(&api, &keys, json!({"template_key": "t.py", "nodes": [
        {"node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.py.transfer", "config": config}]}))
    .await?;
    let id = start_movement(&api, &keys, "t.py", "py-1", None).await?;
    let m = wait_state(
        &api,
        &keys.requester,
        &id,
        &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"],
        Duration::from_secs(30),
    )
    .await?;
    let lines = log.lock().expect("log").join("\n");
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\npython executor:\n{lines}");
    assert_eq!(node(&m, "n")["provider_ref_id"], format!("py-{}:1", node(&m, "n")["id"].as_str().unwrap_or_default()));
    for method in ["Preflight", "Prepare", "Submit", "Observe"] {
        assert!(lines.contains(&format!("\"verified\": \"{method}\"")), "{method} not verified:\n{lines}");
    }
    assert!(!lines.contains("\"refused\""), "a signature did not match:\n{lines}");

    // After the movement: the suite's auth checks send requests that must not verify.
    let report = qtg_conformance::run(&qtg_conformance::Target {
        endpoint: format!("http://127.0.0.1:{port}"),
        transport: qtg_conformance::Transport::Grpc,
        executor_key: "exec.py.transfer".into(),
        auth: qtg_wire_auth::Credentials::Hmac(secret.as_bytes().to_vec()),
        timeout: Duration::from_secs(5),
        tls: None,
    })
    .await;
    let lines = log.lock().expect("log").join("\n");
    assert!(report.passed(), "{}\npython executor:\n{lines}", report.table());
    assert!(report.checks.iter().any(|c| c.name == "executed key keeps outcome" && c.passed), "{}", report.table());
    drop(py.stdin.take());
    let _ = py.kill().await;
    db.drop_db().await;
    Ok(())
}
