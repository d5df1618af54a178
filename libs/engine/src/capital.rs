//! Capital transfers: a treasury's request (from, to, asset, amount, reason, template) that
//! creates its movement, and capital_transfer_followup, which finds requests untouched past
//! the stale threshold and advances or surfaces them — creates the movement whose creation
//! was lost, closes a request whose movement is terminal, hands to a person (with a
//! `capital_transfer_attention` callback) one whose movement expired, was rejected or sits in
//! MANUAL_INTERVENTION. Each step is audited and a compare-and-set under the row lock the
//! pickup took (`SKIP LOCKED`), so several replicas decide each request once.

use std::time::Duration;

use qtg_core::hash::canonical_hash;
use qtg_store::audit::AuditRecord;
use qtg_store::capital::{self, CapitalTransfer, NewTransfer};
use serde_json::{json, Value};

use crate::movements::{NewMovementInput, OpError};
use crate::{Engine, Result};

#[derive(Debug, Clone)]
pub struct CapitalSettings {
    /// `MG_CAPITAL_TRANSFER_FOLLOWUP_STALE_SECONDS`: untouched this long, a request is followed up.
    pub stale: Duration,
    /// `MG_CALLBACK_DEFAULT_URL`: where an attention callback goes when the request names none.
    pub default_callback_url: Option<String>,
    /// The approval window of the movements it creates (`MG_APPROVAL_TTL_SECONDS`).
    pub approval_ttl: Duration,
}

impl Default for CapitalSettings {
    fn default() -> Self {
        CapitalSettings {
            stale: Duration::from_secs(300),
            default_callback_url: None,
            approval_ttl: Duration::from_secs(300),
        }
    }
}

/// A capital transfer request as the API takes it.
#[derive(Debug, Clone)]
pub struct TransferInput {
    pub source: String,
    pub destination: String,
    pub asset: String,
    pub amount: String,
    pub reason: String,
    pub template_key: String,
    pub template_version: Option<i32>,
    pub callback_url: Option<String>,
    pub idempotency_key: String,
}

/// Requests one follow-up tick takes at most.
const FOLLOWUP_BATCH: i64 = 20;

impl TransferInput {
    fn body_hash(&self) -> String {
        canonical_hash(&json!({"source": self.source, "destination": self.destination, "asset": self.asset,
            "amount": self.amount, "reason": self.reason, "template_key": self.template_key,
            "template_version": self.template_version, "callback_url": self.callback_url}))
    }
}

fn movement_input(t: &CapitalTransfer) -> NewMovementInput {
    let intent = json!({"asset": t.asset, "amount": t.amount, "source": t.source, "destination": t.destination});
    let input_params = json!({"capital_transfer_id": t.id, "reason": t.reason});
    let body = json!({"template_key": t.template_key, "template_version": t.template_version, "intent": intent,
        "input_params": input_params, "callback_url": t.callback_url});
    NewMovementInput {
        template_key: t.template_key.clone(),
        template_version: t.template_version,
        intent,
        input_params,
        callback_url: t.callback_url.clone(),
        callback_secret: None,
        callback_signature: None,
        // One movement per request, whoever creates it (the API, or the follow-up).
        idempotency_key: format!("capital-transfer:{}", t.id),
        body_hash: canonical_hash(&body),
        created_by_role: Some("requester".into()),
    }
}

fn audit_row<'a>(actor: &'a str, action: &'a str, t: &CapitalTransfer, data: Value) -> AuditRecord<'a> {
    AuditRecord {
        actor,
        action,
        entity_type: "capital_transfer",
        entity_id: t.id.to_string(),
        movement_id: t.movement_id,
        data,
    }
}

