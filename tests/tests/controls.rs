//! Controls a treasury team needs, through HTTP against the real binaries: the kill switch
//! holds movements READY (and says why) until resumed, each risk limit refuses with a 422
//! naming it — at creation and again at approval — and m-of-n approval needs distinct
//! approvers, none of them the creator.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

fn movement(template: &str, idem: &str, amount: &str, destination: &str) -> Value {
    json!({"template_key": template, "idempotency_key": idem,
           "intent": {"asset": "USDC", "amount": amount, "source": "treasury-1", "destination": destination}})
}

async fn create(api: &Api, keys: &Keys, body: Value) -> anyhow::Result<String> {
    let m = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
    Ok(m["id"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_holds_nodes_ready_until_resumed() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::all_in_one(&db.url, &[("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2")]).await?;
    let keys = Keys::create(&api).await?;
    let viewer = api.key("auditor", "viewer").await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.ks", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await?;

    // Only an admin pauses; bad scopes are refused and change nothing.
    let pause = |scope: &str, target: Option<&str>| json!({"scope": scope, "target": target, "reason": "incident 42"});
    let (s, _) = api.call("POST", "/v3/controls/pause", &keys.operator, Some(pause("global", None))).await?;
    assert_eq!(s, 403);
    for bad in [
        pause("planet", None),
        pause("lane", Some("moon")),
        pause("lane", None),
        pause("global", Some("x")),
        json!({"scope": "global", "reason": ""}),
    ] {
        let (s, body) = api.call("POST", "/v3/controls/pause", &api.admin_key, Some(bad.clone())).await?;
        assert_eq!(s, 400, "{bad}: {body}");
    }
    let (s, body) =
        api.call("POST", "/v3/controls/pause", &api.admin_key, Some(pause("executor", Some("exec.nope")))).await?;
    assert_eq!((s, body["error"]["code"].as_str()), (404, Some("NOT_FOUND")), "an unknown executor key: {body}");
    assert_eq!(api.ok("GET", "/v3/controls", &viewer, None, 200).await?["items"], json!([]));

    for (scope, target) in [("global", None), ("lane", Some("other")), ("executor", Some("exec.sim.transfer"))] {
        let held = pause(scope, target);
        let p = api.ok("POST", "/v3/controls/pause", &api.admin_key, Some(held.clone()), 200).await?;
        assert_eq!(p["paused_by"], "bootstrap-admin");
        // A pause elsewhere does not hold this movement's lane.
        api.ok("POST", "/v3/controls/pause", &api.admin_key, Some(pause("lane", Some("cex"))), 200).await?;

        let id = start_movement(&api, &keys, "t.ks", &format!("ks-{scope}"), None).await?;
        // Two full dispatcher ticks after the node became READY: it saw the node and left it.
        api.proc.wait_ticks("node_dispatcher", 2, Duration::from_secs(20)).await?;
        let m = api.ok("GET", &format!("/v3/movements/{id}"), &viewer, None, 200).await?;
        let a = node(&m, "a");
        assert_eq!(a["node_state"], "READY", "{scope}: a paused node is not dispatched: {m:#}");
        assert_eq!(a["dispatch_hold"]["scope"], scope, "{m:#}");
        assert_eq!(a["dispatch_hold"]["reason"], "incident 42");
        assert_eq!(a["attempt_no"], 0);

        let r = api.ok("POST", "/v3/controls/resume", &api.admin_key, Some(held.clone()), 200).await?;
        assert_eq!(r["resumed"]["scope"], scope);
        let m = wait_state(&api, &viewer, &id, &["COMPLETED"], Duration::from_secs(20)).await?;
        assert_eq!(node(&m, "a")["dispatch_hold"], Value::Null);
        // Resuming what is not paused is a clear 404.
        let (s, body) = api.call("POST", "/v3/controls/resume", &api.admin_key, Some(held)).await?;
        assert_eq!((s, body["error"]["code"].as_str()), (404, Some("NOT_FOUND")));
        api.ok("POST", "/v3/controls/resume", &api.admin_key, Some(pause("lane", Some("cex"))), 200).await?;
    }
    // Every list pages: three pauses, one per page, global first.
    let scopes = [("executor", Some("exec.sim.transfer")), ("global", None), ("lane", Some("cex"))];
    for (scope, target) in scopes {
        api.ok("POST", "/v3/controls/pause", &api.admin_key, Some(pause(scope, target)), 200).await?;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v3/controls?limit=1&cursor={c}"),
            None => "/v3/controls?limit=1".to_string(),
        };
        let page = api.ok("GET", &path, &viewer, None, 200).await?;
        assert_eq!(page["items"].as_array().map(Vec::len), Some(1), "{page}");
        seen.push(page["items"][0]["scope"].as_str().unwrap_or_default().to_string());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.replace('/', "%2F")),
            None => break,
        }
    }
    assert_eq!(seen, ["global", "lane", "executor"]);
    let (s, _) = api.call("GET", "/v3/executors?limit=0", &viewer, None).await?;
    assert_eq!(s, 400);
    let page = api.ok("GET", "/v3/executors?limit=1", &viewer, None, 200).await?;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1));
    for (scope, target) in scopes {
        api.ok("POST", "/v3/controls/resume", &api.admin_key, Some(pause(scope, target)), 200).await?;
    }
    let (pauses, resumes): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE action = 'control.pause'), count(*) FILTER (WHERE action = 'control.resume')
         FROM audit_outbox",
    )
    .fetch_one(&db.pool)
    .await?;
    assert_eq!((pauses, resumes), (9, 9));
    drop(api);
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn risk_limits_refuse_at_creation_and_at_approval_and_big_movements_need_two_approvers() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    let bob = api.key("bob", "approver").await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.risk", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}],
        "risk_controls": {"hard_cap": "1000", "velocity_limit": {"amount": "1500", "window_seconds": 3600},
                          "destination_allowlist": ["0xdest", "acct-2"], "approvals_required": 2,
                          "multi_approval_threshold": "500", "max_fee": "3"}}),
    )
    .await?;
    // A template's risk_controls are validated when proposed.
    let (s, body) = api
        .call(
            "POST",
            "/v3/template-proposals",
            &keys.operator,
            Some(json!({"template_key": "t.bad", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}],
        "risk_controls": {"hard_cap": 1000}})),
        )
        .await?;
    assert_eq!(s, 400, "{body}");

    let count =
        || async { sqlx::query_scalar::<_, i64>("SELECT count(*) FROM movement_requests").fetch_one(&db.pool).await };
    let refused = |body: Value, limit: &'static str| {
        let api = &api;
        let keys = &keys;
        async move {
            let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(body)).await?;
            anyhow::ensure!(s == 422, "expected 422 for {limit}, got {s}: {b}");
            anyhow::ensure!(b["error"]["code"] == "RISK_LIMIT_EXCEEDED" && b["error"]["limit"] == limit, "{b}");
            anyhow::Ok(())
        }
    };
    refused(movement("t.risk", "cap", "1000.01", "0xdest"), "hard_cap").await?;
    refused(movement("t.risk", "dest", "10", "0xelsewhere"), "destination_allowlist").await?;
    let mut no_dest = movement("t.risk", "nodest", "10", "x");
    no_dest["intent"].as_object_mut().unwrap().remove("destination");
    refused(no_dest, "destination_allowlist").await?;
    assert_eq!(count().await?, 0, "a refused movement leaves nothing behind");

    // Velocity: 800 + 800 > 1500 within the window, per asset and source.
    let big = create(&api, &keys, movement("t.risk", "v1", "800", "0xdest")).await?;
    refused(movement("t.risk", "v2", "800", "acct-2"), "velocity_limit").await?;
    // The same source spelled differently is the same budget.
    let mut respelled = movement("t.risk", "v2b", "800", "acct-2");
    respelled["intent"]["source"] = json!({"address": "TREASURY-1"});
    refused(respelled, "velocity_limit").await?;
    let mut other_source = movement("t.risk", "v3", "800", "acct-2");
    other_source["intent"]["source"] = json!("treasury-2");
    let other = create(&api, &keys, other_source).await?;
    let small = create(&api, &keys, movement("t.risk", "v4", "100", "0xdest")).await?;
    // Same key + same body still answers the existing movement (idempotency before limits).
    api.ok("POST", "/v3/movements", &keys.requester, Some(movement("t.risk", "v1", "800", "0xdest")), 200).await?;

    // 800 >= 500: two distinct approvers, neither the creator.
    let m = api.ok("GET", &format!("/v3/movements/{big}"), &bob, None, 200).await?;
    assert_eq!(m["approvals_required"], 2);
    let (s, b) = api.call("POST", &format!("/v3/movements/{big}/approve"), &keys.requester, None).await?;
    assert_eq!(s, 403, "{b}");
    let m = api.ok("POST", &format!("/v3/movements/{big}/approve"), &keys.approver, None, 200).await?;
    assert_eq!(m["request_state"], "PENDING_APPROVAL", "one of two approvals: {m:#}");
    assert_eq!(m["approvals"].as_array().map(Vec::len), Some(1));
    assert_eq!(m["approvals"][0]["intent_hash"], m["intent_hash"]);
    assert_eq!(m["approvals"][0]["plan_hash"], m["compiled_plan_hash"]);
    let (s, b) = api.call("POST", &format!("/v3/movements/{big}/approve"), &keys.approver, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("CONFLICT")), "the same approver twice");
    let m =
        api.ok("POST", &format!("/v3/movements/{big}/approve"), &bob, Some(json!({"reason": "checked"})), 200).await?;
    assert_eq!(m["approval_status"], "approved", "{m:#}");
    assert_ne!(m["request_state"], "PENDING_APPROVAL");
    assert_eq!(m["approvals"].as_array().map(Vec::len), Some(2));
    // Below the threshold one approver is enough.
    let m = api.ok("POST", &format!("/v3/movements/{small}/approve"), &bob, None, 200).await?;
    assert_eq!(m["approval_status"], "approved");

    // Limits are checked again at approval: a tighter global cap set since creation refuses.
    drop(api);
    let api = Api::start(&db.url, &[("MG_RISK_HARD_CAP", "500")]).await?;
    let (s, b) = api.call("POST", &format!("/v3/movements/{other}/approve"), &keys.approver, None).await?;
    assert_eq!((s, b["error"]["limit"].as_str()), (422, Some("hard_cap")), "{b}");
    let m = api.ok("GET", &format!("/v3/movements/{other}"), &bob, None, 200).await?;
    assert_eq!(m["request_state"], "PENDING_APPROVAL");
    assert_eq!(m["approvals"], json!([]), "a refused approval records nothing");
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// An executor whose `prepare` lets an operator's pause commit while the node is claimed
/// (between the claim and the submit): the pause must still stop the submit.
struct PausedDuringPrepare {
    inner: qtg_sim::SimExecutor,
    pool: sqlx::PgPool,
}

