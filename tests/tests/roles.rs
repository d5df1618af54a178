//! Every endpoint × every role, plus no key and a revoked key: the exact status of each cell.
//! A role below the endpoint's gets 403 before anything else is looked at; a role at or above
//! it reaches the handler, which answers deterministically here (lists 200, unknown ids 404,
//! bodies that fail validation 400).

use qtg_tests::*;
use serde_json::{json, Value};

const ROLES: [&str; 5] = ["viewer", "requester", "approver", "operator", "admin"];

/// (method, path, minimum role, body, status once allowed)
type Cell = (&'static str, String, Option<&'static str>, Option<Value>, u16);

fn endpoints() -> Vec<Cell> {
    let id = "00000000-0000-4000-8000-000000000001";
    let m = format!("/v3/movements/{id}");
    let reason = json!({"reason": "role table"});
    vec![
        ("GET", "/v3/openapi.json".into(), None, None, 200),
        ("POST", "/v3/template-proposals".into(), Some("operator"), Some(json!({})), 400),
        ("GET", format!("/v3/template-proposals/{id}"), Some("viewer"), None, 404),
        ("GET", "/v3/template-proposals".into(), Some("viewer"), None, 200),
        ("GET", "/v3/attention".into(), Some("viewer"), None, 200),
        ("POST", format!("/v3/template-proposals/{id}/approve"), Some("admin"), None, 404),
        ("POST", format!("/v3/template-proposals/{id}/reject"), Some("admin"), None, 404),
        ("GET", "/v3/templates".into(), Some("viewer"), None, 200),
        ("GET", "/v3/templates/t.none".into(), Some("viewer"), None, 404),
        ("POST", "/v3/templates/t.none/versions/1/actions/retire".into(), Some("admin"), Some(reason.clone()), 404),
        ("POST", "/v3/movements".into(), Some("requester"), Some(json!({})), 400),
        ("GET", "/v3/movements".into(), Some("viewer"), None, 200),
        ("GET", m.clone(), Some("viewer"), None, 404),
        ("POST", format!("{m}/approve"), Some("approver"), None, 404),
        ("POST", format!("{m}/reject"), Some("approver"), None, 404),
        ("POST", format!("{m}/actions/cancel"), Some("operator"), Some(reason.clone()), 404),
        ("POST", format!("{m}/actions/resume"), Some("operator"), Some(reason.clone()), 404),
        ("POST", format!("{m}/nodes/a/actions/retry"), Some("operator"), Some(reason.clone()), 404),
        ("POST", format!("{m}/nodes/a/actions/complete-manual"), Some("operator"), Some(json!({"evidence": "x"})), 404),
        ("GET", format!("{m}/nodes/a/diagnosis"), Some("operator"), None, 404),
        ("GET", format!("{m}/nodes/a"), Some("viewer"), None, 404),
        ("GET", "/v3/audit-events".into(), Some("viewer"), None, 200),
        ("GET", "/v3/executors".into(), Some("viewer"), None, 200),
        ("GET", "/v3/signers".into(), Some("viewer"), None, 200),
        (
            "PUT",
            "/v3/signers/signer.none/expected-identity".into(),
            Some("admin"),
            Some(json!({"address": format!("0x{}", "1".repeat(40))})),
            404,
        ),
        ("GET", "/v3/workers".into(), Some("viewer"), None, 200),
        ("GET", "/v3/me".into(), Some("viewer"), None, 200),
        ("GET", "/v3/callbacks".into(), Some("operator"), None, 200),
        ("POST", format!("/v3/callbacks/{id}/actions/replay"), Some("operator"), None, 404),
        ("POST", "/v3/callbacks/actions/replay".into(), Some("operator"), Some(json!({})), 400),
        ("GET", "/v3/controls".into(), Some("viewer"), None, 200),
        ("POST", "/v3/controls/pause".into(), Some("admin"), Some(json!({"scope": "planet", "reason": "x"})), 400),
        ("POST", "/v3/controls/resume".into(), Some("admin"), Some(json!({"scope": "global", "reason": "x"})), 404),
        ("GET", "/v3/drift".into(), Some("viewer"), None, 200),
        ("GET", "/v3/balances".into(), Some("viewer"), None, 200),
        ("GET", "/v3/balances/history".into(), Some("viewer"), None, 400),
        ("GET", "/v3/venue-transfers".into(), Some("viewer"), None, 200),
        ("POST", "/v3/capital-transfers".into(), Some("requester"), Some(json!({})), 400),
        ("GET", "/v3/capital-transfers".into(), Some("viewer"), None, 200),
        ("GET", format!("/v3/capital-transfers/{id}"), Some("viewer"), None, 404),
        ("POST", format!("/v3/capital-transfers/{id}/actions/close"), Some("operator"), Some(reason.clone()), 404),
        ("POST", "/v3/drift/baseline".into(), Some("admin"), Some(json!({"scope": "evm:1", "reason": "x"})), 404),
        ("POST", "/v3/api-keys".into(), Some("admin"), Some(json!({})), 400),
        ("GET", "/v3/api-keys".into(), Some("admin"), None, 200),
        ("DELETE", format!("/v3/api-keys/{id}"), Some("admin"), None, 404),
        ("GET", "/v3/api-key-requests".into(), Some("admin"), None, 200),
        ("POST", "/v3/policies".into(), Some("admin"), Some(json!({})), 400),
        ("GET", "/v3/policies".into(), Some("viewer"), None, 200),
        ("GET", "/v3/policies/current".into(), Some("viewer"), None, 404),
        ("GET", "/v3/policies/1".into(), Some("viewer"), None, 404),
        ("POST", "/v3/policies/1/approve".into(), Some("admin"), None, 404),
        ("POST", "/v3/policies/1/reject".into(), Some("admin"), None, 404),
        ("POST", "/v3/policies/simulate".into(), Some("operator"), Some(json!({})), 400),
        ("POST", "/v3/address-book".into(), Some("admin"), Some(json!({})), 400),
        ("GET", "/v3/address-book".into(), Some("viewer"), None, 200),
        ("POST", "/v3/notification-channels".into(), Some("admin"), Some(json!({})), 400),
        ("GET", "/v3/notification-channels".into(), Some("operator"), None, 200),
        ("DELETE", format!("/v3/notification-channels/{id}"), Some("admin"), None, 404),
        ("POST", "/v3/notification-routes".into(), Some("admin"), Some(json!({})), 400),
        ("GET", "/v3/notification-routes".into(), Some("operator"), None, 200),
        ("DELETE", format!("/v3/notification-routes/{id}"), Some("admin"), None, 404),
        ("GET", "/v3/notifications".into(), Some("operator"), None, 200),
        ("POST", format!("/v3/notifications/{id}/actions/redeliver"), Some("operator"), Some(reason.clone()), 404),
        ("POST", format!("/v3/address-book/{id}/approve"), Some("admin"), None, 404),
        ("POST", format!("/v3/address-book/{id}/reject"), Some("admin"), None, 404),
        ("POST", format!("/v3/address-book/{id}/actions/remove"), Some("admin"), Some(reason.clone()), 404),
        ("POST", format!("/v3/api-key-requests/{id}/approve"), Some("admin"), None, 404),
        ("POST", format!("/v3/api-key-requests/{id}/reject"), Some("admin"), None, 404),
    ]
}

