//! node_dispatcher: READY → PREPARING → (AWAITING_SIGNATURE) → SUBMITTING → submit → result,
//! leased (docs/architecture.md §6, "The lease and the fence"). No transaction, row lock or
//! pooled connection is held while an executor or signer call is in flight:
//!
//! 1. *Claim* (a short transaction, or the predecessor's record — step 6): READY — or
//!    PREPARING / AWAITING_SIGNATURE whose lease expired, with a node event — → PREPARING
//!    with a fresh `claim_token` and `lease_expires_at`; the request APPROVED → EXECUTING; the
//!    execution context is built.
//! 2. *Calls*, outside any transaction: preflight, prepare (and a compare-and-set to
//!    AWAITING_SIGNATURE), sign.
//! 3. *Arm*: compare-and-set on (state, `claim_token`, `attempt_no` = N − 1, request
//!    EXECUTING, no pause) → SUBMITTING with N, the `__submit_attempt_*` markers,
//!    `started_at` and `submit_by = started_at + submit_window`, the prepared artifact and
//!    the call events. No row matched, or the commit failed: nothing is sent.
//! 4. *Submit*, outside any transaction, started only while less than `submit_window` minus
//!    the skew margin has passed since the arm statement was sent; it carries `submit_by`.
//! 5. *Record*: compare-and-set on (`attempt_no` = N, SUBMITTING or UNKNOWN, marker), then the
//!    request lock, apply, advance, derive. Otherwise a node event — or `__late_effect` when
//!    a non-FAILED answer finds the node FAILED or CANCELLED.
//! 6. *Hand-off*: a record that completes the node claims its first activated successor in
//!    the same transaction (step 1's claim, as a savepoint), and the tick goes on with it.
//!
//! A crash before the arm leaves the node PREPARING until its lease expires; after it,
//! recovery finds the marker once `submit_by` plus the skew margin has passed.

use chrono::{DateTime, Utc};
use rand::Rng;
use std::sync::Arc;
use std::time::Instant;

use qtg_core::protocol::{idempotency_key, Method};
use qtg_core::{codes, ExecutionContext, ExecutionResult, NodeState, PreparedAction, RequestState, SignRequest};
use qtg_executor::{Executor, ExecutorError, Prepared, SignError, SignerRequirement, Submission};
use qtg_store::artifacts::ArtifactKind;
use qtg_store::claims::{self, Pickup};
use qtg_store::events::{record_calls, Call};
use qtg_store::transition::{self, Cas, Guard, Lease, Meta, MovementEvent, NewArtifact, NodePatch, RequestPatch};
use qtg_store::{PgConnection, StoreError, WorkItem};
use serde_json::json;
use tracing::Instrument;
use uuid::Uuid;

use crate::advance::{activate, apply_request_state, apply_result, Answer, HandOff};
use crate::calls::{self, with_deadline};
use crate::context::{build_execution_context, ContextError};
use crate::{Engine, Result};

/// How many READY candidates one claim pass lists.
const CANDIDATE_SCAN: i64 = 16;

/// A node this dispatcher holds the lease of, with everything its calls need.
struct Claimed {
    item: WorkItem,
    token: Uuid,
    /// The attempt being prepared (stored + 1).
    attempt_no: i32,
    executor: Arc<dyn Executor>,
    ctx: ExecutionContext,
}

enum Claim {
    /// No node claimed; `missed`: some candidates were there, locked by another claim.
    Nothing {
        missed: bool,
    },
    /// Claimed and ended in the claim transaction (drift, unknown executor…).
    Ended,
    Held(Box<Claimed>, tracing::Span),
}

/// How soon a dispatch loop tries again when every candidate it saw was locked by another
/// claim (the claim locks the movement row too, so a fan-out's branches are claimed one at a
/// time): a claim transaction is short and the work it hid is still there, so the loop does
/// not wait for the interval (2 s) or a wake-up that may never come. The run loop's shortest
/// pause (100 ms) bounds it.
pub const RETRY_AFTER_MISS: std::time::Duration = std::time::Duration::from_millis(100);

/// How many nodes one dispatch tick runs through hand-offs at most: a loop stays in a chain of
/// steps that complete at submit for a bounded time (a shutdown waits for the tick in hand);
/// past it, the record wakes the dispatchers for the successor instead.
pub const HAND_OFF_LIMIT: usize = 8;

/// What one dispatch tick did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatched {
    /// Nodes claimed: 0, 1, or more when records handed their successors on.
    pub claimed: usize,
    /// Nothing claimed but candidates were locked by other claims: try again this soon.
    pub retry_in: Option<std::time::Duration>,
}

impl Engine {
    /// Dispatches one node, and the successors handed on to it: a node whose submit completes
    /// it claims its first activated successor in the same transaction (see
    /// [`Engine::record_submit`]), and the tick goes on with that one. Returns how many nodes
    /// it claimed (0 when it found none).
    pub async fn dispatch_tick(&self) -> Result<usize> {
        Ok(self.dispatch().await?.claimed)
    }

    /// [`Engine::dispatch_tick`], telling also when to try again after a miss.
    pub async fn dispatch(&self) -> Result<Dispatched> {
        let mut claim = match self.claim_for_dispatch().await? {
            Claim::Nothing { missed } => {
                return Ok(Dispatched { claimed: 0, retry_in: missed.then_some(RETRY_AFTER_MISS) })
            }
            claim => claim,
        };
        let mut claimed = 1;
        while let Claim::Held(c, span) = claim {
            let node_id = c.item.node_id;
            let hand_off = claimed < HAND_OFF_LIMIT && !self.shutdown.is_cancelled();
            claim = match self.run_claimed(*c, hand_off).instrument(span).await {
                Ok(Some(next)) => {
                    claimed += 1;
                    next
                }
                Ok(None) => break,
                Err(e) => {
                    self.contain(node_id, "claim", e).await?;
                    break;
                }
            };
        }
        Ok(Dispatched { claimed, retry_in: None })
    }