#[async_trait::async_trait]
impl qtg_executor::Executor for PausedDuringPrepare {
    async fn preflight(
        &self,
        ctx: &qtg_core::ExecutionContext,
    ) -> Result<Option<qtg_core::Refusal>, qtg_executor::ExecutorError> {
        self.inner.preflight(ctx).await
    }

    async fn prepare(
        &self,
        ctx: &qtg_core::ExecutionContext,
    ) -> Result<qtg_executor::Prepared, qtg_executor::ExecutorError> {
        sqlx::query(
            "INSERT INTO dispatch_pauses (scope, target, reason, paused_by) VALUES ('global', '', 'incident', \
             'ops') ON CONFLICT DO NOTHING",
        )
        .execute(&self.pool)
        .await
        .map_err(|e| qtg_executor::ExecutorError::Unavailable(e.to_string()))?;
        self.inner.prepare(ctx).await
    }

    async fn submit(
        &self,
        ctx: &qtg_core::ExecutionContext,
        submission: &qtg_executor::Submission<'_>,
    ) -> Result<qtg_core::SubmitOutcome, qtg_executor::ExecutorError> {
        self.inner.submit(ctx, submission).await
    }

    async fn observe(
        &self,
        ctx: &qtg_core::ExecutionContext,
    ) -> Result<qtg_core::ObserveOutcome, qtg_executor::ExecutorError> {
        self.inner.observe(ctx).await
    }

