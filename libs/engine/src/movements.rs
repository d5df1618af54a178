//! The movement operations the API performs: create (idempotent), approve (four-eyes, the
//! availability gate, frontier activation), reject, read.

use std::time::Duration;

use qtg_core::hash::canonical_hash;
use qtg_core::risk::{Amount, RiskLimits, RiskViolation};
use qtg_core::{NodeState, RequestState};
use qtg_store::audit::{self, AuditRecord};
use qtg_store::movements::{self as mq, Created, NewMovement};
use qtg_store::transition::{self, Meta, NodePatch, RequestPatch};
use qtg_store::{claims, templates as tq, NodeRow, RequestRow, StoreError};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::advance::apply_request_state;
use crate::policy::Decided;
use crate::Engine;

/// Why an operation was refused; the API maps each to a status and code.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    InvalidState(String),
    #[error("{0}")]
    SelfApproval(String),
    #[error("idempotency_key was already used with a different body")]
    IdempotencyConflict,
    #[error("bound executors or signers are down: {0:?}")]
    ExecutorDown(Vec<String>),
    /// Strict gate: a bound executor or signer whose health is unknown or never checked.
    #[error("bound executors or signers have no known health: {0:?}")]
    ExecutorHealthUnknown(Vec<String>),
    /// Strict gate: a bound executor or signer last checked too long ago.
    #[error("the health of bound executors or signers is stale: {0:?}")]
    ExecutorHealthStale(Vec<String>),
    #[error("{0}")]
    Conflict(String),
    /// A submit attempt may have reached the venue; only recovery decides it.
    #[error("{0}")]
    SubmitAttemptPending(String),
    /// A risk limit refuses the movement.
    #[error("{}", .0.message)]
    Risk(RiskViolation),
    /// The source's latest fresh-enough balance snapshot holds less than the amount.
    #[error("{0}")]
    InsufficientBalance(String),
    /// The approval policy refuses: `code` is POLICY_BLOCKED, POLICY_NOT_APPROVER or
    /// ADDRESS_NOT_IN_BOOK.
    #[error("{message}")]
    Policy { code: &'static str, message: String },
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Busy(what) => OpError::Conflict(format!("{what} is being changed by another operation; retry")),
            StoreError::StaleState { entity, expected, .. } => {
                OpError::Conflict(format!("{entity} is no longer {expected}"))
            }
            other => OpError::Store(other),
        }
    }
}

impl From<sqlx::Error> for OpError {
    fn from(e: sqlx::Error) -> Self {
        OpError::Store(e.into())
    }
}

pub struct NewMovementInput {
    pub template_key: String,
    pub template_version: Option<i32>,
    pub intent: Value,
    pub input_params: Value,
    pub callback_url: Option<String>,
    /// The movement's own callback signing secret (else the global one).
    pub callback_secret: Option<String>,
    /// How its callbacks are signed (`v3`, `standard_webhooks`); none = the deployment's default.
    pub callback_signature: Option<String>,
    pub idempotency_key: String,
    /// sha256 of the request body's canonical JSON.
    pub body_hash: String,
    /// The requester's role (an approval policy's rules may name roles).
    pub created_by_role: Option<String>,
}

impl Engine {
    /// Each action node's executor checks the intent it will be given (`Executor::check_intent`):
    /// what no approval could make payable is refused now, naming the node.
    pub(crate) fn check_intent(&self, plan: &qtg_core::PlanDefinition, intent: &Value) -> Result<(), OpError> {
        for n in plan.nodes.iter().filter(|n| n.node_kind != qtg_core::NodeKind::Manual) {
            if let Some(entry) = self.registry.executor(&n.executor_key) {
                entry
                    .executor
                    .check_intent(&n.config, &plan.risk_controls, intent)
                    .map_err(|e| OpError::Validation(format!("node {}: {e}", n.node_key)))?;
            }
        }
        Ok(())
    }

