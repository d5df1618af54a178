//! Operations on who may call qtg and on what qtg trusts: API keys, a dead-lettered
//! callback's replay, a signer's expected identity. Each runs in one transaction with its
//! audit row.

use qtg_core::hash::sha256_hex;
use qtg_store::audit::AuditRecord;
use qtg_store::callbacks::CallbackRow;
use qtg_store::health::SignerHealth;
use serde_json::json;
use uuid::Uuid;

use crate::movements::{finish, OpError};
use crate::Engine;

/// A key as stored: only the sha256 of its secret.
pub fn key_hash(secret: &str) -> String {
    sha256_hex(secret.as_bytes())
}

/// What a create asked for became.
#[derive(Debug, Clone)]
pub enum KeyCreation {
    Created(CreatedKey),
    /// Waiting for a second admin.
    Requested(qtg_store::api_keys::KeyRequest),
}

/// A decided key request, and the key an approval created.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyDecision {
    pub request: qtg_store::api_keys::KeyRequest,
    pub key: Option<CreatedKey>,
}

async fn insert_key(
    conn: &mut sqlx::PgConnection,
    principal: &str,
    roles: &[String],
    created_by: &str,
) -> Result<CreatedKey, OpError> {
    let secret = format!("qtg_{}", hex::encode(rand::random::<[u8; 24]>()));
    let id = Uuid::new_v4();
    let key = qtg_store::api_keys::NewKey {
        id,
        principal,
        roles,
        key_hash: &key_hash(&secret),
        created_by: Some(created_by),
        ttl_seconds: None,
        bootstrap: false,
    };
    qtg_store::api_keys::insert(conn, &key).await?;
    Ok(CreatedKey { id, principal: principal.to_string(), roles: roles.to_vec(), secret })
}

/// Refuses `principal` when it looks like an existing principal without being it
/// (`qtg_core::text::same_principal`).
async fn refuse_lookalike(conn: &mut sqlx::PgConnection, principal: &str) -> Result<(), OpError> {
    let existing = qtg_store::api_keys::principals_locked(conn).await?;
    match existing.iter().find(|p| p.as_str() != principal && qtg_core::text::same_principal(p, principal)) {
        Some(other) => Err(OpError::Conflict(format!(
            "principal {principal:?} looks like the existing principal {other:?} (same letters after Unicode \
             normalisation, case folding and confusable mapping): use that spelling or another name"
        ))),
        None => Ok(()),
    }
}

/// A created key; `secret` is shown once and never stored.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CreatedKey {
    pub id: Uuid,
    pub principal: String,
    pub roles: Vec<String>,
    pub secret: String,
}

impl Engine {
    /// Creates an API key for `principal` with `roles` (validated by the caller) — or, when
    /// key creation needs two admins (`MG_API_KEY_CREATION_APPROVALS=2`, or once a policy
    /// version has been approved or a book entry activated), records a request a second admin
    /// approves. A principal is plain text (`qtg_core::text::check_plain`: no
    /// control, format or invisible characters, no surrounding spaces) and does not look like
    /// another: `Alice`, `alice` and `аlice` (Cyrillic а) would be one person to the eye and
    /// two to the four-eyes rules.
    pub async fn create_api_key(&self, actor: &str, principal: &str, roles: &[String]) -> Result<KeyCreation, OpError> {
        qtg_core::text::check_plain("principal", principal, 128).map_err(|e| OpError::Validation(e.to_string()))?;
        let mut tx = self.pool.begin().await?;
        let res = async {
            refuse_lookalike(&mut tx, principal).await?;
            // Once a policy or the address book governs, no admin makes a key alone: a second
            // identity (or a key for an existing approver) would let one person change a rule
            // and approve its use.
            let governed = qtg_store::policy::governed(&mut tx).await?;
            if self.settings.key_creation_approvals >= 2 || governed {
                let request =
                    qtg_store::api_keys::insert_request(&mut tx, Uuid::new_v4(), principal, roles, actor).await?;
                let why = if governed { "a policy or the address book is in force" } else { "configured" };
                AuditRecord::new(actor, "api_key.request", "api_key", request.id)
                    .data(json!({"principal": principal, "roles": roles, "two_admins": why}))
                    .record(&mut tx)
                    .await?;
                return Ok(KeyCreation::Requested(request));
            }
            let key = insert_key(&mut tx, principal, roles, actor).await?;
            AuditRecord::new(actor, "api_key.create", "api_key", key.id)
                .data(json!({"principal": principal, "roles": roles, "approvals": 1}))
                .record(&mut tx)
                .await?;
            Ok(KeyCreation::Created(key))
        }
        .await;
        finish(tx, res).await
    }