fn rank(role: &str) -> usize {
    ROLES.iter().position(|r| *r == role).unwrap_or(usize::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_every_role_as_specified() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let mut keys = Vec::new();
    for role in ROLES {
        keys.push((role.to_string(), api.key(&format!("p-{role}"), role).await?));
    }
    let revoked = api
        .ok("POST", "/v3/api-keys", &api.admin_key, Some(json!({"principal": "gone", "roles": ["admin"]})), 201)
        .await?;
    api.ok(
        "DELETE",
        &format!("/v3/api-keys/{}", revoked["id"].as_str().unwrap_or_default()),
        &api.admin_key,
        None,
        204,
    )
    .await?;
    let revoked = revoked["secret"].as_str().unwrap_or_default().to_string();

    // The table walks exactly the operations the generated OpenAPI document describes.
    let doc = api.ok("GET", "/v3/openapi.json", "", None, 200).await?;
    let mut documented = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in item.as_object().into_iter().flatten().map(|(m, _)| m.to_uppercase()) {
            let key_value = if path.starts_with("/v3/signers") { "signer.none" } else { "t.none" };
            let concrete = path
                .replace("{id}", "00000000-0000-4000-8000-000000000001")
                .replace("{node_key}", "a")
                .replace("{key}", key_value)
                .replace("{version}", "1");
            documented.insert((method, concrete));
        }
    }
    let mut walked: std::collections::BTreeSet<(String, String)> =
        endpoints().into_iter().map(|(m, p, ..)| (m.to_string(), p)).collect();
    walked.remove(&("GET".to_string(), "/v3/openapi.json".to_string()));
    assert_eq!(walked, documented, "role table vs OpenAPI operations");

    let mut failures = Vec::new();
    for (method, path, min, body, allowed) in endpoints() {
        let mut cells: Vec<(String, String, u16)> = vec![
            ("no key".into(), String::new(), if min.is_none() { allowed } else { 401 }),
            ("revoked key".into(), revoked.clone(), if min.is_none() { allowed } else { 401 }),
        ];
        for (role, key) in &keys {
            let expect = match min {
                Some(m) if rank(role) < rank(m) => 403,
                _ => allowed,
            };
            cells.push((role.clone(), key.clone(), expect));
        }
        for (who, key, expect) in cells {
            let (status, answer) = api.call(method, &path, &key, body.clone()).await?;
            if status != expect {
                failures.push(format!("{method} {path} as {who}: expected {expect}, got {status}: {answer}"));
            } else if status >= 400 && answer["error"]["code"].as_str().is_none() {
                failures.push(format!("{method} {path} as {who}: {status} without an error body: {answer}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} cells wrong:\n{}", failures.len(), failures.join("\n"));
    drop(api);
    db.drop_db().await;
    Ok(())
}