    /// Creates a movement (PENDING_APPROVAL, nodes BLOCKED) or returns the one this principal
    /// created with the same idempotency key and body (`false`).
    pub async fn create_movement(
        &self,
        actor: &str,
        input: NewMovementInput,
        ttl: Duration,
    ) -> Result<(RequestRow, bool), OpError> {
        let mut tx = self.pool.begin().await?;
        let pv = tq::plan_version(&mut tx, &input.template_key, input.template_version)
            .await?
            .ok_or(OpError::NotFound("template (version)"))?;
        refuse_retired(&pv)?;
        let intent_hash = canonical_hash(&input.intent);
        let (limits, amount) = self.risk_limits(&pv.plan.risk_controls, &input.intent)?;
        self.check_intent(&pv.plan, &input.intent)?;
        let source = self.paying_source(&pv.plan, input.intent.get("source").and_then(Value::as_str))?;
        let mut approvals_required = limits.approvals_needed(&amount) as i32;
        // The approval policy in force and the address book decide a new movement; a retry of
        // one already created (same key and body) answers it whatever they say now.
        let book_refusal = match self.check_book(&mut tx, &pv.plan, &input.intent).await {
            Ok(()) => None,
            Err(OpError::Store(e)) => return finish(tx, Err(OpError::Store(e))).await,
            Err(e) => Some(e),
        };
        let facts = crate::policy::Facts {
            template_key: &pv.template_key,
            plan: &pv.plan,
            intent: &input.intent,
            requester: actor,
            requester_role: input.created_by_role.as_deref(),
            at: chrono::Utc::now(),
            policy_at: None,
        };
        let decided = match self.policy_decision(&mut tx, &facts).await {
            Ok(d) => d,
            Err(e) => return finish(tx, Err(e)).await,
        };
        let policy_refusal = decided.as_ref().and_then(Decided::refusal);
        if let Some(d) = &decided {
            let seats: u32 = d.decision.groups().iter().map(|g| g.min).sum();
            approvals_required = approvals_required.max(seats as i32);
        }
        let lanes: Vec<&'static str> =
            pv.nodes.iter().map(|(_, n)| self.registry.lane(&n.executor_key).as_str()).collect();
        let nodes: Vec<_> = pv
            .nodes
            .iter()
            .zip(&lanes)
            .map(|((id, n), lane)| (*id, n.node_key.as_str(), n.node_kind.as_str(), *lane))
            .collect();
        // Random (v4), unlike the rows a step inserts (migration 0034): people quote a movement
        // by the first characters of its id, which in a time-ordered id would be the minute
        // it was made in, shared by its neighbours.
        let id = Uuid::new_v4();
        let created = mq::insert(
            &mut tx,
            &NewMovement {
                id,
                template_id: pv.template_id,
                plan_version_id: pv.plan_version_id,
                template_key: &pv.template_key,
                template_version: pv.version,
                compiled_plan_hash: &pv.compiled_plan_hash,
                intent: &input.intent,
                intent_hash: &intent_hash,
                input_params: &input.input_params,
                created_by: actor,
                idempotency_key: &input.idempotency_key,
                body_hash: &input.body_hash,
                callback_url: input.callback_url.as_deref(),
                callback_secret: input.callback_secret.as_deref(),
                // Recorded at creation (the deployment's scheme when the request named none), so
                // a later change of the default does not change how this movement is signed.
                callback_signature: Some(
                    input.callback_signature.as_deref().unwrap_or(self.settings.callbacks.signature.as_str()),
                ),
                ttl_seconds: ttl.as_secs_f64(),
                approvals_required,
            },
            &nodes,
        )
        .await?;
        let (id, fresh) = match created {
            Created::New(id) => {
                if let Some(e) = book_refusal {
                    return finish(tx, Err(e)).await;
                }
                if let (Some(e), Some(d)) = (policy_refusal, &decided) {
                    tracing::warn!(actor, template = %pv.template_key, version = d.version, rule = %d.decision.rule,
                        "the approval policy blocked a movement");
                    return finish(tx, Err(e)).await;
                }
                if let Err(e) = self.check_risk(&mut tx, &limits, &amount, &input.intent, id).await {
                    return finish(tx, Err(e)).await;
                }
                if let Err(e) =
                    self.check_source_balance(&mut tx, &pv.plan.risk_controls, source.as_deref(), &input.intent).await
                {
                    return finish(tx, Err(e)).await;
                }
                self.record_decision(&mut tx, id, decided.as_ref(), input.created_by_role.as_deref()).await?;
                audit::record(
                    &mut tx,
                    &AuditRecord {
                        actor,
                        action: "movement.create",
                        entity_type: "movement",
                        entity_id: id.to_string(),
                        movement_id: Some(id),
                        data: json!({"template_key": pv.template_key, "template_version": pv.version,
                                 "intent_hash": intent_hash, "idempotency_key": input.idempotency_key,
                                 "policy_version": decided.as_ref().map(|d| d.version),
                                 "policy_rule": decided.as_ref().map(|d| d.decision.rule.clone())}),
                    },
                )
                .await?;
                (id, true)
            }
            Created::Existing { id, body_hash } => {
                if body_hash != input.body_hash {
                    return Err(OpError::IdempotencyConflict);
                }
                (id, false)
            }
        };
        let row = mq::get(&mut tx, id).await?.ok_or(OpError::NotFound("movement"))?;
        tx.commit().await?;
        Ok((row, fresh))
    }

