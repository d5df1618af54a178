//! The generated OpenAPI document describes what the API really answers: live answers of every
//! list and read (and of creates, approvals and refusals) are validated against the schemas the
//! document declares for that operation and status, by jsonschema's Draft 2020-12 validator
//! (`tests/py/check_openapi.py`, from the test venv).

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_answers_conform_to_the_openapi_document() -> anyhow::Result<()> {
    let venv = tokio::process::Command::new(repo().join("scripts/ensure-test-venv.sh")).output().await?;
    anyhow::ensure!(venv.status.success(), "{}", String::from_utf8_lossy(&venv.stderr));
    let py = String::from_utf8(venv.stdout)?.trim().to_string();

    let db = TestDb::new().await?;
    let api = Api::all_in_one(
        &db.url,
        &[("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2"), ("MG_CALLBACK_SECRET", "openapi-callback-secret-01")],
    )
    .await?;
    let keys = Keys::create(&api).await?;
    let admin = api.admin_key.clone();
    let mut samples: Vec<Value> = Vec::new();
    // Calls `path` and records the answer under the document's path template.
    macro_rules! sample {
        ($method:expr, $template:expr, $path:expr, $key:expr, $body:expr) => {{
            let path: String = ($path).into();
            let (status, answer) = api.call($method, &path, $key, $body).await?;
            samples.push(json!({"method": $method, "path": $template, "status": status, "body": answer}));
            answer
        }};
    }

    let node =
        json!({"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"});
    let p = sample!(
        "POST",
        "/v3/template-proposals",
        "/v3/template-proposals",
        &keys.operator,
        Some(json!({"template_key": "t.doc", "nodes": [node], "risk_controls": {"hard_cap": "1000"}}))
    );
    let pid = p["id"].as_str().unwrap_or_default().to_string();
    sample!("GET", "/v3/template-proposals/{id}", format!("/v3/template-proposals/{pid}"), &admin, None);
    sample!(
        "POST",
        "/v3/template-proposals/{id}/approve",
        format!("/v3/template-proposals/{pid}/approve"),
        &admin,
        None
    );
    let m = sample!(
        "POST",
        "/v3/movements",
        "/v3/movements",
        &keys.requester,
        Some(
            json!({"template_key": "t.doc", "idempotency_key": "doc-1", "callback_url": "https://hooks.example.com/qtg",
                    "intent": {"asset": "USDC", "amount": "12.5", "destination": "0xd"}})
        )
    );
    let id = m["id"].as_str().unwrap_or_default().to_string();
    sample!(
        "POST",
        "/v3/movements",
        "/v3/movements",
        &keys.requester,
        Some(json!({
            "template_key": "t.doc", "idempotency_key": "doc-2", "intent": {"asset": "USDC", "amount": "1000.01"}
        }))
    );
    sample!("POST", "/v3/movements/{id}/approve", format!("/v3/movements/{id}/approve"), &keys.requester, None);
    sample!("POST", "/v3/movements/{id}/approve", format!("/v3/movements/{id}/approve"), &keys.approver, None);
    wait_state(&api, &admin, &id, &["COMPLETED"], Duration::from_secs(30)).await?;
    sample!(
        "POST",
        "/v3/controls/pause",
        "/v3/controls/pause",
        &admin,
        Some(json!({"scope": "lane", "target": "cex", "reason": "doc"}))
    );
    sample!("POST", "/v3/api-keys", "/v3/api-keys", &admin, Some(json!({"principal": "doc", "roles": ["viewer"]})));
    // The health worker has probed the executors once it has run; wait for the roster.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while api.ok("GET", "/v3/executors", &admin, None, 200).await?["items"].as_array().is_none_or(Vec::is_empty) {
        anyhow::ensure!(std::time::Instant::now() < deadline, "no executor roster");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let movement_path = format!("/v3/movements/{id}");
    let diagnosis_path = format!("/v3/movements/{id}/nodes/a/diagnosis");
    let node_path = format!("/v3/movements/{id}/nodes/a");
    // A node that is not stuck has no runbook case: null, as the document says.
    let d = api.ok("GET", &diagnosis_path, &admin, None, 200).await?;
    assert!(d["case"].is_null() && d["title"] == "Not stuck", "{d}");
    for (template, path) in [
        ("/v3/templates", "/v3/templates"),
        ("/v3/templates/{key}", "/v3/templates/t.doc"),
        ("/v3/movements", "/v3/movements"),
        ("/v3/movements/{id}", movement_path.as_str()),
        ("/v3/movements/{id}/nodes/{node_key}/diagnosis", diagnosis_path.as_str()),
        ("/v3/movements/{id}/nodes/{node_key}", node_path.as_str()),
        ("/v3/movements", "/v3/movements?template_key=t.doc&since=2020-01-01T00:00:00Z"),
        ("/v3/me", "/v3/me"),
        ("/v3/audit-events", "/v3/audit-events"),
        ("/v3/callbacks", "/v3/callbacks"),
        ("/v3/executors", "/v3/executors"),
        ("/v3/signers", "/v3/signers"),
        ("/v3/workers", "/v3/workers"),
        ("/v3/controls", "/v3/controls"),
        ("/v3/api-keys", "/v3/api-keys"),
        ("/v3/movements/{id}", "/v3/movements/00000000-0000-4000-8000-000000000001"),
    ] {
        sample!("GET", template, path, &admin, None);
    }
    sample!("GET", "/v3/movements", "/v3/movements", "not-a-key", None);
    sample!("GET", "/v3/movements", "/v3/movements?limit=0", &admin, None);
    sample!("POST", "/v3/api-keys", "/v3/api-keys", &keys.operator, Some(json!({})));
    let statuses: Vec<u64> = samples.iter().filter_map(|s| s["status"].as_u64()).collect();
    for expected in [200, 201, 400, 401, 403, 404, 422] {
        assert!(statuses.contains(&expected), "no {expected} sampled: {statuses:?}");
    }

    let dir = std::env::temp_dir();
    let doc_file = dir.join(format!("{}-openapi.json", db.name));
    let samples_file = dir.join(format!("{}-samples.json", db.name));
    std::fs::write(&doc_file, api.ok("GET", "/v3/openapi.json", "", None, 200).await?.to_string())?;
    std::fs::write(&samples_file, Value::Array(samples).to_string())?;
    let out = tokio::process::Command::new(&py)
        .arg(repo().join("tests/py/check_openapi.py"))
        .arg(&doc_file)
        .arg(&samples_file)
        .output()
        .await?;
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "answers that do not match the document:\n{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.lines().count() >= 25, "{report}");
    drop(api);
    db.drop_db().await;
    Ok(())
}
