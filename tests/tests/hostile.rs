//! Property test: malformed and hostile bodies (and path segments) thrown at every mutating
//! endpoint never get a 5xx, and after any 4xx the database is exactly as it was.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use qtg_tests::*;
use serde_json::{json, Map, Value};
use sqlx::PgPool;

/// Field names the API knows, so generated objects often hit real fields with wrong values.
const FIELDS: &[&str] = &[
    "template_key",
    "description",
    "nodes",
    "edges",
    "risk_controls",
    "node_key",
    "node_kind",
    "action_type",
    "executor_key",
    "signer_key",
    "signing_required",
    "config",
    "timeout_policy",
    "from",
    "to",
    "intent",
    "asset",
    "amount",
    "source",
    "destination",
    "input_params",
    "callback_url",
    "callback_secret",
    "idempotency_key",
    "template_version",
    "reason",
    "runbook_case",
    "evidence",
    "scope",
    "target",
    "principal",
    "roles",
    "address",
    "hard_cap",
    "approvals_required",
];

fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,24}",
        Just(String::new()),
        Just("0".into()),
        Just("-1".into()),
        Just("1e309".into()),
        Just("NaN".into()),
        Just("' OR 1=1; DROP TABLE movement_requests; --".into()),
        Just("\u{0}\u{202e}\u{feff}".into()),
        Just("$ref:a.b".into()),
        Just("http://169.254.169.254/latest/meta-data".into()),
        Just("x".repeat(5000)),
        Just("global".into()),
        Just("admin".into()),
        Just("exec.sim.transfer".into()),
        Just("00000000-0000-4000-8000-000000000001".into()),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)),
        Just(json!(u64::MAX)),
        hostile_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (prop_oneof![prop::sample::select(FIELDS).prop_map(String::from), ".{0,12}"], inner),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// How the body is sent.
#[derive(Debug, Clone)]
enum Payload {
    Json(Value),
    Raw(Vec<u8>),
    WrongType(String),
    Huge,
}

/// Mutates a valid body: a field replaced by anything, removed, or an unknown one added.
fn mutate(base: Value, path_pick: usize, op: u8, with: Value) -> Value {
    let mut v = base;
    let mut cursor = &mut v;
    // Walk into a nested object/array now and then.
    for _ in 0..(path_pick % 3) {
        let next_key = match cursor {
            Value::Object(o) if !o.is_empty() => o.keys().nth(path_pick % o.len()).cloned(),
            _ => None,
        };
        match next_key {
            Some(k) if cursor[&k].is_object() => cursor = cursor.get_mut(&k).expect("key exists"),
            _ => break,
        }
    }
    if let Value::Object(o) = cursor {
        let key = o.keys().nth(path_pick % o.len().max(1)).cloned();
        match (op % 3, key) {
            (0, Some(k)) => {
                o.insert(k, with);
            }
            (1, Some(k)) => {
                o.remove(&k);
            }
            _ => {
                o.insert(format!("unknown_{path_pick}"), with);
            }
        }
    }
    v
}

struct Target {
    method: &'static str,
    path: String,
    valid: Value,
}

fn payload(valid: Value) -> impl Strategy<Value = Payload> {
    prop_oneof![
        4 => json_value().prop_map(Payload::Json),
        6 => (any::<usize>(), any::<u8>(), json_value())
            .prop_map(move |(p, op, with)| Payload::Json(mutate(valid.clone(), p, op, with))),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Payload::Raw),
        1 => ".{0,16}".prop_map(Payload::WrongType),
        1 => Just(Payload::Huge),
    ]
}

async fn snapshot(pool: &PgPool) -> anyhow::Result<String> {
    let mut out = String::new();
    for t in [
        "templates",
        "template_proposals",
        "plan_versions",
        "plan_nodes",
        "plan_edges",
        "movement_requests",
        "movement_request_nodes",
        "movement_approvals",
        "artifacts",
        "node_events",
        "movement_callback_outbox",
        "audit_outbox",
        "api_keys",
        "dispatch_pauses",
        "signers",
    ] {
        let sql = format!(
            "SELECT count(*)::text || ':' || COALESCE(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM {t} t"
        );
        let h: String = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(pool).await?;
        out.push_str(&format!("{t}={h} "));
    }
    Ok(out)
}

async fn send(api: &Api, key: &str, method: &str, path: &str, p: &Payload) -> anyhow::Result<(u16, String)> {
    let url = format!("{}{}", api.base, path);
    let req = match method {
        "POST" => api.http.post(&url),
        "PUT" => api.http.put(&url),
        "DELETE" => api.http.delete(&url),
        _ => api.http.get(&url),
    }
    .bearer_auth(key);
    let req = match p {
        Payload::Json(v) => req.json(v),
        Payload::Raw(b) => req.header("content-type", "application/json").body(b.clone()),
        Payload::WrongType(s) => req.header("content-type", "text/plain").body(s.clone()),
        Payload::Huge => req
            .header("content-type", "application/json")
            .body(format!("{{\"reason\": \"{}\"}}", "a".repeat(300 * 1024))),
    };
    let resp = req.send().await?;
    Ok((resp.status().as_u16(), resp.text().await?))
}