    /// The limits a movement already created is held to: its own version's and, when a newer
    /// version of its template exists, that one's too — the stricter of both.
    pub(crate) async fn movement_limits(
        &self,
        conn: &mut sqlx::PgConnection,
        id: Uuid,
        own_controls: &Value,
        intent: &Value,
    ) -> Result<(RiskLimits, Amount), OpError> {
        let (limits, amount) = self.risk_limits(own_controls, intent)?;
        let Some((version, current)) = tq::current_risk_controls(conn, id).await? else {
            return Ok((limits, amount));
        };
        if &current == own_controls {
            return Ok((limits, amount));
        }
        let asset = intent.get("asset").and_then(Value::as_str).unwrap_or("");
        let newer = RiskLimits::for_asset(&current, asset)
            .map_err(|e| OpError::Validation(format!("risk_controls of the template's version {version}: {e}")))?;
        Ok((limits.stricter(&newer), amount))
    }

    /// The limits that apply to a movement of `intent` under a plan's `risk_controls` (the
    /// stricter of the template's and the global ones), and its amount.
    pub(crate) fn risk_limits(&self, controls: &Value, intent: &Value) -> Result<(RiskLimits, Amount), OpError> {
        let asset = intent.get("asset").and_then(Value::as_str).unwrap_or("");
        let limits = RiskLimits::for_asset(controls, asset)
            .map_err(|e| OpError::Validation(format!("template risk_controls: {e}")))?
            .stricter(&self.settings.risk);
        let amount = intent
            .get("amount")
            .and_then(Value::as_str)
            .and_then(Amount::parse)
            .ok_or_else(|| OpError::Validation("intent.amount must be a decimal string greater than 0".into()))?;
        Ok((limits, amount))
    }

    /// The approval gate: bound executors and signers known to be down always refuse; under
    /// the strict gate (the default of every process) so do unknown, never-seen and stale
    /// ones — an approval fails closed.
    async fn health_gate(
        &self,
        conn: &mut sqlx::PgConnection,
        executor_keys: &[String],
        signer_keys: &[String],
    ) -> Result<(), OpError> {
        let stale = self.settings.health_stale.as_secs_f64();
        let unhealthy = mq::unhealthy_bindings(conn, executor_keys, signer_keys, stale).await?;
        let of = |why: &[&str]| -> Vec<String> {
            unhealthy.iter().filter(|(_, w)| why.contains(&w.as_str())).map(|(k, w)| format!("{k} ({w})")).collect()
        };
        let down = of(&["down"]);
        if !down.is_empty() {
            return Err(OpError::ExecutorDown(down));
        }
        if self.settings.approval_health_gate == crate::HealthGate::DownOnly {
            return Ok(());
        }
        let unknown = of(&["unknown", "missing"]);
        if !unknown.is_empty() {
            return Err(OpError::ExecutorHealthUnknown(unknown));
        }
        let stale = of(&["stale"]);
        if !stale.is_empty() {
            return Err(OpError::ExecutorHealthStale(stale));
        }
        Ok(())
    }