impl Engine {
    /// Records the request and creates its movement (idempotent per principal and key: the
    /// same body answers the same request, another body is IDEMPOTENCY_CONFLICT). The template,
    /// the amount and the source's balance are checked before anything is recorded; a movement
    /// refused after that (a risk limit) closes the request FAILED with why.
    pub async fn create_capital_transfer(
        &self,
        actor: &str,
        input: TransferInput,
    ) -> std::result::Result<(CapitalTransfer, bool), OpError> {
        if input.reason.trim().is_empty() {
            return Err(OpError::Validation("reason is required".into()));
        }
        for (name, v) in [("source", &input.source), ("destination", &input.destination), ("asset", &input.asset)] {
            if v.trim().is_empty() {
                return Err(OpError::Validation(format!("{name} is required")));
            }
        }
        let body_hash = input.body_hash();
        let mut tx = self.pool.begin().await?;
        let res = async {
            let pv = qtg_store::templates::plan_version(&mut tx, &input.template_key, input.template_version)
                .await?
                .ok_or(OpError::NotFound("template (version)"))?;
            crate::movements::refuse_retired(&pv)?;
            // `from` is the account the template pays from (its spelling): checked, audited
            // and shown as that account.
            let source = self.paying_source(&pv.plan, Some(&input.source))?.unwrap_or_else(|| input.source.clone());
            let intent = json!({"asset": input.asset, "amount": input.amount, "source": source,
                                "destination": input.destination});
            self.check_intent(&pv.plan, &intent)?;
            let (limits, amount) = self.risk_limits(&pv.plan.risk_controls, &intent)?;
            let (t, fresh) = capital::insert(
                &mut tx,
                &NewTransfer {
                    requested_by: actor,
                    idempotency_key: &input.idempotency_key,
                    body_hash: &body_hash,
                    source: &source,
                    destination: &input.destination,
                    asset: &input.asset,
                    amount: &input.amount,
                    reason: &input.reason,
                    template_key: &input.template_key,
                    template_version: input.template_version,
                    callback_url: input.callback_url.as_deref(),
                },
            )
            .await?;
            if !fresh {
                if t.body_hash != body_hash {
                    return Err(OpError::IdempotencyConflict);
                }
                return Ok((t, false));
            }
            // What the movement would be refused for without history, refused before it is
            // recorded (rolled back with the insert).
            limits.check_static(&amount, &intent).map_err(OpError::Risk)?;
            self.check_source_balance(&mut tx, &pv.plan.risk_controls, Some(&source), &intent).await?;
            audit_row(
                actor,
                "capital_transfer.create",
                &t,
                json!({"template_key": t.template_key, "amount": t.amount,
                "asset": t.asset, "source": t.source, "destination": t.destination, "reason": t.reason}),
            )
            .record(&mut tx)
            .await?;
            Ok((t, true))
        }
        .await;
        let (t, fresh) = crate::movements::finish(tx, res).await?;
        if t.state != "PENDING" {
            return Ok((t, fresh));
        }
        // The movement, in its own transaction: lost here (a crash, the database gone a
        // moment), the follow-up creates it; the caller gets the PENDING request.
        match self.movement_for(actor, &t).await {
            Ok(t) => Ok((t, fresh)),
            Err(OpError::Store(e)) => {
                tracing::warn!(
                    capital_transfer_id = %t.id, error = %e,
                    "the movement could not be created now; the follow-up creates it"
                );
                Ok((t, fresh))
            }
            Err(refused) => {
                self.close_refused(&t, &refused.to_string()).await?;
                Err(refused)
            }
        }
    }

    /// Creates the request's movement as its requester (idempotent) and records it.
    async fn movement_for(&self, actor: &str, t: &CapitalTransfer) -> std::result::Result<CapitalTransfer, OpError> {
        let (movement, _) =
            self.create_movement(&t.requested_by, movement_input(t), self.settings.capital.approval_ttl).await?;
        let mut tx = self.pool.begin().await?;
        let res = async {
            if capital::set_state(&mut tx, t.id, "PENDING", "MOVEMENT_CREATED", Some(movement.id), None).await? {
                let t = CapitalTransfer { movement_id: Some(movement.id), ..t.clone() };
                audit_row(actor, "capital_transfer.movement_created", &t, json!({"movement_id": movement.id}))
                    .record(&mut tx)
                    .await?;
            }
            capital::get(&mut tx, t.id).await?.ok_or(OpError::NotFound("capital transfer"))
        }
        .await;
        crate::movements::finish(tx, res).await
    }

