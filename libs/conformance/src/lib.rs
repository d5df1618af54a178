//! The conformance suite: drives a remote executor through the contract over either
//! transport and reports each check. What it expects of the executor under test:
//! * a valid intent (`asset` "USDC", `amount` "1.00") passes preflight; amount "0" is refused;
//! * prepare returns an action whose `payload_hash`, when set, is sha256(payload);
//! * submit with a key returns SUBMITTED, OBSERVING or COMPLETED with a `provider_ref_id`,
//!   and a repeated submit with the same key returns the same `provider_ref_id`;
//! * observe reaches COMPLETED or FAILED within 30 polls;
//! * recover with the submitted key finds the order; with a key never submitted it must not
//!   claim success (FAILED or UNKNOWN);
//! * the fence (docs/executors.md, "The fence"): a key Recover answered FAILED for is void and
//!   a Submit with it is refused; a Submit received after its `submit_by` is refused and left
//!   no order (Recover then finds nothing); once attempt 2 of a node was seen, a Submit of
//!   attempt 1 (never sent) is refused. A refusal is a FAILED answer.
//! * a seen key keeps its outcome: a key already executed, replayed after its `submit_by` and
//!   again after attempt 2 of its node was executed, is answered as the original order (its
//!   `provider_ref_id`), never FAILED — FAILED means "known not to have happened", and a
//!   proxy's replay must not turn an executed order into one (an operator retry would pay
//!   twice); Recover of it does not say FAILED either.
//!
//! What it cannot prove: that the executor records keys *durably* and *before* the venue call
//! (a restart or a crash between the two is not simulated), nor anything about replicas that
//! do not share the key store; an executor that answers a repeated key with the first
//! `provider_ref_id` while executing it again is invisible to it.
//!
//! Every answer is also checked against the per-method state rules.

use std::time::Duration;

use qtg_core::protocol::{Method, PROTOCOL_VERSION};
use qtg_core::{ExecutionContext, ExecutionResult, NodeState};
use qtg_executor::remote::{Endpoint, RemoteExecutor, TlsClient};
use qtg_executor::{ExecutorError, Prepared};
use qtg_wire_auth::Credentials;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Http,
}

#[derive(Debug, Clone)]
pub struct Target {
    pub endpoint: String,
    pub transport: Transport,
    pub executor_key: String,
    pub auth: Credentials,
    pub timeout: Duration,
    /// For https:// endpoints: the CA that signs the executor's certificate.
    pub tls: Option<TlsClient>,
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub passed: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.passed)
    }

    fn record(&mut self, name: &'static str, outcome: Result<String, String>) {
        let (passed, detail) = match outcome {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.checks.push(Check { name, passed, detail });
    }

    /// A fixed-width pass/fail table.
    pub fn table(&self) -> String {
        let mut out = String::from("RESULT  CHECK                          DETAIL\n");
        for c in &self.checks {
            out.push_str(&format!("{:<7} {:<30} {}\n", if c.passed { "PASS" } else { "FAIL" }, c.name, c.detail));
        }
        out.push_str(&format!(
            "{} of {} checks passed\n",
            self.checks.iter().filter(|c| c.passed).count(),
            self.checks.len()
        ));
        out
    }
}

fn context(key: &str, node_id: &str, amount: &str) -> ExecutionContext {
    ExecutionContext {
        protocol_version: PROTOCOL_VERSION.into(),
        request_id: uuid::Uuid::new_v4().to_string(),
        request_node_id: node_id.into(),
        compiled_plan_hash: "0".repeat(64),
        template_key: "qtg.conformance".into(),
        template_version: 1,
        node_key: "conformance".into(),
        node_kind: "action".into(),
        action_type: "transfer".into(),
        attempt_no: 1,
        intent: json!({"asset": "USDC", "amount": amount, "source": "conformance-a", "destination": "conformance-b"}),
        input_params: json!({"qtg_conformance": true}),
        resolved_bindings: json!({"executor_key": key}),
        risk_controls: json!({}),
        prior_artifacts: vec![],
        node_config: json!({}),
        provider_context: json!({}),
        timeout_policy: json!({}),
        provider_refs: json!({}),
        provider_ref_id: None,
        executor_key: key.into(),
    }
}

