//! Template proposals and their review: a proposal carries a validated plan; approving it
//! (by someone other than the proposer) makes the template's next version.

use std::time::Duration;

use qtg_core::PlanDefinition;
use qtg_executor::Registry;
use qtg_store::audit::{self, AuditRecord};
use qtg_store::templates::{self as tq, ProposalRow};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::movements::OpError;
use crate::Engine;

pub struct Proposal {
    pub template_key: String,
    pub description: Option<String>,
    pub plan: PlanDefinition,
}

pub fn valid_template_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 128
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Checks every binding against the registry: unknown keys are refused (health is not a
/// filter here — it is checked at approval; this only logs).
pub fn check_bindings(plan: &PlanDefinition, registry: &Registry) -> Result<(), OpError> {
    for n in &plan.nodes {
        if n.node_kind != qtg_core::NodeKind::Manual {
            let Some(entry) = registry.executor(&n.executor_key) else {
                return Err(OpError::Validation(format!(
                    "node {:?}: executor_key {:?} is not registered",
                    n.node_key, n.executor_key
                )));
            };
            if entry.executor.needs_signer() && n.signer_key.as_deref().is_none_or(|s| s.trim().is_empty()) {
                return Err(OpError::Validation(format!(
                    "node {:?}: executor {:?} sends signed transactions, so the node needs a signer_key",
                    n.node_key, n.executor_key
                )));
            }
        }
        if let Some(s) = n.signer_key.as_deref().filter(|s| !s.is_empty()) {
            if registry.signer(s).is_none() {
                return Err(OpError::Validation(format!("node {:?}: signer_key {s:?} is not registered", n.node_key)));
            }
        }
    }
    Ok(())
}

impl Engine {
    pub async fn propose_template(&self, actor: &str, p: Proposal, ttl: Duration) -> Result<ProposalRow, OpError> {
        if !valid_template_key(&p.template_key) {
            return Err(OpError::Validation("template_key must be 1-128 characters of [A-Za-z0-9_.-]".into()));
        }
        p.plan.validate().map_err(|e| OpError::Validation(e.to_string()))?;
        check_bindings(&p.plan, &self.registry)?;
        let hash = p.plan.plan_hash();
        // Health is not a filter at compile time (docs/architecture.md §8.4): warn only.
        {
            let mut conn = self.pool.acquire().await?;
            let execs: Vec<String> = p.plan.nodes.iter().map(|n| n.executor_key.clone()).collect();
            let signers: Vec<String> = p.plan.nodes.iter().filter_map(|n| n.signer_key.clone()).collect();
            for (key, state) in qtg_store::health::not_up(&mut conn, &execs, &signers).await? {
                tracing::warn!(
                    template_key = %p.template_key, binding = %key, health_state = %state,
                    "template binds an executor/signer that is not up"
                );
            }
        }
        let definition = serde_json::to_value(&p.plan).map_err(|e| OpError::Validation(e.to_string()))?;
        let mut tx = self.pool.begin().await?;
        let row = tq::insert_proposal(
            &mut tx,
            Uuid::new_v4(),
            &p.template_key,
            p.description.as_deref(),
            &definition,
            &hash,
            actor,
            ttl.as_secs_f64(),
        )
        .await?;
        audit::record(
            &mut tx,
            &AuditRecord {
                actor,
                action: "template_proposal.create",
                entity_type: "template_proposal",
                entity_id: row.id.to_string(),
                movement_id: None,
                data: json!({"template_key": p.template_key, "compiled_plan_hash": hash}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(row)
    }

    /// Approve (`approve = true`) or reject a pending proposal.
    pub async fn review_template_proposal(
        &self,
        actor: &str,
        id: Uuid,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<Value, OpError> {
        let mut tx = self.pool.begin().await?;
        let p = tq::get_proposal(&mut tx, id, true).await?.ok_or(OpError::NotFound("template proposal"))?;
        if p.status != "pending" {
            return Err(OpError::InvalidState(format!("template proposal is {}", p.status)));
        }
        if p.expired {
            return Err(OpError::InvalidState("template proposal has expired".into()));
        }
        if qtg_core::text::same_principal(&p.proposed_by, actor) {
            return Err(OpError::SelfApproval("nobody reviews a template proposal they proposed".into()));
        }
        let mut out = json!({"id": id, "status": if approve { "approved" } else { "rejected" }});
        if approve {
            let plan: PlanDefinition =
                serde_json::from_value(p.definition.clone()).map_err(|e| OpError::Validation(e.to_string()))?;
            // Re-validated: the registry may have changed since it was proposed.
            check_bindings(&plan, &self.registry)?;
            let (pv, version) = tq::create_version(
                &mut tx,
                &p.template_key,
                p.description.as_deref(),
                &plan,
                &p.compiled_plan_hash,
                Some(id),
                actor,
            )
            .await?;
            tq::review_proposal(&mut tx, id, "approved", actor, reason, Some(pv)).await?;
            // The successor retires every older version: limits tightened in it bind every
            // new movement (a requester cannot name an older version to escape them).
            let retired = tq::retire_older(&mut tx, &p.template_key, version, actor).await?;
            for v in &retired {
                let why = format!("superseded by version {version}");
                audit_retirement(&mut tx, actor, &p.template_key, *v, &why).await?;
            }
            out["retired_versions"] = json!(retired);
            out["template_key"] = json!(p.template_key);
            out["version"] = json!(version);
            out["compiled_plan_hash"] = json!(p.compiled_plan_hash);
        } else {
            tq::review_proposal(&mut tx, id, "rejected", actor, reason, None).await?;
        }
        audit::record(
            &mut tx,
            &AuditRecord {
                actor,
                action: if approve { "template_proposal.approve" } else { "template_proposal.reject" },
                entity_type: "template_proposal",
                entity_id: id.to_string(),
                movement_id: None,
                data: json!({"reason": reason, "result": out}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Retires `template_key` version `version` by hand (an admin, with a reason): it takes no
    /// new movement or capital transfer; movements already created keep their plan.
    pub async fn retire_template_version(
        &self,
        actor: &str,
        template_key: &str,
        version: i32,
        reason: &str,
    ) -> Result<Value, OpError> {
        if reason.trim().is_empty() {
            return Err(OpError::Validation("a reason is required to retire a template version".into()));
        }
        let mut tx = self.pool.begin().await?;
        match tq::retire(&mut tx, template_key, version, actor, reason).await? {
            None => return Err(OpError::NotFound("template version")),
            Some(false) => {
                return Err(OpError::InvalidState(format!("{template_key} version {version} is already retired")))
            }
            Some(true) => {}
        }
        audit_retirement(&mut tx, actor, template_key, version, reason).await?;
        tx.commit().await?;
        Ok(json!({"template_key": template_key, "version": version, "retired": true}))
    }
}

/// The audit row of a version's retirement (`template.version.retire`).
async fn audit_retirement(
    conn: &mut sqlx::PgConnection,
    actor: &str,
    template_key: &str,
    version: i32,
    reason: &str,
) -> Result<(), OpError> {
    let data = json!({"template_key": template_key, "version": version, "reason": reason});
    let record = AuditRecord {
        actor,
        action: "template.version.retire",
        entity_type: "template",
        entity_id: template_key.to_string(),
        movement_id: None,
        data,
    };
    audit::record(conn, &record).await?;
    Ok(())
}