    /// Every limit against this movement `id` (hard cap, destination, each velocity window).
    /// Velocity checks of one bucket are serialised by a transaction-scoped lock. A refusal is
    /// logged with who tried what (the refused request itself leaves nothing behind).
    pub(crate) async fn check_risk(
        &self,
        tx: &mut sqlx::PgConnection,
        limits: &RiskLimits,
        amount: &Amount,
        intent: &Value,
        id: Uuid,
    ) -> Result<(), OpError> {
        let refuse = |v: RiskViolation| {
            tracing::warn!(movement_id = %id, limit = v.limit, reason = %v.message, "risk limit refused the movement");
            OpError::Risk(v)
        };
        limits.check_static(amount, intent).map_err(refuse)?;
        if limits.velocity.is_empty() {
            return Ok(());
        }
        mq::lock_velocity(tx, intent).await?;
        for v in &limits.velocity {
            let used = mq::velocity_used(tx, intent, v.window_seconds, id).await?;
            // Fail closed: a sum that does not parse must never read as zero.
            let used = Amount::parse_any(&used).ok_or_else(|| {
                OpError::Store(StoreError::Corrupt(format!("velocity sum {used:?} is not a decimal")))
            })?;
            RiskLimits::check_velocity(v, amount, &used).map_err(refuse)?;
        }
        Ok(())
    }

    pub async fn movement(&self, id: Uuid) -> Result<(RequestRow, Vec<NodeRow>), OpError> {
        let mut conn = self.pool.acquire().await?;
        let row = mq::get(&mut conn, id).await?.ok_or(OpError::NotFound("movement"))?;
        let nodes = mq::nodes(&mut conn, id).await?;
        Ok((row, nodes))
    }

    /// Records `actor`'s approval of a PENDING_APPROVAL movement with the intent and plan
    /// hashes they saw, after the risk limits pass again. When the movement has the distinct
    /// approvals it needs (m-of-n), approves it: roots READY, re-derived. Returns whether it
    /// is now approved.
    pub async fn approve_movement(
        &self,
        actor: &str,
        actor_role: &str,
        id: Uuid,
        reason: Option<&str>,
    ) -> Result<bool, OpError> {
        let mut tx = self.pool.begin().await?;
        let res: Result<_, OpError> = async {
            let state = claims::lock_request_nowait(&mut tx, id).await?.ok_or(OpError::NotFound("movement"))?;
            let row = mq::get(&mut tx, id).await?.ok_or(OpError::NotFound("movement"))?;
            if state != RequestState::PendingApproval {
                return Err(OpError::InvalidState(format!("movement is {state}, not PENDING_APPROVAL")));
            }
            if row.expired {
                return Err(OpError::InvalidState("movement approval window has expired".into()));
            }
            // One identity whatever the case it is written in.
            if qtg_core::text::same_principal(&row.created_by, actor) {
                return Err(OpError::SelfApproval("nobody approves a movement they created".into()));
            }
            let pv = tq::plan_version(&mut tx, &row.template_key, Some(row.template_version))
                .await?
                .ok_or(OpError::NotFound("template version"))?;
            let executor_keys: Vec<String> = pv.plan.nodes.iter().map(|n| n.executor_key.clone()).collect();
            let signer_keys: Vec<String> = pv.plan.nodes.iter().filter_map(|n| n.signer_key.clone()).collect();
            self.health_gate(&mut tx, &executor_keys, &signer_keys).await?;
            let (limits, amount) = self.movement_limits(&mut tx, id, &pv.plan.risk_controls, &row.intent).await?;
            self.check_risk(&mut tx, &limits, &amount, &row.intent, id).await?;
            let needed = row.approvals_required.max(limits.approvals_needed(&amount) as i32);
            // Distinct approvers are distinct people: not one principal in two spellings.
            let given = mq::approvals(&mut tx, id).await?;
            let already = given.iter().any(|a| qtg_core::text::same_principal(&a.approver, actor));
            if already {
                return Err(OpError::Conflict(format!("{actor} has already approved this movement")));
            }
            // The policy in force now: it may block; the approver must fill a seat it still needs.
            // And the address book, read now (an entry removed since creation no longer covers it).
            self.check_book(&mut tx, &pv.plan, &row.intent).await?;
            let policy = self.policy_at_approval(&mut tx, &row, &pv.plan, actor, actor_role, &given, needed).await?;
            if let Some((decided, _)) = &policy {
                if row.policy_version != Some(decided.version)
                    || row.policy_rule.as_deref() != Some(&decided.decision.rule)
                {
                    self.record_decision(&mut tx, id, Some(decided), None).await?;
                }
            }
            let needed = match &policy {
                Some((d, _)) => needed.max(d.decision.groups().iter().map(|g| g.min as i32).sum()),
                None => needed,
            };
            if needed > row.approvals_required {
                mq::raise_approvals_required(&mut tx, id, needed).await?;
            }
            if !mq::add_approval(&mut tx, id, actor, Some(actor_role), reason).await? {
                return Err(OpError::Conflict(format!("{actor} has already approved this movement")));
            }
            // The row just added, under the movement's lock.
            let have = given.len() as i32 + 1;
            let policy_met = policy.as_ref().is_none_or(|(_, satisfied)| *satisfied);
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor,
                    action: "movement.approval",
                    entity_type: "movement",
                    entity_id: id.to_string(),
                    movement_id: Some(id),
                    data: json!({"intent_hash": row.intent_hash, "plan_hash": row.compiled_plan_hash,
                                 "approvals": have, "approvals_required": needed, "reason": reason,
                                 "approver_role": actor_role,
                                 "policy_version": policy.as_ref().map(|(d, _)| d.version),
                                 "policy_rule": policy.as_ref().map(|(d, _)| d.decision.rule.clone()),
                                 "policy_satisfied": policy.as_ref().map(|(_, s)| *s)}),
                },
            )
            .await?;
            if have < needed || !policy_met {
                return Ok(false);
            }
            let meta = Meta { actor, reason };
            let patch = RequestPatch {
                approval_status: Some("approved"),
                approved_by: Some(actor.to_string()),
                ..Default::default()
            };
            transition::transition_request(&mut tx, id, state, RequestState::Approved, &patch, &meta)
                .await?
                .or_stale()?;
            let nodes = mq::nodes(&mut tx, id).await?;
            let roots: Vec<String> = pv.plan.roots().into_iter().map(String::from).collect();
            for n in nodes.iter().filter(|n| roots.contains(&n.node_key) && n.node_state == NodeState::Blocked) {
                transition::transition_node(
                    &mut tx,
                    n.id,
                    NodeState::Blocked,
                    NodeState::Ready,
                    &NodePatch::default(),
                    &meta,
                )
                .await?
                .or_stale()?;
            }
            transition::set_frontier(&mut tx, id, &roots).await?;
            apply_request_state(&mut tx, id, actor).await?;