    /// A second admin decides a key request: approving creates the key (its secret goes to
    /// the approver, once); nobody decides their own request.
    pub async fn decide_key_request(&self, actor: &str, id: Uuid, approve: bool) -> Result<KeyDecision, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let request = qtg_store::api_keys::request_for_update(&mut tx, id)
                .await?
                .ok_or(OpError::NotFound("api key request"))?;
            if request.status != "pending" {
                return Err(OpError::InvalidState(format!("the key request is {}", request.status)));
            }
            if qtg_core::text::same_principal(&request.requested_by, actor) {
                return Err(OpError::SelfApproval("a second admin decides a key request, not its requester".into()));
            }
            let key = if approve {
                refuse_lookalike(&mut tx, &request.principal).await?;
                Some(insert_key(&mut tx, &request.principal, &request.roles, &request.requested_by).await?)
            } else {
                None
            };
            let status = if approve { "approved" } else { "rejected" };
            let request =
                qtg_store::api_keys::decide_request(&mut tx, id, status, actor, key.as_ref().map(|k| k.id)).await?;
            let action = if approve { "api_key.approve" } else { "api_key.reject" };
            AuditRecord::new(actor, action, "api_key", id)
                .data(json!({"principal": request.principal, "roles": request.roles,
                             "requested_by": request.requested_by, "key_id": request.key_id}))
                .record(&mut tx)
                .await?;
            Ok(KeyDecision { request, key })
        }
        .await;
        finish(tx, res).await
    }

    /// Revokes key `id`; `NotFound` when no live key has it.
    pub async fn revoke_api_key(&self, actor: &str, id: Uuid) -> Result<(), OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            if !qtg_store::api_keys::revoke(&mut tx, id).await? {
                return Err(OpError::NotFound("api key"));
            }
            AuditRecord::new(actor, "api_key.revoke", "api_key", id).record(&mut tx).await?;
            Ok(())
        }
        .await;
        finish(tx, res).await
    }

    /// Replays dead letter `id`: a new outbox row with the same event, a fresh timestamp and
    /// nonce. Only a `dlq` row can be replayed, and only once (a replay that dead-letters in
    /// turn is replayed itself). `reason` goes to the audit trail.
    pub async fn replay_callback(&self, actor: &str, id: Uuid, reason: Option<&str>) -> Result<CallbackRow, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let Some(row) = qtg_store::callbacks::replay(&mut tx, id).await? else {
                return Err(if let Some(replay) = qtg_store::callbacks::replayed_as(&mut tx, id).await? {
                    OpError::InvalidState(format!("this dead letter was already replayed as callback {replay}"))
                } else if qtg_store::callbacks::exists(&mut tx, id).await? {
                    OpError::InvalidState("only a dlq callback can be replayed".into())
                } else {
                    OpError::NotFound("callback")
                });
            };
            // A movement's callback, or an alert about none (drift_detected).
            let record = match row.request_id {
                Some(movement) => AuditRecord::new(actor, "callback.replay", "movement", movement).movement(movement),
                None => AuditRecord::new(actor, "callback.replay", "control", format!("callback:{}", row.id)),
            };
            record
                .data(json!({"replay_of": id, "new_callback_id": row.id, "event_id": row.event_id, "reason": reason}))
                .record(&mut tx)
                .await?;
            Ok(row)
        }
        .await;
        finish(tx, res).await
    }

    /// Enrols `address` (any spelling `canonical_address` accepts) as signer `key`'s expected
    /// identity; the only writer of it. `NotFound` until qtg-health has seen the signer.
    pub async fn set_expected_identity(&self, actor: &str, key: &str, address: &str) -> Result<SignerHealth, OpError> {
        let address = crate::health::canonical_address(address)
            .ok_or_else(|| OpError::Validation("address must be 0x followed by 40 hex digits, not all zero".into()))?;
        let mut tx = self.pool.begin().await?;
        let res = async {
            if !qtg_store::health::set_expected_identity(&mut tx, key, &address).await? {
                return Err(OpError::NotFound("signer (not yet seen by qtg-health)"));
            }
            AuditRecord::new(actor, "signer.expected_identity", "signer", key)
                .data(json!({"expected_signer_address": address}))
                .record(&mut tx)
                .await?;
            let signers = qtg_store::health::list_signers(&mut tx).await?;
            signers.into_iter().find(|r| r.signer_key == key).ok_or(OpError::NotFound("signer"))
        }
        .await;
        finish(tx, res).await
    }
}
