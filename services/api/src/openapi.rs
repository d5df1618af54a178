//! `/v3/openapi.json`: the paths this build serves (OpenAPI 3.1).

use axum::Json;
use serde_json::{json, Value};

pub async fn document() -> Json<Value> {
    let op = |summary: &str, role: &str| json!({"summary": summary, "x-qtg-role": role, "security": [{"bearer": []}]});
    Json(json!({
        "openapi": "3.1.0",
        "info": {"title": "qtg", "version": "3"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/v3/template-proposals": {"post": op("Propose a template (DAG of plan nodes)", "operator")},
            "/v3/template-proposals/{id}": {"get": op("Read a template proposal", "viewer")},
            "/v3/template-proposals/{id}/approve": {"post": op("Approve a proposal: the template's next version", "admin")},
            "/v3/template-proposals/{id}/reject": {"post": op("Reject a proposal", "admin")},
            "/v3/templates": {"get": op("List templates", "viewer")},
            "/v3/templates/{key}": {"get": op("A template's versions, nodes, edges and hashes", "viewer")},
            "/v3/movements": {"post": op("Create a movement (idempotent by idempotency_key)", "requester"), "get": op("List movements", "viewer")},
            "/v3/movements/{id}": {"get": op("A movement with its nodes", "viewer")},
            "/v3/movements/{id}/approve": {"post": op("Approve a movement", "approver")},
            "/v3/movements/{id}/reject": {"post": op("Reject a movement", "approver")},
            "/v3/audit-events": {"get": op("Audit events (movement_id, actor, action, since, until; cursor paging)", "viewer")},
            "/v3/callbacks": {"get": op("Callback outbox rows (status, movement_id; cursor paging)", "operator")},
            "/v3/callbacks/{id}/actions/replay": {"post": op("Replay a dead-lettered callback (new row, same event)", "operator")},
            "/v3/executors": {"get": op("Executor roster with health", "viewer")},
            "/v3/signers": {"get": op("Signer roster with health and identity posture", "viewer")},
            "/v3/signers/{key}/expected-identity": {"put": op("Enrol a signer's expected address", "admin")},
            "/v3/workers": {"get": op("Worker heartbeats with age and stale flag", "viewer")},
            "/v3/movements/{id}/actions/cancel": {"post": op("Cancel ({reason, runbook_case?, evidence?}); refused while a side effect may be in flight unless C6 with evidence", "operator")},
            "/v3/movements/{id}/actions/resume": {"post": op("Resume MANUAL_INTERVENTION so recovery sweeps again ({reason})", "operator")},
            "/v3/movements/{id}/nodes/{node_key}/actions/retry": {"post": op("Retry a FAILED node ({reason}); 409 SUBMIT_ATTEMPT_PENDING on UNKNOWN", "operator")},
            "/v3/movements/{id}/nodes/{node_key}/actions/complete-manual": {"post": op("Complete a manual node with evidence ({evidence})", "operator")},
            "/v3/movements/{id}/nodes/{node_key}/diagnosis": {"get": op("Runbook case (C1…C7), evidence and required action for a stuck node", "operator")},
            "/v3/api-keys": {"post": op("Create an API key (secret shown once)", "admin")},
            "/v3/api-keys/{id}": {"delete": op("Revoke an API key", "admin")},
        }
    }))
}