    /// The claim: one short transaction. Candidates are listed outside it (an idle tick is
    /// one statement); nodes this process just made READY are tried first, without a list.
    async fn claim_for_dispatch(&self) -> Result<Claim> {
        let served = self.served_keys();
        let mut tried: Vec<Uuid> = Vec::new();
        let mut hinted = crate::hints::take();
        loop {
            let ids = if hinted.is_empty() {
                let mut conn = self.pool.acquire().await?;
                claims::candidates(&mut conn, Pickup::Dispatch, &served, &tried, CANDIDATE_SCAN).await?
            } else {
                std::mem::take(&mut hinted)
            };
            if ids.is_empty() {
                return Ok(Claim::Nothing { missed: !tried.is_empty() });
            }
            let mut queue = std::collections::VecDeque::from(ids);
            while let Some(id) = queue.pop_front() {
                let mut tx = self.pool.begin().await?;
                match claims::claim_first(&mut tx, Pickup::Dispatch, &served, id).await? {
                    Some(item) => {
                        let node_id = item.node_id;
                        let committed = match self.claimed(&mut tx, item, None).await {
                            Ok(claim) => tx.commit().await.map(|()| claim).map_err(StoreError::from),
                            Err(e) => {
                                drop(tx);
                                Err(e)
                            }
                        };
                        return match committed {
                            Ok(claim) => {
                                announce(&claim);
                                Ok(claim)
                            }
                            // Rolled back; the node is held back, not claimed again at once.
                            Err(e) => self.contain(node_id, "claim", e).await.map(|()| Claim::Ended),
                        };
                    }
                    None => {
                        tx.rollback().await?;
                        tried.push(id);
                        // Another loop holds it (or took it since the listing), and is likely
                        // going down the same list: go on from a random place in it rather than
                        // collide again on every next candidate.
                        if queue.len() > 1 {
                            let k = rand::rng().random_range(0..queue.len());
                            queue.rotate_left(k);
                        }
                    }
                }
            }
        }
    }

    /// The rest of the claim, in `tx`'s transaction, under the step's span (the caller commits;
    /// on an error it rolls back). `activation`: the item is a successor handed on still
    /// BLOCKED ([`crate::advance::HandOff`]), written READY (with this event) and PREPARING at once.
    async fn claimed(
        &self,
        tx: &mut PgConnection,
        item: WorkItem,
        activation: Option<&MovementEvent>,
    ) -> Result<Claim> {
        // One trace per node step: claim, calls, arm, submit and record.
        let span = crate::step_span("dispatch", &item, item.attempt_no + 1);
        self.claimed_in(tx, item, activation, span.clone()).instrument(span).await
    }

