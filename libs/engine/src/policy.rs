//! The approval policy in force and the address book (docs/architecture.md §15): versions
//! proposed by one admin and approved by others (never one person), a movement decided by the
//! version in force at creation, again at each approval and at its first claim; book entries
//! activated by a second admin and usable after a cool-down; a simulation of a candidate
//! version against past movements.

use chrono::{DateTime, Datelike, Timelike, Utc};
use qtg_core::codes;
use qtg_core::hash::canonical_hash;
use qtg_core::plan::PlanDefinition;
use qtg_core::policy::{BookFacts, Decision, Payee, Policy, Subject};
use qtg_core::risk::Amount;
use qtg_store::audit::AuditRecord;
use qtg_store::policy::{self as pq, BookEntry, NewEntry, PolicyApproval, PolicyVersion};
use qtg_store::RequestRow;
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::movements::{finish, OpError};
use crate::Engine;

/// What a policy decides about a movement, with the version that decided.
#[derive(Debug, Clone)]
pub struct Decided {
    pub version: i32,
    pub policy: Policy,
    pub decision: Decision,
}

impl Decided {
    /// The refusal when the decision blocks.
    pub fn refusal(&self) -> Option<OpError> {
        self.decision.blocked().map(|reason| OpError::Policy {
            code: codes::POLICY_BLOCKED,
            message: format!(
                "policy version {} rule {:?} blocks the movement: {reason}",
                self.version, self.decision.rule
            ),
        })
    }
}

/// A movement's facts as a policy reads them.
pub struct Facts<'a> {
    pub template_key: &'a str,
    /// The movement's plan: which lane and network its ends are on.
    pub plan: &'a PlanDefinition,
    pub intent: &'a Value,
    pub requester: &'a str,
    pub requester_role: Option<&'a str>,
    /// The moment a rule's weekdays and hours are read at: the movement's creation (a
    /// movement asked for in office hours stays in them while it is approved and claimed).
    pub at: DateTime<Utc>,
    /// When the version in force is read (now at approval and claim; `None`: at `at`).
    pub policy_at: Option<DateTime<Utc>>,
}

/// The intent's destination as an address: a string, or an object's `address`.
pub fn destination(intent: &Value) -> Option<&str> {
    match intent.get("destination") {
        Some(Value::String(s)) => Some(s),
        Some(Value::Object(o)) => o.get("address").and_then(Value::as_str),
        _ => None,
    }
}

fn facts_of(entry: Option<BookEntry>) -> Option<BookFacts> {
    entry.map(|e| BookFacts { name: e.name, tags: e.tags })
}

/// Whether a plan's `risk_controls` require destinations from the address book.
pub(crate) fn requires_book(risk_controls: &Value) -> bool {
    risk_controls.get("require_address_book").and_then(Value::as_bool) == Some(true)
}

/// The active entry past its cool-down that covers `payee` — its lane, network, address and
/// memo (`Payee::matches`) — if any.
async fn book_entry(conn: &mut PgConnection, payee: Option<&Payee>) -> Result<Option<BookEntry>, OpError> {
    let Some(p) = payee else { return Ok(None) };
    let mut entries: Vec<BookEntry> = pq::usable_entries(conn, &p.address)
        .await?
        .into_iter()
        .filter(|e| p.matches(&e.lane, &e.network, &e.address, &e.memo))
        .collect();
    // An entry naming the network before one that covers any network of the lane.
    entries.sort_by_key(|e| e.network.is_empty());
    Ok(entries.into_iter().next())
}

/// One movement whose outcome a candidate version changes.
#[derive(Debug, Clone, Serialize)]
pub struct SimulatedChange {
    pub movement_id: Uuid,
    pub template_key: String,
    pub created_at: DateTime<Utc>,
    pub intent: Value,
    /// What decided it (the policy version and rule recorded at creation, or none).
    pub before: Outcome,
    /// What the candidate decides.
    pub after: Outcome,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub policy_version: Option<i32>,
    pub rule: Option<String>,
    /// blocked, or approve
    pub outcome: String,
    /// The approver groups it needs (approve), as `min of group`.
    pub approvers: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Simulation {
    /// Movements evaluated (created in the window).
    pub evaluated: usize,
    /// More movements were created in the window than were evaluated (the oldest were).
    pub truncated: bool,
    pub changed: Vec<SimulatedChange>,
}

fn outcome(version: Option<i32>, d: &Decision) -> Outcome {
    Outcome {
        policy_version: version,
        rule: Some(d.rule.clone()),
        outcome: if d.blocked().is_some() { "blocked" } else { "approve" }.into(),
        approvers: d.groups().iter().map(|g| format!("{} of {}", g.min, g.label())).collect(),
    }
}

impl Engine {
    /// What the policy in force at `facts.at` decides (`None`: no version is in force — the
    /// template's approvals and the risk limits alone apply).
    pub(crate) async fn policy_decision(
        &self,
        conn: &mut PgConnection,
        facts: &Facts<'_>,
    ) -> Result<Option<Decided>, OpError> {
        match self.policy_in_force(conn, facts.policy_at.unwrap_or(facts.at)).await? {
            Some(in_force) => Ok(Some(self.decide(conn, in_force, facts).await?)),
            None => Ok(None),
        }
    }