    async fn recover(
        &self,
        ctx: &qtg_core::ExecutionContext,
        key: &str,
    ) -> Result<qtg_core::SubmitOutcome, qtg_executor::ExecutorError> {
        self.inner.recover(ctx, key).await
    }
}

#[tokio::test]
async fn a_pause_that_commits_after_the_claim_still_stops_the_submit() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let mut registry = qtg_executor::Registry::default();
    registry.insert_executor(
        "exec.sim.transfer",
        qtg_core::Lane::Other,
        std::sync::Arc::new(PausedDuringPrepare {
            inner: qtg_sim::SimExecutor::new("exec.sim.transfer", db.pool.clone()),
            pool: db.pool.clone(),
        }),
    );
    let engine = qtg_engine::Engine {
        pool: db.pool.clone(),
        registry: std::sync::Arc::new(registry),
        settings: test_settings(),
        actor: "test".into(),
        shutdown: Default::default(),
    };
    install_plan(
        &engine,
        "t.p",
        json!({
            "nodes": [{
                "node_key": "n", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"
            }]
        }),
    )
    .await?;
    let id = create_approved(&engine, "t.p", "p-1").await?;
    assert_eq!(engine.dispatch_tick().await?, 1, "claimed before the pause existed");
    let (state, code, refs, attempt) = node_row(&db.pool, id, "n").await?;
    // The arm's compare-and-set saw the pause: the attempt was never armed.
    assert_eq!((state.as_str(), code.as_deref(), attempt), ("FAILED", Some("DISPATCH_PAUSED"), 0));
    assert!(refs.get("__submit_attempt_pending").is_none(), "nothing was sent: no pending marker");
    let sent: i64 = sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls").fetch_one(&db.pool).await?;
    assert_eq!(sent, 0, "the venue never saw a submit call");
    assert_eq!(request_state(&db.pool, id).await?, "FAILED");

    // After resume, an operator retry runs a new attempt (the executor pauses again on
    // prepare, so lift it from the database the way resume does, before the submit).
    sqlx::query("DELETE FROM dispatch_pauses").execute(&db.pool).await?;
    engine.retry_node("ops", id, "n", "incident over").await?;
    assert_eq!(node_row(&db.pool, id, "n").await?.0, "READY");
    db.drop_db().await;
    Ok(())
}