fn checked(r: Result<ExecutionResult, ExecutorError>, method: Method) -> Result<ExecutionResult, String> {
    let r = r.map_err(|e| format!("{} call failed: {e}", method.as_str()))?;
    r.validate(method).map_err(|v| v.to_string())?;
    Ok(r)
}

/// Runs every check against `target`.
pub async fn run(target: &Target) -> Report {
    let mut report = Report::default();
    let endpoint = Endpoint {
        url: target.endpoint.clone(),
        timeout: target.timeout,
        auth: target.auth.clone(),
        tls: target.tls.clone(),
    };
    let exec = match target.transport {
        Transport::Http => RemoteExecutor::http(&target.executor_key, endpoint),
        Transport::Grpc => RemoteExecutor::grpc(&target.executor_key, endpoint),
    };
    let exec = match exec {
        Ok(e) => e,
        Err(e) => {
            report.record("connect", Err(e));
            return report;
        }
    };
    let key = &target.executor_key;
    let node_id = uuid::Uuid::new_v4().to_string();
    let ctx = context(key, &node_id, "1.00");

    report.record(
        "health",
        exec.call_health().await.map(|d| format!("ok {}", d.unwrap_or_default())).map_err(|e| e.to_string()),
    );

    report.record(
        "preflight pass",
        match exec.call_preflight(&ctx).await {
            Ok(None) => Ok("passed".into()),
            Ok(Some(r)) => Err(format!("refused a valid intent: {:?} {:?}", r.error_code, r.error_detail)),
            Err(e) => Err(e.to_string()),
        },
    );
    report.record(
        "preflight fail",
        match exec.call_preflight(&context(key, &uuid::Uuid::new_v4().to_string(), "0")).await {
            Ok(Some(r)) if r.next_state == NodeState::Failed => {
                Ok(format!("refused with {}", r.error_code.unwrap_or_default()))
            }
            Ok(Some(r)) => Err(format!("answered {} (preflight may only refuse with FAILED)", r.next_state)),
            Ok(None) => Err("passed an intent with amount \"0\"".into()),
            Err(e) => Err(e.to_string()),
        },
    );

    let prepared = match exec.call_prepare(&ctx).await {
        Ok(Prepared::Action(mut p)) => match p.seal() {
            Ok(()) => {
                report.record("prepare", Ok(format!("{} payload, hash {}", p.payload_format, &p.payload_hash[..12])));
                Some(p)
            }
            Err(v) => {
                report.record("prepare", Err(v.to_string()));
                None
            }
        },
        Ok(Prepared::Refused(r)) => {
            report.record("prepare", Err(format!("refused: {:?}", r.error_code)));
            None
        }
        Ok(Prepared::Empty) => {
            report.record("prepare", Err("no action".into()));
            None
        }
        Err(e) => {
            report.record("prepare", Err(e.to_string()));
            None
        }
    };
    let Some(prepared) = prepared else { return report };

    let idem = qtg_core::protocol::idempotency_key(&node_id, 1);
    let first = checked(exec.call_submit(&ctx, &in_window(&prepared, &idem)).await, Method::Submit);
    let first_ref = match &first {
        Ok(r)
            if matches!(r.next_state, NodeState::Submitted | NodeState::Observing | NodeState::Completed)
                && r.provider_ref_id.is_some() =>
        {
            report.record("submit", Ok(format!("{} {}", r.next_state, r.provider_ref_id.as_deref().unwrap_or(""))));
            r.provider_ref_id.clone()
        }
        Ok(r) => {
            report.record("submit", Err(format!("answered {} without a provider_ref_id or success", r.next_state)));
            None
        }
        Err(e) => {
            report.record("submit", Err(e.clone()));
            None
        }
    };
    let Some(first_ref) = first_ref else { return report };

    report.record(
        "repeated submit, same key",
        match checked(exec.call_submit(&ctx, &in_window(&prepared, &idem)).await, Method::Submit) {
            Ok(r) if r.provider_ref_id.as_deref() == Some(first_ref.as_str()) => {
                Ok(format!("same provider_ref_id {first_ref}"))
            }
            Ok(r) => Err(format!(
                "the same idempotency key gave provider_ref_id {:?}, first {first_ref:?}: a repeated submit \
                 executed again",
                r.provider_ref_id
            )),
            Err(e) => Err(e),
        },
    );

    let mut observed = ctx.clone();
    observed.provider_ref_id = Some(first_ref.clone());
    if let Ok(r) = &first {
        observed.provider_refs = serde_json::Value::Object(r.provider_refs.clone());
    }
    let mut outcome = Err("never reached COMPLETED or FAILED in 30 polls".to_string());
    if first.as_ref().is_ok_and(|r| r.next_state == NodeState::Completed) {
        outcome = Ok("completed at submit".into());
    } else {
        for poll in 1..=30 {
            match checked(exec.call_observe(&observed).await, Method::Observe) {
                Ok(r) if matches!(r.next_state, NodeState::Completed | NodeState::Failed) => {
                    outcome = Ok(format!("{} after {poll} poll(s)", r.next_state));
                    break;
                }
                Ok(r) => {
                    if let Value::Object(refs) = &mut observed.provider_refs {
                        refs.extend(r.provider_refs.clone());
                    }
                    let wait = r.retry_after_seconds.unwrap_or(0.5).clamp(0.0, 2.0);
                    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
    }
    report.record("observe until terminal", outcome);

    report.record(
        "recover submitted key",
        match checked(exec.call_recover(&observed, &idem).await, Method::Recover) {
            Ok(r) if r.next_state == NodeState::Failed => Err("recover said FAILED for an order it accepted".into()),
            Ok(r) if r.provider_ref_id.as_deref().is_some_and(|p| p != first_ref) => {
                Err(format!("recover found {:?}, submit gave {first_ref:?}", r.provider_ref_id))
            }
            Ok(r) => Ok(format!("{}", r.next_state)),
            Err(e) => Err(e),
        },
    );
    let unknown_node = uuid::Uuid::new_v4().to_string();
    report.record(
        "recover unknown key",
        match checked(
            exec.call_recover(
                &context(key, &unknown_node, "1.00"),
                &qtg_core::protocol::idempotency_key(&unknown_node, 1),
            )
            .await,
            Method::Recover,
        ) {
            Ok(r) if matches!(r.next_state, NodeState::Failed | NodeState::Unknown) => Ok(format!("{}", r.next_state)),
            Ok(r) => Err(format!("answered {} for a key never submitted (invented evidence)", r.next_state)),
            Err(e) => Err(e),
        },
    );
    fence_checks(&exec, key, &prepared, &mut report).await;
    auth_checks(target, &mut report).await;
    report
}

/// The executor's duties of authentication (docs/executors.md §5), on the Health operation
/// with hand-made requests: a call without credentials is refused; with a v4 signature, the
/// same request sent twice (a replay) and a request signed for another operation are refused.
/// Skipped without credentials, and over TLS (the hand-made client trusts no private CA).
async fn auth_checks(target: &Target, report: &mut Report) {
    if matches!(target.auth, Credentials::None) || target.tls.is_some() {
        return;
    }
    let health = qtg_wire_auth::target(qtg_wire_auth::EXECUTOR_SERVICE, "health");
    let submit = qtg_wire_auth::target(qtg_wire_auth::EXECUTOR_SERVICE, "submit");
    let signed = target.auth.headers(&health, &health_body(target));
    report.record(
        "auth: unsigned refused",
        match raw_health(target, Vec::new()).await {
            Ok(false) => Ok("refused".into()),
            Ok(true) => Err("a call without credentials was answered".into()),
            Err(e) => Err(e),
        },
    );
    if !matches!(target.auth, Credentials::Hmac(_)) {
        return;
    }
    report.record(
        "auth: replay refused",
        match raw_health(target, signed.clone()).await {
            Ok(true) => match raw_health(target, signed).await {
                Ok(false) => Ok("the same signed request twice: refused the second".into()),
                Ok(true) => Err("the same signed request was answered twice (a replay)".into()),
                Err(e) => Err(e),
            },
            Ok(false) => Err("a correctly signed health call was refused; cannot check".into()),
            Err(e) => Err(e),
        },
    );
    report.record(
        "auth: re-target refused",
        match raw_health(target, target.auth.headers(&submit, &health_body(target))).await {
            Ok(false) => Ok("a request signed for Submit, sent to Health: refused".into()),
            Ok(true) => Err("a request signed for another operation was answered".into()),
            Err(e) => Err(e),
        },
    );
}

/// The bytes a health call's signature covers: none over HTTP (a GET), the request's
/// canonical JSON over gRPC.
fn health_body(target: &Target) -> Vec<u8> {
    match target.transport {
        Transport::Http => Vec::new(),
        Transport::Grpc => qtg_wire_auth::grpc_signed_bytes(&health_request(target)),
    }
}

fn health_request(target: &Target) -> qtg_proto::executor::v1::HealthRequest {
    qtg_proto::executor::v1::HealthRequest { executor_key: target.executor_key.clone() }
}

/// One Health call with exactly `headers`: `Ok(true)` answered, `Ok(false)` refused as
/// unauthenticated.
async fn raw_health(target: &Target, headers: Vec<(&'static str, String)>) -> Result<bool, String> {
    match target.transport {
        Transport::Http => {
            qtg_executor::remote::install_tls_provider();
            let client =
                reqwest::Client::builder().no_proxy().timeout(target.timeout).build().map_err(|e| e.to_string())?;
            let mut req = client.get(format!("{}/health", target.endpoint.trim_end_matches('/')));
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let status = req.send().await.map_err(|e| format!("health: {e}"))?.status();
            Ok(status.as_u16() != 401 && status.as_u16() != 403)
        }
        Transport::Grpc => {
            use qtg_proto::executor::v1::executor_service_client::ExecutorServiceClient;
            let channel = tonic::transport::Channel::from_shared(target.endpoint.clone())
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let mut req = tonic::Request::new(health_request(target));
            for (k, v) in headers {
                if let Ok(v) = v.parse() {
                    req.metadata_mut().insert(k, v);
                }
            }
            match ExecutorServiceClient::new(channel).health(req).await {
                Ok(_) => Ok(true),
                Err(s) if s.code() == tonic::Code::Unauthenticated => Ok(false),
                Err(s) => Err(format!("health: {s}")),
            }
        }
    }
}

/// The executor's duties of the fence, each on a node of its own.
async fn fence_checks(exec: &RemoteExecutor, key: &str, prepared: &qtg_core::PreparedAction, report: &mut Report) {
    let refused = |r: Result<ExecutionResult, String>, what: &str| match r {
        Ok(r) if r.next_state == NodeState::Failed => Ok(format!("refused: {}", r.error_code.unwrap_or_default())),
        Ok(r) => Err(format!("{what}: answered {} (must be refused with FAILED)", r.next_state)),
        Err(e) => Err(e),
    };
    let node_ctx = |attempt: i32| {
        let node = uuid::Uuid::new_v4().to_string();
        let mut ctx = context(key, &node, "1.00");
        ctx.attempt_no = attempt;
        (qtg_core::protocol::idempotency_key(&node, attempt), ctx)
    };

    // Recover FAILED on a key never sent voids it: a later Submit with it is refused.
    let (idem, ctx) = node_ctx(1);
    let voided = checked(exec.call_recover(&ctx, &idem).await, Method::Recover);
    report.record(
        "void key refused",
        match voided {
            Ok(r) if r.next_state == NodeState::Failed => refused(
                checked(exec.call_submit(&ctx, &in_window(prepared, &idem)).await, Method::Submit),
                "a Submit with a key Recover answered FAILED for",
            ),
            Ok(r) => {
                Err(format!("recover of a key never sent answered {} (expected FAILED, voiding it)", r.next_state))
            }
            Err(e) => Err(e),
        },
    );

    // A Submit received after submit_by is refused, and leaves nothing at the venue.
    let (idem, ctx) = node_ctx(1);
    let late = qtg_executor::Submission {
        prepared,
        signed: None,
        idempotency_key: &idem,
        submit_by: chrono::Utc::now() - chrono::Duration::seconds(10),
    };
    let answer = refused(checked(exec.call_submit(&ctx, &late).await, Method::Submit), "a Submit past its submit_by");
    let after = match answer {
        Ok(ok) => match checked(exec.call_recover(&ctx, &idem).await, Method::Recover) {
            Ok(r) if r.next_state == NodeState::Failed => Ok(ok),
            Ok(r) => {
                Err(format!("recover after a refused late submit answered {}: did it reach the venue?", r.next_state))
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    report.record("late submit_by refused", after);

    // Once attempt 2 of a node was seen, attempt 1 is refused.
    let (idem2, ctx2) = node_ctx(2);
    let node = ctx2.request_node_id.clone();
    let mut ctx1 = ctx2.clone();
    ctx1.attempt_no = 1;
    let idem1 = qtg_core::protocol::idempotency_key(&node, 1);
    let (_, ctx) = node_ctx(1);
    report.record("executed key keeps outcome", seen_key_check(exec, prepared, &ctx).await);

    report.record(
        "older attempt refused",
        match checked(exec.call_submit(&ctx2, &in_window(prepared, &idem2)).await, Method::Submit) {
            Ok(r) if r.next_state != NodeState::Failed => refused(
                checked(exec.call_submit(&ctx1, &in_window(prepared, &idem1)).await, Method::Submit),
                "attempt 1 after attempt 2",
            ),
            Ok(r) => Err(format!("attempt 2 was refused ({:?}); cannot check", r.error_code)),
            Err(e) => Err(e),
        },
    );
}

/// A key already executed keeps its outcome, whatever `submit_by` or newer attempts say.
async fn seen_key_check(
    exec: &RemoteExecutor,
    prepared: &qtg_core::PreparedAction,
    ctx1: &ExecutionContext,
) -> Result<String, String> {
    let node = ctx1.request_node_id.clone();
    let idem1 = qtg_core::protocol::idempotency_key(&node, 1);
    let first = checked(exec.call_submit(ctx1, &in_window(prepared, &idem1)).await, Method::Submit)?;
    let Some(original) = first.provider_ref_id.clone().filter(|_| first.next_state != NodeState::Failed) else {
        return Err(format!("attempt 1 was not executed ({} {:?}); cannot check", first.next_state, first.error_code));
    };
    let same = |r: ExecutionResult, when: &str| -> Result<(), String> {
        if r.next_state == NodeState::Failed {
            return Err(format!(
                "answered FAILED ({}) for a key it executed, replayed {when}: FAILED means nothing happened, \
                 and an operator retry would pay twice",
                r.error_code.unwrap_or_default()
            ));
        }
        match r.provider_ref_id {
            Some(p) if p == original => Ok(()),
            other => Err(format!("replayed {when}, answered provider_ref_id {other:?}, the original was {original:?}")),
        }
    };
    let late = qtg_executor::Submission {
        prepared,
        signed: None,
        idempotency_key: &idem1,
        submit_by: chrono::Utc::now() - chrono::Duration::seconds(10),
    };
    same(checked(exec.call_submit(ctx1, &late).await, Method::Submit)?, "after its submit_by")?;
    let mut ctx2 = ctx1.clone();
    ctx2.attempt_no = 2;
    let idem2 = qtg_core::protocol::idempotency_key(&node, 2);
    let second = checked(exec.call_submit(&ctx2, &in_window(prepared, &idem2)).await, Method::Submit)?;
    if second.next_state == NodeState::Failed {
        return Err(format!("attempt 2 was refused ({:?}); cannot check", second.error_code));
    }
    same(checked(exec.call_submit(ctx1, &in_window(prepared, &idem1)).await, Method::Submit)?, "after attempt 2")?;
    let mut observed = ctx1.clone();
    observed.provider_ref_id = Some(original.clone());
    match checked(exec.call_recover(&observed, &idem1).await, Method::Recover)? {
        r if r.next_state == NodeState::Failed => {
            Err(format!("recover of the executed key answered FAILED ({:?})", r.error_code))
        }
        _ => Ok(format!("replayed late and after attempt 2: the original order {original}")),
    }
}

/// A submission of `prepared` with key `idem` whose `submit_by` is a minute away.
fn in_window<'a>(prepared: &'a qtg_core::PreparedAction, idem: &'a str) -> qtg_executor::Submission<'a> {
    qtg_executor::Submission {
        prepared,
        signed: None,
        idempotency_key: idem,
        submit_by: chrono::Utc::now() + chrono::Duration::seconds(60),
    }
}