    /// The policy version in force at `at`, read (`None`: none is).
    pub(crate) async fn policy_in_force(
        &self,
        conn: &mut PgConnection,
        at: DateTime<Utc>,
    ) -> Result<Option<(i32, Policy)>, OpError> {
        let Some(v) = pq::in_force(conn, Some(at)).await? else {
            return Ok(None);
        };
        let policy = Policy::from_json(&v.document)
            .map_err(|e| OpError::Validation(format!("policy version {} cannot be read: {e}", v.version)))?;
        Ok(Some((v.version, policy)))
    }

    /// What version `in_force` decides for `facts`, the address book read now.
    pub(crate) async fn decide(
        &self,
        conn: &mut PgConnection,
        (version, policy): (i32, Policy),
        facts: &Facts<'_>,
    ) -> Result<Decided, OpError> {
        let decision = self.decide_with(conn, &policy, facts).await?;
        Ok(Decided { version, policy, decision })
    }

    /// `policy`'s decision for `facts`, the address book read now.
    async fn decide_with(
        &self,
        conn: &mut PgConnection,
        policy: &Policy,
        facts: &Facts<'_>,
    ) -> Result<Decision, OpError> {
        let intent = facts.intent;
        let amount = intent.get("amount").and_then(Value::as_str).and_then(Amount::parse).unwrap_or(Amount::ZERO);
        let (source, dest) = (Payee::source(facts.plan, intent), Payee::destination(facts.plan, intent));
        let source_entry = facts_of(book_entry(conn, source.as_ref()).await?);
        let dest_entry = facts_of(book_entry(conn, dest.as_ref()).await?);
        let subject = Subject {
            template_key: facts.template_key,
            asset: intent.get("asset").and_then(Value::as_str).unwrap_or(""),
            amount: &amount,
            source: source.as_ref().map(|p| p.address.as_str()),
            destination: dest.as_ref().map(|p| p.address.as_str()),
            source_entry: source_entry.as_ref(),
            destination_entry: dest_entry.as_ref(),
            requester: facts.requester,
            requester_role: facts.requester_role,
            weekday: facts.at.weekday().num_days_from_monday() as u8,
            minute: (facts.at.hour() * 60 + facts.at.minute()) as u16,
        };
        Ok(policy.decide(&subject))
    }

    /// A template whose `risk_controls.require_address_book` is true pays only an active book
    /// entry past its cool-down, on the lane, network and memo the movement pays with.
    pub(crate) async fn check_book(
        &self,
        conn: &mut PgConnection,
        plan: &PlanDefinition,
        intent: &Value,
    ) -> Result<(), OpError> {
        if !requires_book(&plan.risk_controls) {
            return Ok(());
        }
        let Some(payee) = Payee::destination(plan, intent) else {
            return Err(OpError::Policy {
                code: codes::ADDRESS_NOT_IN_BOOK,
                message: "the template requires an address-book destination and the intent names none".into(),
            });
        };
        match book_entry(conn, Some(&payee)).await? {
            Some(_) => Ok(()),
            None => Err(OpError::Policy {
                code: codes::ADDRESS_NOT_IN_BOOK,
                message: format!(
                    "destination {:?} (lane {}, network {:?}, memo {:?}) is not an active address-book entry past \
                     its cool-down (the template requires one)",
                    payee.address, payee.lane, payee.network, payee.memo
                ),
            }),
        }
    }