/// Risk limits without side doors: what is still in flight counts in the velocity window
/// however long ago it was created; the bucket is the source as the executor will debit it
/// (trimmed, case-folded); limits are per asset and the asset must be one the template
/// moves; a template's required intent fields cannot be left out or invented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn risk_limits_have_no_side_doors() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.doors", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}],
        "risk_controls": {"per_asset": {
            "USDC": {"hard_cap": "1000", "velocity_limit": {"amount": "1500", "window_seconds": 2}},
            "ETH": {"hard_cap": "2"}},
            "intent_fields": {"source": "text"}}}),
    )
    .await?;
    let refused = |body: Value, limit: &'static str| {
        let (api, keys) = (&api, &keys);
        async move {
            let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(body)).await?;
            anyhow::ensure!(s == 422 && b["error"]["limit"] == limit, "expected 422 {limit}, got {s}: {b}");
            anyhow::Ok(())
        }
    };
    let m = |idem: &str, asset: &str, amount: &str, source: Value| {
        json!({"template_key": "t.doors", "idempotency_key": idem,
               "intent": {"asset": asset, "amount": amount, "source": source, "destination": "0xd"}})
    };
    // The asset must be one the template moves; each asset has its own cap.
    refused(m("a1", "DOGE", "1", json!("treasury-1")), "allowed_assets").await?;
    refused(m("a2", "ETH", "3", json!("treasury-1")), "hard_cap").await?;
    create(&api, &keys, m("a3", "eth", "1.5", json!("treasury-1"))).await?;
    // A required field cannot be left out (nor is a fresh bucket invented without a source).
    let mut no_source = m("a4", "USDC", "1", json!("x"));
    no_source["intent"].as_object_mut().unwrap().remove("source");
    refused(no_source, "intent_fields").await?;

    // 800 in flight, created before the 2 s window started, still counts.
    let first = create(&api, &keys, m("v1", "USDC", "800", json!("treasury-1"))).await?;
    let old = "SELECT now() > created_at + interval '2.5 seconds' FROM movement_requests WHERE id = $1";
    wait_db(&db.pool, old, first.parse()?, Duration::from_secs(10)).await?;
    refused(m("v2", "USDC", "800", json!("treasury-1")), "velocity_limit").await?;
    // The same account in capitals is the same budget; padded with spaces it is not plain text
    // and is refused outright (issue 26), so spaces cannot open a second budget either.
    refused(m("v3", "usdc", "800", json!("TREASURY-1")), "velocity_limit").await?;
    refused(m("v4", "USDC", "800", json!({"address": "Treasury-1"})), "velocity_limit").await?;
    for padded in [json!("  treasury-1 "), json!({"address": " Treasury-1"})] {
        let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(m("v4b", "USDC", "800", padded))).await?;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{b}");
    }
    // Another account has its own budget.
    create(&api, &keys, m("v5", "USDC", "800", json!("treasury-2"))).await?;
    db.drop_db().await;
    Ok(())
}