#[test]
fn hostile_bodies_never_5xx_and_a_4xx_changes_nothing() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let (db, api, admin, targets) = rt.block_on(async {
        let db = TestDb::new().await?;
        let api = Api::start(&db.url, &[]).await?;
        let keys = Keys::create(&api).await?;
        let admin = api.key("fuzz-admin", "admin").await?;
        let node = json!({
            "node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"
        });
        install_template(&api, &keys, json!({"template_key": "t.fuzz", "nodes": [node.clone()]})).await?;
        let proposal = api
            .ok(
                "POST",
                "/v3/template-proposals",
                &keys.operator,
                Some(json!({"template_key": "t.fuzz2", "nodes": [node.clone()]})),
                201,
            )
            .await?;
        let pid = proposal["id"].as_str().unwrap_or_default().to_string();
        let movement = json!({"template_key": "t.fuzz", "idempotency_key": "fz-1",
                              "intent": {"asset": "USDC", "amount": "10", "source": "a", "destination": "b"}});
        let m = api.ok("POST", "/v3/movements", &keys.requester, Some(movement.clone()), 201).await?;
        let mid = m["id"].as_str().unwrap_or_default().to_string();
        let mp = format!("/v3/movements/{mid}");
        let reason = json!({"reason": "fuzz"});
        let targets = vec![
            Target {
                method: "POST",
                path: "/v3/template-proposals".into(),
                valid: json!({"template_key": "t.fz", "nodes": [node.clone()], "edges": []}),
            },
            Target { method: "POST", path: format!("/v3/template-proposals/{pid}/approve"), valid: reason.clone() },
            Target { method: "POST", path: format!("/v3/template-proposals/{pid}/reject"), valid: reason.clone() },
            Target { method: "POST", path: "/v3/movements".into(), valid: movement },
            Target { method: "POST", path: format!("{mp}/approve"), valid: reason.clone() },
            Target { method: "POST", path: format!("{mp}/reject"), valid: reason.clone() },
            Target {
                method: "POST",
                path: format!("{mp}/actions/cancel"),
                valid: json!({"reason": "x", "runbook_case": "C6", "evidence": {"a": 1}}),
            },
            Target { method: "POST", path: format!("{mp}/actions/resume"), valid: reason.clone() },
            Target { method: "POST", path: format!("{mp}/nodes/a/actions/retry"), valid: reason.clone() },
            Target {
                method: "POST",
                path: format!("{mp}/nodes/a/actions/complete-manual"),
                valid: json!({"evidence": "done"}),
            },
            Target { method: "POST", path: format!("{mp}/nodes/%00%27;--/actions/retry"), valid: reason.clone() },
            Target { method: "POST", path: "/v3/movements/not-a-uuid/approve".into(), valid: reason.clone() },
            Target {
                method: "PUT",
                path: "/v3/signers/signer.sim/expected-identity".into(),
                valid: json!({"address": format!("0x{}", "a".repeat(40))}),
            },
            Target {
                method: "POST",
                path: "/v3/controls/pause".into(),
                valid: json!({"scope": "lane", "target": "cex", "reason": "x"}),
            },
            Target {
                method: "POST",
                path: "/v3/controls/resume".into(),
                valid: json!({"scope": "lane", "target": "cex", "reason": "x"}),
            },
            Target {
                method: "POST",
                path: "/v3/api-keys".into(),
                valid: json!({"principal": "p", "roles": ["viewer"]}),
            },
            Target {
                method: "DELETE",
                path: "/v3/api-keys/00000000-0000-4000-8000-000000000001".into(),
                valid: json!({}),
            },
            Target {
                method: "POST",
                path: "/v3/callbacks/00000000-0000-4000-8000-000000000001/actions/replay".into(),
                valid: json!({}),
            },
        ];
        anyhow::Ok((db, api, admin, targets))
    })?;

    let mut counts = std::collections::BTreeMap::<u16, usize>::new();
    for t in &targets {
        let seen = std::cell::RefCell::new(Vec::new());
        let mut runner = TestRunner::new(Config { cases: 40, failure_persistence: None, ..Config::default() });
        runner
            .run(&payload(t.valid.clone()), |p| {
                let res: anyhow::Result<(u16, String, String, String)> = rt.block_on(async {
                    let before = snapshot(&db.pool).await?;
                    let (status, body) = send(&api, &admin, t.method, &t.path, &p).await?;
                    let after = snapshot(&db.pool).await?;
                    Ok((status, body, before, after))
                });
                let (status, body, before, after) = res.map_err(|e| TestCaseError::fail(e.to_string()))?;
                seen.borrow_mut().push(status);
                prop_assert!(status < 500, "{} {} answered {status}: {body}\npayload: {p:?}", t.method, t.path);
                if (400..500).contains(&status) {
                    prop_assert_eq!(
                        &before,
                        &after,
                        "{} {} answered {} but changed the database; payload {:?}",
                        t.method,
                        t.path,
                        status,
                        p
                    );
                    let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                    prop_assert!(parsed["error"]["code"].is_string(), "{status} without an error body: {body}");
                }
                Ok(())
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for s in seen.into_inner() {
            *counts.entry(s).or_default() += 1;
        }
    }
    eprintln!("statuses seen: {counts:?}");
    assert!(counts.keys().any(|s| (400..500).contains(s)));
    drop(api);
    rt.block_on(db.drop_db());
    Ok(())
}