    /// Records the decision on movement `id` (its version, rule and groups) and shortens its
    /// approval window to the rule's TTL.
    pub(crate) async fn record_decision(
        &self,
        conn: &mut PgConnection,
        id: Uuid,
        decided: Option<&Decided>,
        requester_role: Option<&str>,
    ) -> Result<(), OpError> {
        let Some(d) = decided else {
            qtg_store::movements::set_policy(conn, id, None, None, None, None, requester_role).await?;
            return Ok(());
        };
        let groups = json!(d.decision.groups());
        let max_fee = match &d.decision.action {
            qtg_core::policy::Action::Approve { max_fee, .. } => max_fee.as_deref(),
            qtg_core::policy::Action::Block { .. } => None,
        };
        qtg_store::movements::set_policy(
            conn,
            id,
            Some(d.version),
            Some(&d.decision.rule),
            Some(&groups),
            max_fee,
            requester_role,
        )
        .await?;
        if let qtg_core::policy::Action::Approve { approval_ttl_seconds: Some(ttl), .. } = &d.decision.action {
            qtg_store::movements::shorten_expiry(conn, id, *ttl as f64).await?;
        }
        Ok(())
    }

    /// The approvals `row` has (principal, role) and whether `actor` may add one, under the
    /// policy in force now. `Ok(None)`: no policy is in force.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn policy_at_approval(
        &self,
        conn: &mut PgConnection,
        row: &RequestRow,
        plan: &PlanDefinition,
        actor: &str,
        actor_role: &str,
        approvals: &[qtg_store::movements::Approval],
        needed: i32,
    ) -> Result<Option<(Decided, bool)>, OpError> {
        let facts = Facts {
            template_key: &row.template_key,
            plan,
            intent: &row.intent,
            requester: &row.created_by,
            requester_role: row.created_by_role.as_deref(),
            at: row.created_at,
            policy_at: Some(Utc::now()),
        };
        let Some(decided) = self.policy_decision(conn, &facts).await? else {
            return Ok(None);
        };
        if let Some(refusal) = decided.refusal() {
            return Err(refusal);
        }
        let given: Vec<(String, String)> = approvals
            .iter()
            .map(|a| (a.approver.clone(), a.approver_role.clone().unwrap_or_else(|| "approver".into())))
            .collect();
        let groups = decided.decision.groups().to_vec();
        // Every seat filled but the template's or the risk limits' m-of-n not yet: any other
        // approver counts towards that count.
        let seats_filled = decided.policy.progress(&groups, &given, &row.created_by).satisfied;
        let count_short = (given.len() as i32) < needed;
        let counts = decided.policy.would_count(&groups, &given, &row.created_by, actor, actor_role)
            || (seats_filled && count_short);
        if !counts {
            let progress = decided.policy.progress(&groups, &given, &row.created_by);
            let open: Vec<String> = progress
                .groups
                .iter()
                .filter(|g| (g.approved_by.len() as u32) < g.min)
                .map(|g| format!("{} ({} of {})", g.group, g.approved_by.len(), g.min))
                .collect();
            return Err(OpError::Policy {
                code: codes::POLICY_NOT_APPROVER,
                message: format!(
                    "policy version {} rule {:?}: {actor} is in none of the approver groups this movement still \
                     needs: {}",
                    decided.version,
                    decided.decision.rule,
                    if open.is_empty() { "none (every group is filled)".into() } else { open.join(", ") }
                ),
            });
        }
        let mut with = given;
        with.push((actor.to_string(), actor_role.to_string()));
        let satisfied = decided.policy.progress(&groups, &with, &row.created_by).satisfied;
        Ok(Some((decided, satisfied)))
    }

    /// Proposes a new policy version (validated), in force once other admins approve it, from
    /// `effective_at` (or its approval, if later).
    pub async fn propose_policy(
        &self,
        actor: &str,
        document: &Value,
        description: Option<&str>,
        effective_at: Option<DateTime<Utc>>,
    ) -> Result<PolicyVersion, OpError> {
        Policy::from_json(document).map_err(|e| OpError::Validation(e.0))?;
        let mut tx = self.pool.begin().await?;
        let res = async {
            let hash = canonical_hash(document);
            let required = self.settings.policy_change_approvals.max(1) as i32;
            let v = pq::insert_version(&mut tx, document, &hash, description, actor, required, effective_at).await?;
            AuditRecord::new(actor, "policy.propose", "policy", v.version)
                .data(json!({"version": v.version, "document_hash": hash, "effective_at": v.effective_at,
                             "approvals_required": required, "description": description}))
                .record(&mut tx)
                .await?;
            Ok(v)
        }
        .await;
        finish(tx, res).await
    }