    async fn claimed_in(
        &self,
        tx: &mut PgConnection,
        item: WorkItem,
        activation: Option<&MovementEvent>,
        span: tracing::Span,
    ) -> Result<Claim> {
        let meta = Meta::actor(&self.actor);
        let token = Uuid::new_v4();
        let attempt_no = item.attempt_no + 1;
        let lease =
            NodePatch { lease: Some(Lease { token, expires_in: Some(self.settings.lease) }), ..Default::default() };
        match (item.node_state, activation) {
            (NodeState::Blocked, Some(event)) => {
                let patch = NodePatch { movement_event: Some(event.clone()), ..lease };
                let hops = (NodeState::Blocked, NodeState::Ready, NodeState::Preparing);
                transition::transition_node_via(&mut *tx, item.node_id, hops, &patch, &meta)
                    .await?
                    // The claim holds the node's row lock and the record the movement's.
                    .or_stale()?;
            }
            (NodeState::Ready, None) => {
                transition::transition_node(
                    &mut *tx,
                    item.node_id,
                    NodeState::Ready,
                    NodeState::Preparing,
                    &lease,
                    &meta,
                )
                .await?
                // The claim holds the node's row lock: nobody else moved it.
                .or_stale()?;
            }
            (expired @ (NodeState::Preparing | NodeState::AwaitingSignature), None) => {
                // Its dispatcher died or froze before arming: nothing was sent for attempt N.
                tracing::warn!(node_id = %item.node_id, node_key = %item.node_key, state = %expired,
                    "lease expired before the arm; re-claiming the node");
                let detail = format!("the lease of a {expired} node expired before it was armed; re-claimed");
                let call = Call::failed("claim", "lease_expired", codes::LEASE_EXPIRED, &detail, 0);
                record_calls(&mut *tx, item.request_id, item.node_id, attempt_no, &[call], &self.actor).await?;
                if expired == NodeState::Preparing {
                    transition::poll_node(&mut *tx, item.node_id, expired, &lease).await?.or_stale()?;
                } else {
                    transition::transition_node(&mut *tx, item.node_id, expired, NodeState::Preparing, &lease, &meta)
                        .await?
                        .or_stale()?;
                }
            }
            // The claim's predicate admits none other (BLOCKED only for a hand-off, which
            // passes its activation; READY and the expired leases only without one).
            (state, activation) => {
                let handed = if activation.is_some() { "handed on" } else { "claimed" };
                return Err(StoreError::corrupt(format!("node {} {handed} in state {state}", item.node_id)));
            }
        }
        if item.request_state == RequestState::Approved {
            transition::transition_request(
                &mut *tx,
                item.request_id,
                RequestState::Approved,
                RequestState::Executing,
                &RequestPatch::default(),
                &meta,
            )
            .await?
            .or_stale()?;
        }
        // The movement's first claim: its risk limits again, against what is in flight now
        // (a lowered limit or what was approved meanwhile); nothing is sent if they refuse.
        let risk =
            if item.request_state == RequestState::Approved { self.risk_refusal(&mut *tx, &item).await? } else { None };
        // And the approval policy in force now: a rule that blocks it since stops it here.
        let policy = if item.request_state == RequestState::Approved && risk.is_none() {
            self.policy_refusal(&mut *tx, &item).await?
        } else {
            None
        };
        // Refusals that need no call end here, under the claim's locks.
        let refusal = if let Some(why) = risk {
            Some((codes::RISK_LIMIT_EXCEEDED, format!("risk limits checked again before the first submit: {why}")))
        } else if let Some((code, why)) = policy {
            Some((code, format!("the approval policy checked again before the first submit: {why}")))
        } else if item.compiled_plan_hash != item.current_plan_hash
            || item.approved_plan_hash.as_deref().is_some_and(|h| h != item.compiled_plan_hash)
        {
            Some((codes::PLAN_HASH_DRIFT, "the plan changed since the movement was compiled or approved".to_string()))
        } else if item.approved_intent_hash.as_deref().is_some_and(|h| h != item.intent_hash) {
            Some((codes::INTENT_HASH_DRIFT, "the intent changed since it was approved".to_string()))
        } else {
            // (A node of an executor this worker does not serve is never claimed here: the claim
            // takes only nodes of `served_keys`, so there is no "not registered" case.)
            None
        };
        let built = match refusal {
            Some(r) => Err(r),
            None => match build_execution_context(&mut *tx, &item, attempt_no).await {
                Ok(ctx) => Ok(ctx),
                Err(ContextError::Ref(e)) => Err((codes::CONFIG_REF_UNRESOLVED, e.to_string())),
                Err(ContextError::Store(e)) => return Err(e),
            },
        };
        match built {
            Ok(ctx) => {
                let executor =
                    self.registry.executor(&item.executor_key).map(|e| e.executor.clone()).ok_or_else(|| {
                        StoreError::corrupt(format!("executor {:?} left the registry", item.executor_key))
                    })?;
                Ok(Claim::Held(Box::new(Claimed { item, token, attempt_no, executor, ctx }), span))
            }
            Err((code, detail)) => {
                tracing::info!(
                    node_id = %item.node_id, node_key = %item.node_key, code, %detail,
                    "node failed before any call"
                );
                transition::transition_node(
                    &mut *tx,
                    item.node_id,
                    NodeState::Preparing,
                    NodeState::Failed,
                    &NodePatch::error(code, &detail),
                    &meta,
                )
                .await?
                .or_stale()?;
                apply_request_state(&mut *tx, item.request_id, &self.actor).await?;
                Ok(Claim::Ended)
            }
        }
    }

    /// Why the approval policy in force now blocks the movement, if it does.
    async fn policy_refusal(&self, conn: &mut PgConnection, item: &WorkItem) -> Result<Option<(&'static str, String)>> {
        let now = chrono::Utc::now();
        let in_force = match self.policy_in_force(conn, now).await {
            Ok(p) => p,
            Err(crate::movements::OpError::Store(e)) => return Err(e),
            Err(other) => return Ok(Some((codes::POLICY_BLOCKED, other.to_string()))),
        };
        // Neither a policy nor the book applies: nothing more to read.
        if in_force.is_none() && !crate::policy::requires_book(&item.risk_controls) {
            return Ok(None);
        }
        // Who asked, when and by which plan: on the movement, not on the claimed node.
        let Some(row) = qtg_store::movements::get(conn, item.request_id).await? else {
            return Ok(None);
        };
        let Some(pv) = qtg_store::templates::plan_version(conn, &row.template_key, Some(row.template_version)).await?
        else {
            return Err(StoreError::corrupt(format!(
                "movement {} names template {} version {}, which is not stored",
                row.id, row.template_key, row.template_version
            )));
        };
        // The address book, read now: an entry removed since approval stops the payment.
        match self.check_book(conn, &pv.plan, &item.intent).await {
            Ok(()) => {}
            Err(crate::movements::OpError::Store(e)) => return Err(e),
            Err(other) => return Ok(Some((codes::ADDRESS_NOT_IN_BOOK, other.to_string()))),
        }
        let facts = crate::policy::Facts {
            template_key: &row.template_key,
            plan: &pv.plan,
            intent: &row.intent,
            requester: &row.created_by,
            requester_role: row.created_by_role.as_deref(),
            at: row.created_at,
            policy_at: Some(now),
        };
        let Some(in_force) = in_force else { return Ok(None) };
        match self.decide(conn, in_force, &facts).await {
            Ok(d) => Ok(d.refusal().map(|e| (codes::POLICY_BLOCKED, e.to_string()))),
            Err(crate::movements::OpError::Store(e)) => Err(e),
            Err(other) => Ok(Some((codes::POLICY_BLOCKED, other.to_string()))),
        }
    }

    /// Why the movement's risk limits refuse it now, if they do.
    async fn risk_refusal(&self, conn: &mut PgConnection, item: &WorkItem) -> Result<Option<String>> {
        // The version's limits and, when a newer version exists, the stricter of both.
        let checked = match self.movement_limits(conn, item.request_id, &item.risk_controls, &item.intent).await {
            Ok((limits, amount)) => self.check_risk(conn, &limits, &amount, &item.intent, item.request_id).await,
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => Ok(None),
            Err(crate::movements::OpError::Risk(v)) => Ok(Some(v.message)),
            Err(crate::movements::OpError::Store(e)) => Err(e),
            Err(other) => Ok(Some(other.to_string())),
        }
    }

