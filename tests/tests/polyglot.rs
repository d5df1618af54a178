//! An executor in another language: `tests/py/grpc_executor.py`, written from `proto/` and
//! `docs/executors.md` alone, its stubs generated from `proto/` at test time, checks qtg's v4
//! HMAC over gRPC (RFC 8785 canonical JSON computed by an independent library) on every call.
//! A node config full of awkward numbers (`0.00001`, `1e21`, `2.0`, `-0.0`) and non-ASCII keys
//! must not break the signature, and a movement through it completes. The same executor, with
//! its fence's key store in a temp file (`PY_EXECUTOR_KEY_STORE`), then passes the conformance
//! suite over gRPC with its HMAC secret — the fence and auth checks included — so the guide is
//! also tested by code that is not Rust.
//!
//! The same executor built on the previous release — its stubs generated from
//! `proto-released/`, verifying only the v3 signature (`PY_EXECUTOR_SIGNATURE=v3`), as the
//! released executors do — completes a movement against today's qtg when its registry entry
//! says `signature = "v3"` (docs/executors.md §5a), and qtg counts those calls in
//! `qtg_deprecated_signature_calls_total`; a v4-signed call, today's default, it refuses.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// `tests/py/grpc_executor.py`, running, with its stderr lines.
struct PyExecutor {
    child: tokio::process::Child,
    port: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl PyExecutor {
    /// Starts the executor with its stubs generated from `protos` (`proto` or
    /// `proto-released`), verifying `signature` (`v4` or `v3`) under `secret`, its key store
    /// in a temp file.
    async fn start(db: &TestDb, protos: &str, signature: &str, secret: &str) -> anyhow::Result<PyExecutor> {
        let python = test_python().await?;
        let stubs = std::env::temp_dir().join(format!("{}-py-stubs", db.name));
        std::fs::create_dir_all(&stubs)?;
        let key_store = std::env::temp_dir().join(format!("{}-py-keys.jsonl", db.name));
        let mut child = tokio::process::Command::new(&python)
            .arg(repo().join("tests/py/grpc_executor.py"))
            .args(["--proto-dir", &repo().join(protos).to_string_lossy(), "--out", &stubs.to_string_lossy()])
            .args(["--secret-env", "PY_EXECUTOR_SECRET"])
            .env("PY_EXECUTOR_SECRET", secret)
            .env("PY_EXECUTOR_KEY_STORE", &key_store)
            .env("PY_EXECUTOR_SIGNATURE", signature)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), stdout.next_line()).await??.unwrap_or_default();
        let port = line.strip_prefix("LISTENING ").ok_or_else(|| anyhow::anyhow!("python executor said {line:?}"))?;
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = lines.clone();
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
        tokio::spawn(async move {
            while let Ok(Some(l)) = stderr.next_line().await {
                sink.lock().expect("log").push(l);
            }
        });
        Ok(PyExecutor { child, port: port.to_string(), lines })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        self.lines.lock().expect("log").join("\n")
    }

    /// Asserts that every method a movement calls was verified, and no signature mismatched.
    fn assert_verified(&self) {
        let lines = self.log();
        for method in ["Preflight", "Prepare", "Submit", "Observe"] {
            assert!(lines.contains(&format!("\"verified\": \"{method}\"")), "{method} not verified:\n{lines}");
        }
        assert!(!lines.contains("\"refused\""), "a signature did not match:\n{lines}");
    }

    async fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill().await;
    }
}

/// The all-in-one `qtg` with the sim registry plus `exec.py.transfer` (gRPC, at `py`) whose
/// entry authenticates with `auth` (a TOML inline table naming `QTG_PY_SECRET`).
async fn qtg_with(db: &TestDb, py: &PyExecutor, auth: &str, secret: &str) -> anyhow::Result<Api> {
    let sim = std::fs::read_to_string(registry_file())?;
    let registry = std::env::temp_dir().join(format!("{}-polyglot.toml", db.name));
    std::fs::write(
        &registry,
        format!(
            "{sim}\n[executors.\"exec.py.transfer\"]\ntransport = \"grpc\"\nendpoint = \"{}\"\n\
             timeout_ms = 1500\nauth = {auth}\n",
            py.endpoint()
        ),
    )?;
    let registry_path = registry.to_string_lossy().to_string();
    Api::all_in_one(
        &db.url,
        &[
            ("MG_EXECUTOR_REGISTRY", registry_path.as_str()),
            ("QTG_PY_SECRET", secret),
            ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2"),
            ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2"),
        ],
    )
    .await
}