            Ok(true)
        }
        .await;
        finish(tx, res).await
    }

    pub async fn reject_movement(&self, actor: &str, id: Uuid, reason: Option<&str>) -> Result<(), OpError> {
        let mut tx = self.pool.begin().await?;
        let res: Result<_, OpError> = async {
            let state = claims::lock_request_nowait(&mut tx, id).await?.ok_or(OpError::NotFound("movement"))?;
            if state != RequestState::PendingApproval {
                return Err(OpError::InvalidState(format!("movement is {state}, not PENDING_APPROVAL")));
            }
            let patch = RequestPatch {
                approval_status: Some("rejected"),
                review_reason: reason.map(String::from),
                ..Default::default()
            };
            let meta = Meta { actor, reason };
            transition::transition_request(&mut tx, id, state, RequestState::Rejected, &patch, &meta)
                .await?
                .or_stale()?;

            Ok(())
        }
        .await;
        finish(tx, res).await
    }
}

/// Ends an operation's transaction: commit on success; on failure roll back now, so no row
/// lock outlives the refused request (a dropped transaction would only roll back when its
/// connection is next used).
pub(crate) async fn finish<T>(
    tx: sqlx::Transaction<'_, sqlx::Postgres>,
    res: Result<T, OpError>,
) -> Result<T, OpError> {
    match res {
        Ok(v) => {
            tx.commit().await?;
            Ok(v)
        }
        Err(e) => {
            if let Err(rb) = tx.rollback().await {
                tracing::warn!(error = %rb, "rollback after a refused operation failed");
            }
            Err(e)
        }
    }
}

/// A retired version takes no new movement or capital transfer.
pub(crate) fn refuse_retired(pv: &tq::PlanVersion) -> Result<(), OpError> {
    match pv.retired_at {
        Some(at) => Err(OpError::InvalidState(format!(
            "template {} version {} was retired at {}: it takes no new movement; use the current version",
            pv.template_key,
            pv.version,
            at.to_rfc3339()
        ))),
        None => Ok(()),
    }
}