    /// An admin's decision on a pending version: an approval (never the proposer's; in force
    /// once it has the approvals it needs) or a rejection (the proposer may withdraw it).
    pub async fn decide_policy(
        &self,
        actor: &str,
        version: i32,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<(PolicyVersion, Vec<PolicyApproval>), OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let v = pq::get_version(&mut tx, version, true).await?.ok_or(OpError::NotFound("policy version"))?;
            if v.status != "pending" {
                return Err(OpError::InvalidState(format!("policy version {version} is {}", v.status)));
            }
            let own = qtg_core::text::same_principal(&v.proposed_by, actor);
            if !approve {
                let v = pq::decide_version(&mut tx, version, false, actor, reason).await?;
                AuditRecord::new(actor, "policy.reject", "policy", version)
                    .data(json!({"version": version, "reason": reason, "withdrawn": own}))
                    .record(&mut tx)
                    .await?;
                let approvals = pq::approvals(&mut tx, version).await?;
                return Ok((v, approvals));
            }
            if own {
                return Err(OpError::SelfApproval(format!(
                    "{actor} proposed policy version {version}: other admins approve it"
                )));
            }
            let given = pq::approvals(&mut tx, version).await?;
            if given.iter().any(|a| qtg_core::text::same_principal(&a.approver, actor))
                || !pq::add_approval(&mut tx, version, actor, reason).await?
            {
                return Err(OpError::Conflict(format!("{actor} has already approved policy version {version}")));
            }
            let have = given.len() as i32 + 1;
            AuditRecord::new(actor, "policy.approval", "policy", version)
                .data(json!({"version": version, "approvals": have, "approvals_required": v.approvals_required,
                             "reason": reason, "document_hash": v.document_hash}))
                .record(&mut tx)
                .await?;
            let v = if have >= v.approvals_required {
                let v = pq::decide_version(&mut tx, version, true, actor, reason).await?;
                AuditRecord::new(actor, "policy.approve", "policy", version)
                    .data(json!({"version": version, "effective_at": v.effective_at, "document_hash": v.document_hash}))
                    .record(&mut tx)
                    .await?;
                tracing::info!(version, effective_at = %v.effective_at, "policy version approved");
                v
            } else {
                v
            };
            let approvals = pq::approvals(&mut tx, version).await?;
            Ok((v, approvals))
        }
        .await;
        finish(tx, res).await
    }

    /// What `document` would have decided for each movement created in the last `days` days
    /// (at most `limit`, oldest first), against what decided them: the movements whose outcome
    /// (blocked or approved) or approver groups change.
    pub async fn simulate_policy(&self, document: &Value, days: f64, limit: i64) -> Result<Simulation, OpError> {
        let candidate = Policy::from_json(document).map_err(|e| OpError::Validation(e.0))?;
        let mut conn = self.pool.acquire().await?;
        let since = Utc::now() - chrono::Duration::milliseconds((days * 86_400_000.0) as i64);
        let rows = qtg_store::movements::created_since(&mut conn, since, limit).await?;
        let mut plans: std::collections::HashMap<(String, i32), PlanDefinition> = std::collections::HashMap::new();
        let mut changed = Vec::new();
        for row in &rows {
            let which = (row.template_key.clone(), row.template_version);
            if !plans.contains_key(&which) {
                let pv = qtg_store::templates::plan_version(&mut conn, &row.template_key, Some(row.template_version))
                    .await?
                    .ok_or(OpError::NotFound("template version"))?;
                plans.insert(which.clone(), pv.plan);
            }
            let plan = &plans[&which];
            let facts = Facts {
                template_key: &row.template_key,
                plan,
                intent: &row.intent,
                requester: &row.created_by,
                requester_role: row.created_by_role.as_deref(),
                at: row.created_at,
                policy_at: None,
            };
            // What decided it, as recorded on it (a movement that exists was not blocked).
            let before = match (&row.policy_rule, &row.policy_groups) {
                (Some(rule), Some(groups)) => {
                    let groups: Vec<qtg_core::policy::ApproverGroup> =
                        serde_json::from_value(groups.clone()).unwrap_or_default();
                    Outcome {
                        policy_version: row.policy_version,
                        rule: Some(rule.clone()),
                        outcome: "approve".into(),
                        approvers: groups.iter().map(|g| format!("{} of {}", g.min, g.label())).collect(),
                    }
                }
                _ => Outcome {
                    policy_version: None,
                    rule: None,
                    outcome: "approve".into(),
                    approvers: vec![format!("{} of role approver", row.approvals_required)],
                },
            };
            let after = outcome(None, &self.decide_with(&mut conn, &candidate, &facts).await?);
            if before.outcome != after.outcome || before.approvers != after.approvers {
                changed.push(SimulatedChange {
                    movement_id: row.id,
                    template_key: row.template_key.clone(),
                    created_at: row.created_at,
                    intent: row.intent.clone(),
                    before,
                    after,
                });
            }
        }
        Ok(Simulation { evaluated: rows.len(), truncated: rows.len() as i64 >= limit, changed })
    }

    /// Proposes an address-book entry (or a change of entry `replaces`): pending until an admin
    /// other than the proposer activates it.
    #[allow(clippy::too_many_arguments)]
    pub async fn propose_book_entry(
        &self,
        actor: &str,
        name: &str,
        lane: &str,
        network: &str,
        address: &str,
        memo: &str,
        tags: &[String],
        cool_down_seconds: Option<f64>,
        replaces: Option<Uuid>,
        reason: Option<&str>,
    ) -> Result<BookEntry, OpError> {
        let floor = self.settings.address_book_cool_down.as_secs_f64();
        let cool_down = cool_down_seconds.unwrap_or(floor).max(floor);
        let mut tx = self.pool.begin().await?;
        let res = async {
            if let Some(old) = replaces {
                let e = pq::get_entry(&mut tx, old, false).await?.ok_or(OpError::NotFound("address-book entry"))?;
                if e.status != "active" {
                    return Err(OpError::InvalidState(format!(
                        "entry {old} is {}: only an active entry is changed",
                        e.status
                    )));
                }
            }
            let e = pq::insert_entry(
                &mut tx,
                &NewEntry {
                    name,
                    lane,
                    network,
                    address,
                    memo,
                    tags,
                    proposed_by: actor,
                    cool_down_seconds: cool_down,
                    replaces,
                    reason,
                },
            )
            .await?;
            AuditRecord::new(actor, "address_book.propose", "address_book", e.id)
                .data(json!({"name": name, "lane": lane, "network": network, "address": address, "memo": memo,
                             "tags": tags,
                             "cool_down_seconds": cool_down, "replaces": replaces, "reason": reason}))
                .record(&mut tx)
                .await?;
            Ok(e)
        }
        .await;
        finish(tx, res).await
    }

    /// A second admin activates (usable after its cool-down) or rejects a pending entry.
    pub async fn decide_book_entry(
        &self,
        actor: &str,
        id: Uuid,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<BookEntry, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let e = pq::get_entry(&mut tx, id, true).await?.ok_or(OpError::NotFound("address-book entry"))?;
            if e.status != "pending" {
                return Err(OpError::InvalidState(format!("address-book entry {id} is {}", e.status)));
            }
            if approve && qtg_core::text::same_principal(&e.proposed_by, actor) {
                return Err(OpError::SelfApproval(format!(
                    "{actor} proposed this address-book entry: another admin activates it"
                )));
            }
            let decided = match pq::decide_entry(&mut tx, id, approve, actor).await {
                Err(qtg_store::StoreError::Sqlx(e))
                    if e.as_database_error().is_some_and(|d| d.is_unique_violation()) =>
                {
                    return Err(OpError::Conflict(
                        "an active entry already has this name, or this address and memo on this lane and network"
                            .into(),
                    ));
                }
                other => other?,
            };
            AuditRecord::new(
                actor,
                if approve { "address_book.activate" } else { "address_book.reject" },
                "address_book",
                id,
            )
            .data(json!({"name": e.name, "address": e.address, "usable_at": decided.usable_at, "reason": reason,
                             "replaces": e.replaces}))
            .record(&mut tx)
            .await?;
            Ok(decided)
        }
        .await;
        finish(tx, res).await
    }

    /// Removes an active entry (it only narrows what may be paid: one admin, audited).
    pub async fn remove_book_entry(&self, actor: &str, id: Uuid, reason: &str) -> Result<BookEntry, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            if !pq::remove_entry(&mut tx, id).await? {
                return Err(match pq::get_entry(&mut tx, id, false).await? {
                    Some(e) => OpError::InvalidState(format!("address-book entry {id} is {}", e.status)),
                    None => OpError::NotFound("address-book entry"),
                });
            }
            AuditRecord::new(actor, "address_book.remove", "address_book", id)
                .data(json!({"reason": reason}))
                .record(&mut tx)
                .await?;
            pq::get_entry(&mut tx, id, false).await?.ok_or(OpError::NotFound("address-book entry"))
        }
        .await;
        finish(tx, res).await
    }
}