/// Runs a one-node movement through `exec.py.transfer` with node config `config` to a final
/// state, and returns it.
async fn movement_through_py(api: &Api, keys: &Keys, config: Value, idempotency_key: &str) -> anyhow::Result<Value> {
    install_template(
        api,
        keys,
        json!({"template_key": "t.py", "nodes": [
        {
            "node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.py.transfer",
            "config": config
        }]}),
    )
    .await?;
    let id = start_movement(api, keys, "t.py", idempotency_key, None).await?;
    wait_state(api, &keys.requester, &id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], Duration::from_secs(30))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_grpc_executor_verifies_qtgs_signature_and_completes_a_movement() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let secret = "polyglot-hmac-secret-0001";
    let py = PyExecutor::start(&db, "proto", "v4", secret).await?;
    let api = qtg_with(&db, &py, "{ hmac_env = \"QTG_PY_SECRET\" }", secret).await?;
    let keys = Keys::create(&api).await?;
    // (A line separator U+2028 no longer reaches an executor: qtg refuses it in what a person
    // reads, issue 26.)
    let config: Value = serde_json::from_str(
        r#"{"fee": 0.00001, "big": 1e21, "whole": 2.0, "neg_zero": -0.0, "small": 1e-7, "e": 123456789012.345,
            "keys": {"é": 1, "e": 2, "E": 3, "😀": 4, "！": 5}, "text": "a \"quote\", a \\ and ü",
            "amount": "1000000000000000000"}"#,
    )?;
    let m = movement_through_py(&api, &keys, config, "py-1").await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\npython executor:\n{}", py.log());
    assert_eq!(node(&m, "n")["provider_ref_id"], format!("py-{}:1", node(&m, "n")["id"].as_str().unwrap_or_default()));
    py.assert_verified();

    // After the movement: the suite's auth checks send requests that must not verify.
    let report = qtg_conformance::run(&qtg_conformance::Target {
        endpoint: py.endpoint(),
        transport: qtg_conformance::Transport::Grpc,
        executor_key: "exec.py.transfer".into(),
        auth: qtg_wire_auth::Credentials::Hmac(secret.as_bytes().to_vec()),
        timeout: Duration::from_secs(5),
        tls: None,
    })
    .await;
    assert!(report.passed(), "{}\npython executor:\n{}", report.table(), py.log());
    assert!(report.checks.iter().any(|c| c.name == "executed key keeps outcome" && c.passed), "{}", report.table());
    py.stop().await;
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_built_on_the_released_protos_completes_a_movement_signed_v3() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let secret = "polyglot-hmac-secret-v3-01";
    let py = PyExecutor::start(&db, "proto-released", "v3", secret).await?;
    let api = qtg_with(&db, &py, "{ hmac_env = \"QTG_PY_SECRET\", signature = \"v3\" }", secret).await?;
    let keys = Keys::create(&api).await?;
    let m = movement_through_py(&api, &keys, json!({"fee": 0.00001, "whole": 2.0}), "py-v3-1").await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m:#}\npython executor:\n{}", py.log());
    py.assert_verified();

    // The all-in-one qtg made the calls (its dispatcher and observer run in it), and counted them.
    let admin = api.proc.wait_field("admin_addr", Duration::from_secs(30)).await?;
    let metrics = http_client().get(format!("http://{admin}/metrics")).send().await?.text().await?;
    let submits =
        "qtg_deprecated_signature_calls_total{target=\"qtg.executor.v1.ExecutorService/Submit\",version=\"v3\"} ";
    let counted = metrics.lines().find_map(|l| l.strip_prefix(submits)).and_then(|v| v.trim().parse::<f64>().ok());
    assert!(counted.unwrap_or(0.0) > 0.0, "{metrics}");

    // A v4-signed call — what an entry without `signature = "v3"` sends — is refused, as the
    // released executors refuse any version but their own.
    let endpoint = qtg_executor::remote::Endpoint {
        url: py.endpoint(),
        timeout: Duration::from_secs(5),
        auth: qtg_wire_auth::Credentials::Hmac(secret.as_bytes().to_vec()),
        tls: None,
    };
    let v4 = qtg_executor::remote::RemoteExecutor::grpc("exec.py.transfer", endpoint)
        .map_err(anyhow::Error::msg)?
        .call_health()
        .await;
    assert!(
        matches!(&v4, Err(qtg_executor::ExecutorError::Unavailable(e)) if e.contains("Unauthenticated")),
        "{v4:?}\npython executor:\n{}",
        py.log()
    );
    py.stop().await;
    db.drop_db().await;
    Ok(())
}