    async fn close_refused(&self, t: &CapitalTransfer, why: &str) -> std::result::Result<(), OpError> {
        let mut tx = self.pool.begin().await?;
        if capital::set_state(&mut tx, t.id, "PENDING", "FAILED", None, Some(why)).await? {
            audit_row(&self.actor, "capital_transfer.failed", t, json!({"reason": why})).record(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// capital_transfer_followup: up to a batch of requests due (stale, or whose movement
    /// finished or needs a person), each decided once in its own short transaction under its
    /// row lock (`SKIP LOCKED`: another replica's row is left to it); a lost movement is
    /// created outside any lock and linked by compare-and-set.
    pub async fn follow_up_capital_transfers_tick(&self) -> Result<usize> {
        let ids = {
            let mut conn = self.pool.acquire().await?;
            capital::due(&mut conn, self.settings.capital.stale.as_secs_f64(), FOLLOWUP_BATCH).await?
        };
        let mut decided = 0;
        for id in ids {
            let mut tx = self.pool.begin().await?;
            let Some(t) = capital::lock_due(&mut tx, id, self.settings.capital.stale.as_secs_f64()).await? else {
                tx.rollback().await?;
                continue;
            };
            decided += 1;
            if t.movement_id.is_none() && t.state == "PENDING" {
                tx.commit().await?;
                if let Err(e) = self.create_lost_movement(&t).await {
                    tracing::warn!(capital_transfer_id = %t.id, error = %e, "capital transfer follow-up failed");
                }
                continue;
            }
            match self.follow_up(&mut tx, &t).await {
                Ok(()) => tx.commit().await?,
                Err(e) => {
                    // One request's fault stays with it: looked at again after the threshold.
                    tx.rollback().await?;
                    tracing::warn!(capital_transfer_id = %t.id, error = %e, "capital transfer follow-up failed");
                    let mut conn = self.pool.acquire().await?;
                    capital::touch(&mut conn, t.id).await?;
                }
            }
        }
        Ok(decided)
    }

    /// The movement whose creation was lost, created (idempotently, as the requester) and
    /// linked if the request is still PENDING.
    async fn create_lost_movement(&self, t: &CapitalTransfer) -> std::result::Result<(), OpError> {
        let actor = self.actor.as_str();
        let created =
            self.create_movement(&t.requested_by, movement_input(t), self.settings.capital.approval_ttl).await;
        let mut tx = self.pool.begin().await?;
        let res = async {
            match created {
                Ok((m, _)) => {
                    if capital::set_state(&mut tx, t.id, "PENDING", "MOVEMENT_CREATED", Some(m.id), None).await? {
                        let t = CapitalTransfer { movement_id: Some(m.id), ..t.clone() };
                        audit_row(
                            actor,
                            "capital_transfer.movement_created",
                            &t,
                            json!({"movement_id": m.id, "by": "followup"}),
                        )
                        .record(&mut tx)
                        .await?;
                        tracing::info!(
                            capital_transfer_id = %t.id, movement_id = %m.id,
                            "created the movement whose creation was lost"
                        );
                    }
                    Ok(())
                }
                Err(e @ OpError::Store(_)) => Err(e),
                Err(refused) => {
                    let why = refused.to_string();
                    if capital::set_state(&mut tx, t.id, "PENDING", "FAILED", None, Some(&why)).await? {
                        audit_row(actor, "capital_transfer.failed", t, json!({"reason": why})).record(&mut tx).await?;
                    }
                    Ok(())
                }
            }
        }
        .await;
        crate::movements::finish(tx, res).await
    }

    async fn follow_up(&self, tx: &mut sqlx::PgConnection, t: &CapitalTransfer) -> std::result::Result<(), OpError> {
        let actor = self.actor.as_str();
        let Some(movement) = t.movement_id else {
            capital::touch(tx, t.id).await?;
            return Ok(());
        };
        let state = t.movement_state.as_deref().unwrap_or("");
        let (to, outcome, attention) = match state {
            // Also a request closed FAILED whose movement an operator retried to completion.
            "COMPLETED" => ("COMPLETED", "the movement completed".to_string(), false),
            "FAILED" | "CANCELLED" if t.state != "FAILED" => ("FAILED", format!("the movement is {state}"), false),
            "EXPIRED" | "REJECTED" | "MANUAL_INTERVENTION" if t.state != "NEEDS_ATTENTION" => {
                ("NEEDS_ATTENTION", format!("the movement is {state}: a person decides"), true)
            }
            _ => {
                // In flight (or already handed over and still there): looked at again later.
                capital::touch(tx, t.id).await?;
                return Ok(());
            }
        };
        if !capital::set_state(tx, t.id, &t.state, to, None, Some(&outcome)).await? {
            return Ok(());
        }
        // The bookkeeping follows the venue's fee model: what left, the fee, what arrived.
        let settlement = if to == "COMPLETED" { capital::record_settlement(tx, t.id, movement).await? } else { None };
        let data = json!({"capital_transfer_id": t.id, "from": t.state, "to": to, "movement_state": state,
                          "outcome": outcome, "settlement": settlement});
        let action = match to {
            "COMPLETED" => "capital_transfer.completed",
            "FAILED" => "capital_transfer.failed",
            _ => "capital_transfer.needs_attention",
        };
        audit_row(actor, action, t, data.clone()).record(tx).await?;
        if attention {
            match t.callback_url.as_deref().or(self.settings.capital.default_callback_url.as_deref()) {
                Some(url) => {
                    qtg_store::callbacks::enqueue_event(tx, Some(movement), "capital_transfer_attention", url, &data)
                        .await?
                }
                None => tracing::warn!(capital_transfer_id = %t.id, "needs attention; no callback URL to tell"),
            }
        }
        tracing::info!(
            capital_transfer_id = %t.id, movement_id = %movement, to, movement_state = state,
            "capital transfer followed up"
        );
        Ok(())
    }

    /// An operator closes a request handed to a person (NEEDS_ATTENTION) with a reason: FAILED,
    /// audited. (A movement that completes later still moves it to COMPLETED.)
    pub async fn close_capital_transfer(
        &self,
        actor: &str,
        id: uuid::Uuid,
        reason: &str,
    ) -> std::result::Result<CapitalTransfer, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let t = capital::lock(&mut tx, id).await?.ok_or(OpError::NotFound("capital transfer"))?;
            if t.state != "NEEDS_ATTENTION" {
                return Err(OpError::InvalidState(format!(
                    "capital transfer {id} is {}; only one that needs attention is closed by hand",
                    t.state
                )));
            }
            let outcome = format!("closed by {actor}: {reason}");
            capital::set_state(&mut tx, id, "NEEDS_ATTENTION", "FAILED", None, Some(&outcome)).await?;
            audit_row(
                actor,
                "capital_transfer.close",
                &t,
                json!({"reason": reason, "movement_state": t.movement_state}),
            )
            .record(&mut tx)
            .await?;
            capital::get(&mut tx, id).await?.ok_or(OpError::NotFound("capital transfer"))
        }
        .await;
        crate::movements::finish(tx, res).await
    }
}