    /// Calls, arm, submit, record — the claim's lease held by `c.token`. Answers the successor
    /// the record handed on to this loop, claimed in the record's transaction.
    async fn run_claimed(&self, c: Claimed, hand_off: bool) -> Result<Option<Claim>> {
        let deadline = self.settings.executor_timeout;
        let mut calls: Vec<Call> = Vec::new();

        // The caller the protocol requires first (the seed's burn-caller alignment, a lane hook):
        // the address the plan expects to send the action is the one its signer signs as.
        if let Some(required) = c.executor.required_signer(&c.ctx) {
            if let Some(why) = self.signer_misaligned(&c, &required).await? {
                calls.push(Call::failed("preflight", "refused", required.code, &why, 0));
                return self.fail_claimed(&c, NodeState::Preparing, calls, required.code, &why).await.map(|()| None);
            }
        }

        // Preflight: nothing has been sent, so every failure is a plain FAILED.
        let (res, ms) = with_deadline("preflight", deadline, c.executor.preflight(&c.ctx)).await;
        match res {
            Ok(None) => calls.push(Call::ok("preflight", "pass", ms)),
            Ok(Some(refusal)) => {
                // Checked again here for its bounds (a long detail), not its state: the type
                // allows only FAILED.
                let result = refusal.erase();
                let (code, detail) = match result.validate(Method::Preflight) {
                    Ok(()) => (
                        result.error_code.clone().unwrap_or_else(|| codes::PREFLIGHT_FAILED.into()),
                        result.error_detail.clone().unwrap_or_default(),
                    ),
                    Err(v) => (codes::EXECUTOR_PROTOCOL_ERROR.to_string(), v.to_string()),
                };
                calls.push(Call::failed("preflight", "refused", &code, &detail, ms));
                return self.fail_claimed(&c, NodeState::Preparing, calls, &code, &detail).await.map(|()| None);
            }
            Err(e) => {
                return self.call_failed(&c, NodeState::Preparing, calls, "preflight", &e, ms).await.map(|()| None)
            }
        }

        // Prepare.
        let (res, ms) = with_deadline("prepare", deadline, c.executor.prepare(&c.ctx)).await;
        let mut prepared = match res {
            Ok(Prepared::Action(p)) => p,
            Ok(Prepared::Refused(refusal)) => {
                let result = refusal.erase();
                let (code, detail) = match result.validate(Method::Prepare) {
                    Ok(()) => (
                        result.error_code.clone().unwrap_or_else(|| codes::PREPARE_FAILED.into()),
                        result.error_detail.clone().unwrap_or_default(),
                    ),
                    Err(v) => (codes::EXECUTOR_PROTOCOL_ERROR.to_string(), v.to_string()),
                };
                calls.push(Call::failed("prepare", "refused", &code, &detail, ms));
                return self.fail_claimed(&c, NodeState::Preparing, calls, &code, &detail).await.map(|()| None);
            }
            Ok(Prepared::Empty) => {
                calls.push(Call::ok("prepare", "empty", ms));
                let detail = "prepare returned no action";
                return self
                    .fail_claimed(&c, NodeState::Preparing, calls, codes::PREPARE_EMPTY, detail)
                    .await
                    .map(|()| None);
            }
            Err(e) => return self.call_failed(&c, NodeState::Preparing, calls, "prepare", &e, ms).await.map(|()| None),
        };
        let expires_at = match prepared.seal().and_then(|()| expiry(&prepared)) {
            Ok(at) => at,
            Err(v) => {
                let detail = v.to_string();
                calls.push(Call::failed("prepare", "protocol_error", codes::EXECUTOR_PROTOCOL_ERROR, &detail, ms));
                return self
                    .fail_claimed(&c, NodeState::Preparing, calls, codes::EXECUTOR_PROTOCOL_ERROR, &detail)
                    .await
                    .map(|()| None);
            }
        };
        let expired = || expires_at.is_some_and(|at| at <= Utc::now());
        calls.push(Call::ok("prepare", "ok", ms));

        // Sign, when the plan or the prepared action asks for it.
        let mut state = NodeState::Preparing;
        let mut signed = None;
        if c.item.signing_required || prepared.signing_required {
            let Some(signer_key) = c.item.signer_key.clone().filter(|k| !k.is_empty()) else {
                let detail = "signing is required but the node has no signer_key";
                return self.fail_claimed(&c, state, calls, codes::SIGNER_BINDING_MISSING, detail).await.map(|()| None);
            };
            let Some(signer) = self.registry.signer(&signer_key).map(|s| s.signer.clone()) else {
                let detail = format!("signer {signer_key:?} is not in this worker's registry");
                return self
                    .fail_claimed(&c, state, calls, codes::SIGNER_BINDING_MISSING, &detail)
                    .await
                    .map(|()| None);
            };
            // The prepared action and the calls so far are stored before the signer sees it.
            if !self.await_signature(&c, &prepared, std::mem::take(&mut calls)).await? {
                return Ok(None);
            }
            state = NodeState::AwaitingSignature;
            let request = SignRequest::build(&c.ctx, &signer_key, &prepared);
            let started = Instant::now();
            let span = calls::call_span("sign");
            let res = match tokio::time::timeout(deadline, signer.sign(&request)).instrument(span.clone()).await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(SignError::Refused(why))) => Err(SignFailure::Refused(why)),
                Ok(Err(SignError::Call(e))) => Err(SignFailure::Call(e)),
                Err(_) => Err(SignFailure::Call(ExecutorError::Timeout(deadline.as_millis() as u64))),
            };
            let outcome = match &res {
                Ok(_) => "ok",
                Err(SignFailure::Refused(_)) => "refused",
                Err(SignFailure::Call(e)) => calls::outcome(e),
            };
            let ms = calls::call_ended(&span, "sign", outcome, started);
            match res {
                Ok(result) if let Err(v) = result.validate() => {
                    let detail = v.to_string();
                    calls.push(Call::failed("sign", "protocol_error", codes::SIGNER_PROTOCOL_ERROR, &detail, ms));
                    return self
                        .fail_claimed(&c, state, calls, codes::SIGNER_PROTOCOL_ERROR, &detail)
                        .await
                        .map(|()| None);
                }
                Ok(result) => {
                    calls.push(Call::ok("sign", "ok", ms));
                    // The address that signed must be the signer's enrolled identity.
                    if let Some(why) = self.identity_mismatch(&signer_key, &result).await? {
                        return self
                            .fail_claimed(&c, state, calls, codes::SIGNER_IDENTITY_MISMATCH, &why)
                            .await
                            .map(|()| None);
                    }
                    signed = Some(result);
                }
                Err(SignFailure::Refused(why)) => {
                    calls.push(Call::failed("sign", "refused", codes::SIGNER_REFUSED, &why, ms));
                    return self.fail_claimed(&c, state, calls, codes::SIGNER_REFUSED, &why).await.map(|()| None);
                }
                Err(SignFailure::Call(e)) => {
                    let detail = e.to_string();
                    calls.push(Call::failed("sign", calls::outcome(&e), codes::SIGNER_UNAVAILABLE, &detail, ms));
                    return self
                        .fail_claimed(&c, state, calls, codes::SIGNER_UNAVAILABLE, &detail)
                        .await
                        .map(|()| None);
                }
            }
        }

        // An action that expired while it was prepared or signed is not sent.
        if expired() {
            let detail = format!(
                "the prepared action expired at {}; nothing was sent",
                prepared.expires_at.as_deref().unwrap_or("")
            );
            calls.push(Call::failed("submit", "not_sent", codes::PREPARED_ACTION_EXPIRED, &detail, 0));
            return self.fail_claimed(&c, state, calls, codes::PREPARED_ACTION_EXPIRED, &detail).await.map(|()| None);
        }

        // Arm: intent before effect. The clock of the submit window starts before the
        // statement is sent.
        let armed_at = Instant::now();
        let Some((submit_by, stored_hash)) = self.arm(&c, state, &prepared, signed.as_ref(), calls).await? else {
            return Ok(None);
        };
        tracing::info!(node_id = %c.item.node_id, attempt_no = c.attempt_no, %submit_by, "armed; submitting");

        // Submit, only while the window (less the skew margin) is still open.
        let window = self.settings.submit_window.saturating_sub(self.settings.clock_skew);
        let key = idempotency_key(&c.ctx.request_node_id, c.attempt_no);
        // What is sent is what was stored for the attempt: the prepared action's hash against the
        // one its artifact holds (written by the arm, or when it was prepared before signing, and
        // answered by the arm's statement), not against itself.
        if stored_hash.as_deref() != Some(prepared.computed_hash().as_str()) {
            tracing::error!(
                node_id = %c.item.node_id, attempt_no = c.attempt_no, stored = ?stored_hash,
                "submit not sent: the prepared action differs from the one stored for the attempt; recovery \
                 decides the attempt"
            );
            let mut conn = self.pool.acquire().await?;
            let detail = "the prepared action's hash is not the one stored for this attempt; nothing was sent";
            let call = Call::failed("submit", "not_sent", codes::PAYLOAD_HASH_MISMATCH, detail, 0);
            record_calls(&mut conn, c.item.request_id, c.item.node_id, c.attempt_no, &[call], &self.actor).await?;
            return Ok(None);
        }
        if armed_at.elapsed() >= window || expired() {
            tracing::warn!(
                node_id = %c.item.node_id, attempt_no = c.attempt_no,
                elapsed_ms = armed_at.elapsed().as_millis() as u64,
                "submit not sent: the submit window closed before it could start; recovery decides the attempt"
            );
            let mut conn = self.pool.acquire().await?;
            let detail = "the submit window closed before the submit could start; nothing was sent";
            let call = Call::failed("submit", "not_sent", codes::SUBMIT_WINDOW_CLOSED, detail, 0);
            record_calls(&mut conn, c.item.request_id, c.item.node_id, c.attempt_no, &[call], &self.actor).await?;
            return Ok(None);
        }
        let submission = Submission { prepared: &prepared, signed: signed.as_ref(), idempotency_key: &key, submit_by };
        let (res, ms) = with_deadline("submit", deadline, c.executor.submit(&c.ctx, &submission)).await;
        let res = res.map(ExecutionResult::erase).and_then(|r| {
            r.validate_merged(Method::Submit, &c.ctx.provider_refs).map(|_| r).map_err(|v| ExecutorError::Protocol(v.0))
        });
        self.record_submit(&c, res, ms, hand_off).await
    }

    /// Why the node's signer is not the caller its action requires, if it is not: the address
    /// the plan names must be the one the node's signer signs as — its enrolled identity, else
    /// the one its health check reported. Nothing is prepared or signed when it is not, or
    /// cannot be known.
    async fn signer_misaligned(&self, c: &Claimed, required: &SignerRequirement) -> Result<Option<String>> {
        let role = required.role;
        let caller = match &required.address {
            Ok(a) => a.clone(),
            Err(why) => return Ok(Some(why.clone())),
        };
        let Some(signer_key) = c.item.signer_key.clone().filter(|k| !k.is_empty()) else {
            return Ok(Some(format!("the node has no signer_key: the address to {role} ({caller}) cannot be aligned")));
        };
        let (expected, observed) = {
            let mut conn = self.pool.acquire().await?;
            qtg_store::health::identities(&mut conn, &signer_key).await?
        };
        Ok(match expected.or(observed) {
            Some(signs_as) if signs_as.eq_ignore_ascii_case(&caller) => None,
            Some(signs_as) => Some(format!(
                "the plan expects {caller} to {role}, but signer {signer_key:?} signs as {signs_as}; nothing was signed"
            )),
            None => Some(format!(
                "signer {signer_key:?} has no enrolled or observed address: {caller}, which must {role}, cannot be \
                 aligned; nothing was signed"
            )),
        })
    }

    /// Why a signature may not be used: the signer reported an address other than the one an
    /// admin enrolled for it (`expected_signer_address`), or none while one is enrolled.
    async fn identity_mismatch(&self, signer_key: &str, signed: &qtg_core::SignResult) -> Result<Option<String>> {
        let expected = {
            let mut conn = self.pool.acquire().await?;
            qtg_store::health::expected_identity(&mut conn, signer_key).await?
        };
        Ok(expected.and_then(|want| match signed.signer_address.as_deref() {
            Some(got) if got.eq_ignore_ascii_case(&want) => None,
            Some(got) => {
                Some(format!("signed by {got}, but signer {signer_key:?} is enrolled as {want}; nothing was sent"))
            }
            None => {
                Some(format!("signer {signer_key:?} reported no address, and {want} is enrolled; nothing was sent"))
            }
        }))
    }

    /// PREPARING → AWAITING_SIGNATURE by compare-and-set, with the prepared action and the
    /// calls so far. `false` when the claim was lost (nothing is signed then).
    async fn await_signature(&self, c: &Claimed, prepared: &PreparedAction, calls: Vec<Call>) -> Result<bool> {
        // One statement: the state, the calls so far and the prepared action.
        let patch = NodePatch {
            guard: self.claim_guard(c),
            calls: calls.clone(),
            calls_attempt: Some(c.attempt_no),
            artifacts: vec![prepared_artifact(prepared)],
            ..Default::default()
        };
        let mut conn = self.pool.acquire().await?;
        let moved = transition::transition_node(
            &mut conn,
            c.item.node_id,
            NodeState::Preparing,
            NodeState::AwaitingSignature,
            &patch,
            &Meta::actor(&self.actor),
        )
        .await;
        match moved? {
            Cas::Applied(_) => Ok(true),
            Cas::Stale(_) => {
                record_calls(&mut conn, c.item.request_id, c.item.node_id, c.attempt_no, &calls, &self.actor).await?;
                self.claim_lost(&mut conn, c, "sign").await?;
                Ok(false)
            }
        }
    }

    /// The arm. `Some((submit_by, stored prepared hash))` once SUBMITTING for attempt N is
    /// committed; `None` when the compare-and-set matched nothing (cancelled, re-claimed,
    /// paused) — nothing is sent.
    async fn arm(
        &self,
        c: &Claimed,
        from: NodeState,
        prepared: &PreparedAction,
        signed: Option<&qtg_core::SignResult>,
        calls: Vec<Call>,
    ) -> Result<Option<(chrono::DateTime<chrono::Utc>, Option<String>)>> {
        // One statement, committed on its own: the attempt, its markers, the calls so far and
        // the prepared (and signed) artifacts.
        let mut artifacts = Vec::new();
        if from == NodeState::Preparing {
            artifacts.push(prepared_artifact(prepared));
        }
        if let Some(result) = signed {
            artifacts.push(NewArtifact {
                kind: ArtifactKind::SignResult,
                payload: serde_json::to_value(result).unwrap_or_else(|_| json!({})),
                payload_hash: Some(prepared.payload_hash.clone()),
            });
        }
        let patch = NodePatch {
            begin_attempt: true,
            submit_window: self.settings.submit_window,
            guard: Guard { dispatchable: true, ..self.claim_guard(c) },
            calls: calls.clone(),
            calls_attempt: Some(c.attempt_no),
            artifacts,
            ..Default::default()
        };
        let meta = Meta::actor(&self.actor);
        let mut conn = self.pool.acquire().await?;
        let armed =
            transition::write_transition(&mut conn, c.item.node_id, from, NodeState::Submitting, &patch, &meta).await;
        match armed {
            // An unconfirmed commit (an error) sends nothing: recovery decides from what is stored.
            Ok(Cas::Applied(written)) => {
                let submit_by = written
                    .submit_by
                    .ok_or_else(|| StoreError::corrupt("an armed attempt has no submit_by".to_string()))?;
                Ok(Some((submit_by, written.prepared_hash)))
            }
            Ok(Cas::Stale(_)) => {
                let mut tx = sqlx::Acquire::begin(&mut *conn).await?;
                record_calls(&mut tx, c.item.request_id, c.item.node_id, c.attempt_no, &calls, &self.actor).await?;
                let now = claims::node_now(&mut tx, c.item.node_id).await?;
                let still_ours = now.as_ref().is_some_and(|n| {
                    n.node_state == from && n.claim_token == Some(c.token) && n.attempt_no == c.attempt_no - 1
                });
                // Still ours, but not dispatchable: a pause, or the movement left EXECUTING
                // (another branch handed it to a person). Nothing reached the venue: FAILED,
                // safe to retry.
                let refusal = now.filter(|_| still_ours).and_then(|n| match (n.held_by, n.request_state) {
                    (Some(pause), _) => Some((
                        codes::DISPATCH_PAUSED,
                        format!(
                            "dispatch paused ({pause}) before the submit was sent; nothing reached the venue; \
                             retry after resume"
                        ),
                    )),
                    (None, RequestState::Executing) => None,
                    (None, state) => Some((
                        codes::DISPATCH_ABORTED,
                        format!("the movement became {state} before the submit was sent; nothing reached the venue"),
                    )),
                });
                match refusal {
                    Some((code, detail)) => {
                        tracing::warn!(
                            node_id = %c.item.node_id, attempt_no = c.attempt_no, code, %detail,
                            "submit not sent"
                        );
                        let patch = NodePatch { guard: self.claim_guard(c), ..NodePatch::error(code, &detail) };
                        // Read in this transaction as still ours: a miss now is a race to retry.
                        transition::transition_node(&mut tx, c.item.node_id, from, NodeState::Failed, &patch, &meta)
                            .await?
                            .or_stale()?;
                        apply_request_state(&mut tx, c.item.request_id, &self.actor).await?;
                    }
                    None => self.claim_lost(&mut tx, c, "arm").await?,
                }
                tx.commit().await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Record: compare-and-set on the armed attempt, then apply. A submit that completes the
    /// node hands on: the first successor it activates is claimed in the same transaction (no
    /// wake-up, no listing, no other loop racing for it) and answered for this loop to run —
    /// the claim as a savepoint, so that whatever stops it leaves the record to commit and the
    /// successor READY (see [`Engine::claim_handed`]).
    async fn record_submit(
        &self,
        c: &Claimed,
        res: std::result::Result<ExecutionResult, ExecutorError>,
        ms: i32,
        hand_off: bool,
    ) -> Result<Option<Claim>> {
        // An UNKNOWN from submit gets the lane's grace counted from now, the end of the call:
        // the venue may still be processing what it received.
        // (seconds: the wire's `retry_after_seconds`)
        let grace = self.settings.grace.of(c.item.lane).as_secs_f64();
        let from_executor = res.is_ok();
        let (result, call) = match res {
            Ok(mut result) => {
                if result.next_state == NodeState::Unknown {
                    result.retry_after_seconds = Some(result.retry_after_seconds.unwrap_or(0.0).max(grace));
                }
                let call = Call {
                    method: "submit",
                    outcome: format!("result:{}", result.next_state),
                    error_code: result.error_code.clone(),
                    error_detail: result.error_code.as_ref().map(|_| result.error_detail.clone().unwrap_or_default()),
                    duration_ms: ms,
                };
                (result, call)
            }
            Err(e) => {
                // The venue may have it: UNKNOWN, never FAILED, never retried blind.
                let code = calls::error_code(&e);
                let detail = e.to_string();
                tracing::warn!(
                    node_id = %c.item.node_id, attempt_no = c.attempt_no, error = %detail,
                    "submit gave no answer; node is UNKNOWN"
                );
                let call = Call::failed("submit", calls::outcome(&e), code, &detail, ms);
                let result = ExecutionResult {
                    error_code: Some(code.into()),
                    error_detail: Some(detail),
                    retry_after_seconds: Some(grace),
                    ..ExecutionResult::new(NodeState::Unknown)
                };
                (result, call)
            }
        };
        let mut tx = self.pool.begin().await?;
        let guard = Guard { attempt_no: Some(c.attempt_no), submit_pending: true, ..Default::default() };
        let mut item = c.item.clone();
        item.attempt_no = c.attempt_no;
        let calls = [call];
        let answer = Answer { result: &result, method: Method::Submit, guard, calls: &calls, hand_off };
        let mut applied = apply_result(&mut tx, &item, NodeState::Submitting, &answer, &self.actor).await?;
        if applied.is_stale() {
            // Recovery may have moved the armed attempt to UNKNOWN meanwhile: still ours to decide.
            let now = claims::node_now(&mut tx, c.item.node_id).await?;
            if now.is_some_and(|n| n.node_state == NodeState::Unknown && n.attempt_no == c.attempt_no) {
                applied = apply_result(&mut tx, &item, NodeState::Unknown, &answer, &self.actor).await?;
            }
        }
        if applied.is_stale() {
            record_calls(&mut tx, c.item.request_id, c.item.node_id, c.attempt_no, &calls, &self.actor).await?;
            crate::advance::stale_answer(&mut tx, &item, "submit", &result, from_executor, &self.actor).await?;
        }
        let handed = match applied.applied().and_then(|r| r.handed_off) {
            Some(next) => self.claim_handed(&mut tx, next).await?,
            None => None,
        };
        tx.commit().await?;
        Ok(handed.inspect(announce))
    }

    /// Claims the successor `next` a record just activated (still BLOCKED: the claim writes it
    /// READY and PREPARING at once), inside the record's transaction, as a savepoint. `None`
    /// when it is not claimed here: a pause, an executor this worker does not serve (it is
    /// written READY and the dispatchers are woken for it when the record commits), or a claim
    /// that failed (rolled back to the savepoint, then written READY and held back for the
    /// call-failure backoff in the record's transaction, as [`Engine::contain`] would; woken
    /// instead if even that cannot be written).
    async fn claim_handed(&self, tx: &mut PgConnection, next: HandOff) -> Result<Option<Claim>> {
        let served = self.served_keys();
        let mut savepoint = sqlx::Acquire::begin(&mut *tx).await?;
        let failed = match claims::claim_first(&mut savepoint, Pickup::HandOff, &served, next.node_id).await {
            Ok(Some(item)) => match self.claimed(&mut savepoint, item, Some(&next.frontier)).await {
                Ok(claim) => {
                    savepoint.commit().await?;
                    return Ok(Some(claim));
                }
                Err(e) => Some(e),
            },
            Ok(None) => None,
            Err(e) => Some(e),
        };
        savepoint.rollback().await?;
        // Not claimed here: READY, announced — or, after a failed claim, held back.
        activate(&mut *tx, &next, failed.is_some(), &self.actor).await?;
        if let Some(e) = failed {
            let mut savepoint = sqlx::Acquire::begin(&mut *tx).await?;
            let held = match self.hold_back(&mut savepoint, next.node_id, "claim", &e).await {
                Ok(held) => {
                    savepoint.commit().await?;
                    held
                }
                Err(again) => {
                    tracing::error!(node_id = %next.node_id, error = %again, "could not hold the node back either");
                    savepoint.rollback().await?;
                    false
                }
            };
            if !held {
                transition::wake(&mut *tx, transition::CHANNEL_DISPATCH).await?;
            }
        }
        Ok(None)
    }

    /// The guard of a write made under this claim: same token, attempt not yet advanced.
    fn claim_guard(&self, c: &Claimed) -> Guard {
        Guard { claim_token: Some(c.token), attempt_no: Some(c.attempt_no - 1), ..Default::default() }
    }

    /// The claim was lost (an operator cancelled the node, or its lease expired and another
    /// dispatcher took it): a node event, nothing else.
    async fn claim_lost(&self, conn: &mut PgConnection, c: &Claimed, step: &'static str) -> Result<()> {
        let now = claims::node_now(conn, c.item.node_id).await?;
        let detail = match &now {
            Some(n) => format!(
                "the claim was lost before the {step} (node is {}, attempt {}, request {}); nothing was sent",
                n.node_state, n.attempt_no, n.request_state
            ),
            None => format!("the node is gone; nothing was sent at the {step}"),
        };
        tracing::warn!(node_id = %c.item.node_id, node_key = %c.item.node_key, step, %detail, "claim lost");
        let call = Call::failed(step, "claim_lost", codes::CLAIM_LOST, &detail, 0);
        record_calls(conn, c.item.request_id, c.item.node_id, c.attempt_no, &[call], &self.actor).await?;
        Ok(())
    }

    /// Ends the claim with the node FAILED (nothing was sent) and re-derives — by
    /// compare-and-set: a claim lost meanwhile records the calls and changes nothing.
    async fn fail_claimed(
        &self,
        c: &Claimed,
        from: NodeState,
        calls: Vec<Call>,
        code: &str,
        detail: &str,
    ) -> Result<()> {
        tracing::info!(
            node_id = %c.item.node_id, node_key = %c.item.node_key, code, detail,
            "node failed before submit"
        );
        let mut tx = self.pool.begin().await?;
        let patch = NodePatch {
            guard: self.claim_guard(c),
            calls: calls.clone(),
            calls_attempt: Some(c.attempt_no),
            ..NodePatch::error(code, detail)
        };
        let meta = Meta::actor(&self.actor);
        match transition::transition_node(&mut tx, c.item.node_id, from, NodeState::Failed, &patch, &meta).await? {
            Cas::Applied(_) => {
                // Nothing was broadcast: a nonce the node reserved goes back in the same
                // transaction, unless a signature for it may exist (the signer was asked and
                // gave no answer that rules one out).
                let cleared =
                    matches!(code, codes::SIGNER_REFUSED | codes::SIGNER_IDENTITY_MISMATCH).then_some(c.attempt_no);
                let why = format!("{code}: {detail}");
                let released =
                    qtg_store::evm::release_before_broadcast(&mut tx, c.item.node_id, cleared, &why, &self.actor)
                        .await?;
                for r in &released {
                    tracing::info!(
                        node_id = %c.item.node_id, chain_id = r.chain_id, address = %r.address, nonce = r.nonce,
                        "nonce given back: the node failed before anything was broadcast"
                    );
                }
                apply_request_state(&mut tx, c.item.request_id, &self.actor).await?
            }
            Cas::Stale(_) => {
                record_calls(&mut tx, c.item.request_id, c.item.node_id, c.attempt_no, &calls, &self.actor).await?;
                self.claim_lost(&mut tx, c, "claim").await?
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn call_failed(
        &self,
        c: &Claimed,
        from: NodeState,
        mut calls: Vec<Call>,
        method: &'static str,
        e: &ExecutorError,
        ms: i32,
    ) -> Result<()> {
        // Before submit nothing left qtg: unreachable, slow or garbled all mean FAILED.
        let code = match e {
            ExecutorError::Protocol(_) | ExecutorError::Request(_) => calls::error_code(e),
            _ => codes::EXECUTOR_UNAVAILABLE,
        };
        let detail = e.to_string();
        calls.push(Call::failed(method, calls::outcome(e), code, &detail, ms));
        self.fail_claimed(c, from, calls, code, &detail).await
    }
}

fn prepared_artifact(prepared: &PreparedAction) -> NewArtifact {
    NewArtifact {
        kind: ArtifactKind::PreparedAction,
        payload: serde_json::to_value(prepared).unwrap_or_else(|_| json!({})),
        payload_hash: Some(prepared.payload_hash.clone()),
    }
}

enum SignFailure {
    Refused(String),
    Call(ExecutorError),
}

/// The prepared action's `expires_at` (RFC 3339), if it has one; a malformed one is the
/// executor's protocol violation.
fn expiry(prepared: &PreparedAction) -> Result<Option<DateTime<Utc>>, qtg_core::protocol::ProtocolViolation> {
    prepared
        .expires_at
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| qtg_core::protocol::ProtocolViolation(format!("expires_at {s:?} is not an RFC 3339 time")))
        })
        .transpose()
}

/// Logs a claim once its transaction has committed.
fn announce(claim: &Claim) {
    if let Claim::Held(c, span) = claim {
        span.in_scope(|| {
            tracing::info!(
                node_id = %c.item.node_id, node_key = %c.item.node_key, attempt_no = c.attempt_no,
                "node claimed; preparing"
            )
        });
    }
}
