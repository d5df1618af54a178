//! CCIP send intents (`ccip_send_intent`, docs/architecture.md §9.7): recorded when a send's
//! transaction is built, marked with each hash before its broadcast, resolved by the message's
//! fate; the stranded reaper ends the ones nothing else will.

use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// What a send is about to do (its transaction built, the nonce reserved, nothing signed yet).
#[derive(Debug, Clone, PartialEq)]
pub struct Intent<'a> {
    pub request_node_id: Uuid,
    pub attempt_no: i32,
    pub chain_id: i64,
    pub from_address: &'a str,
    pub nonce: i64,
    pub reservation_id: i64,
    pub router: &'a str,
    pub destination_chain_selector: &'a str,
    pub receiver: &'a str,
    pub token: &'a str,
    pub amount: &'a str,
    pub fee_token: &'a str,
    pub max_fee: &'a str,
}

/// Records the intent, or refreshes it (the attempt, the reservation) when the node built on this
/// nonce before; one the reaper released is live again (`prepared`).
pub async fn record(pool: &PgPool, i: &Intent<'_>) -> Result<()> {
    sqlx::query!(
        "INSERT INTO ccip_send_intent (request_node_id, request_id, attempt_no, chain_id, from_address, nonce,
                                       reservation_id, router, destination_chain_selector, receiver, token, amount,
                                       fee_token, max_fee)
         SELECT $1, n.request_id, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13
           FROM movement_request_nodes n WHERE n.id = $1
         ON CONFLICT (request_node_id, nonce) DO UPDATE
            SET attempt_no = EXCLUDED.attempt_no, reservation_id = EXCLUDED.reservation_id, updated_at = now(),
                -- A retry on a nonce the reaper released (gap reuse gave it back) is a live intent again.
                status = CASE WHEN ccip_send_intent.status = 'released' THEN 'prepared'
                              ELSE ccip_send_intent.status END,
                resolved_at = CASE WHEN ccip_send_intent.status = 'released' THEN NULL
                                   ELSE ccip_send_intent.resolved_at END",
        i.request_node_id,
        i.attempt_no,
        i.chain_id,
        i.from_address.to_ascii_lowercase(),
        i.nonce,
        i.reservation_id,
        i.router.to_ascii_lowercase(),
        i.destination_chain_selector,
        i.receiver.to_ascii_lowercase(),
        i.token.to_ascii_lowercase(),
        i.amount,
        i.fee_token.to_ascii_lowercase(),
        i.max_fee
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Adds `hash` to the node's intent for `nonce` before it is broadcast. `false`: no open
/// intent (never recorded, or already ended): nothing may be sent.
pub async fn mark_broadcast(pool: &PgPool, node: Uuid, nonce: i64, hash: &str) -> Result<bool> {
    let moved = sqlx::query!(
        "UPDATE ccip_send_intent
            SET status = CASE WHEN status = 'prepared' THEN 'broadcast' ELSE status END, updated_at = now(),
                tx_hashes = CASE WHEN tx_hashes ? $3 THEN tx_hashes ELSE tx_hashes || to_jsonb($3::text) END
          WHERE request_node_id = $1 AND nonce = $2 AND status IN ('prepared', 'broadcast', 'sent')",
        node,
        nonce,
        hash.to_ascii_lowercase()
    )
    .execute(pool)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// The send's transaction `hash` is final: its message's id and sequence number (the intent
/// with that hash is `sent`).
pub async fn mark_sent(pool: &PgPool, node: Uuid, hash: &str, message_id: &str, sequence_number: i64) -> Result<()> {
    sqlx::query!(
        "UPDATE ccip_send_intent SET status = 'sent', message_id = $3, sequence_number = $4, updated_at = now()
          WHERE request_node_id = $1 AND tx_hashes ? $2 AND status IN ('prepared', 'broadcast', 'sent')",
        node,
        hash.to_ascii_lowercase(),
        message_id.to_ascii_lowercase(),
        sequence_number
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The message's execution on the destination: `executed` (SUCCESS, final) or `failed`
/// (FAILURE, not final: a later SUCCESS still moves it to `executed`).
pub async fn mark_execution(pool: &PgPool, message_id: &str, success: bool) -> Result<()> {
    let status = if success { "executed" } else { "failed" };
    sqlx::query!(
        "UPDATE ccip_send_intent
            SET status = $2, updated_at = now(), resolved_at = CASE WHEN $2 = 'executed' THEN now() ELSE resolved_at END
          WHERE message_id = $1 AND status IN ('sent', 'failed', 'escalated')",
        message_id.to_ascii_lowercase(),
        status
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// An intent the stranded reaper ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Reaped {
    pub id: i64,
    pub request_node_id: Uuid,
    pub request_id: Option<Uuid>,
    pub chain_id: i64,
    pub nonce: i64,
    pub message_id: Option<String>,
}

/// Ends intents that were never broadcast, older than `age_seconds`, whose node is not in
/// flight and for which no signer can hold a signature (no `sign_result` of the node since
/// the intent, no prepared action handed to a signer unless the signer refused it): each is
/// `released`, its nonce reservation given back when nothing was broadcast with it (the EVM
/// rules), one audit row `ccip.intent.released` each — in the caller's transaction, rows
/// locked `SKIP LOCKED` (one reaper replica takes each).
pub async fn release_stranded(
    conn: &mut sqlx::PgConnection,
    age_seconds: f64,
    actor: &str,
    limit: i64,
) -> Result<Vec<Reaped>> {
    let rows = sqlx::query_as!(
        Reaped,
        "WITH stale AS (
             SELECT i.id FROM ccip_send_intent i
               JOIN movement_request_nodes n ON n.id = i.request_node_id
              WHERE i.status = 'prepared' AND i.tx_hashes = '[]'::jsonb
                AND i.updated_at < now() - make_interval(secs => $1)
                AND n.node_state NOT IN ('READY', 'PREPARING', 'AWAITING_SIGNATURE', 'SUBMITTING', 'SUBMITTED', \
                    'OBSERVING', 'UNKNOWN')
                -- Never after a signer may have signed: a signature stored, or a prepared action
                -- handed to a signer — excused only for the last prepared attempt when its signer
                -- refused it (an earlier attempt's signer may have signed and not answered).
                AND NOT EXISTS (SELECT 1 FROM artifacts a
                                 WHERE a.request_node_id = n.id AND a.created_at >= i.created_at
                                   AND (a.kind = 'sign_result'
                                        OR (a.kind = 'prepared_action'
                                            AND (n.error_code IS DISTINCT FROM 'SIGNER_REFUSED'
                                                 OR a.attempt_no < (SELECT max(p.attempt_no) FROM artifacts p
                                                                     WHERE p.request_node_id = n.id
                                                                       AND p.kind = 'prepared_action')))))
              ORDER BY i.id
              LIMIT $2
              FOR UPDATE OF i, n SKIP LOCKED)
         UPDATE ccip_send_intent i SET status = 'released', updated_at = now(), resolved_at = now()
           FROM stale WHERE i.id = stale.id
         RETURNING i.id, i.request_node_id, i.request_id, i.chain_id, i.nonce, i.message_id",
        age_seconds,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    for r in &rows {
        let nonce = sqlx::query_scalar!(
            "UPDATE evm_nonce_reservation r SET status = 'released', updated_at = now()
               FROM ccip_send_intent i
              WHERE i.id = $1 AND r.id = i.reservation_id AND r.request_node_id = i.request_node_id
                AND r.status = 'reserved' AND r.tx_hashes = '[]'::jsonb AND r.cancel_hashes = '[]'::jsonb
             RETURNING r.nonce",
            r.id
        )
        .fetch_optional(&mut *conn)
        .await?;
        crate::audit::record(
            conn,
            &crate::audit::AuditRecord {
                actor,
                action: "ccip.intent.released",
                entity_type: "node",
                entity_id: r.request_node_id.to_string(),
                movement_id: r.request_id,
                data: serde_json::json!({
                    "intent_id": r.id, "chain_id": r.chain_id, "nonce": r.nonce, "age_seconds": age_seconds,
                    "nonce_released": nonce.is_some(),
                }),
            },
        )
        .await?;
    }
    Ok(rows)
}

/// Intents whose message left (`sent`) but shows no execution `age_seconds` after it was
/// known: each is `escalated` with one audit row `ccip.intent.escalated`, in the caller's
/// transaction, rows locked `SKIP LOCKED`. The caller hands the movement's delivery node to
/// a person.
pub async fn escalate_overdue(
    conn: &mut sqlx::PgConnection,
    age_seconds: f64,
    actor: &str,
    limit: i64,
) -> Result<Vec<Reaped>> {
    let rows = sqlx::query_as!(
        Reaped,
        "WITH overdue AS (
             SELECT i.id FROM ccip_send_intent i
              WHERE i.status = 'sent' AND i.updated_at < now() - make_interval(secs => $1)
              ORDER BY i.id
              LIMIT $2
              FOR UPDATE OF i SKIP LOCKED)
         UPDATE ccip_send_intent i SET status = 'escalated', updated_at = now()
           FROM overdue WHERE i.id = overdue.id
         RETURNING i.id, i.request_node_id, i.request_id, i.chain_id, i.nonce, i.message_id",
        age_seconds,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    for r in &rows {
        crate::audit::record(
            conn,
            &crate::audit::AuditRecord {
                actor,
                action: "ccip.intent.escalated",
                entity_type: "node",
                entity_id: r.request_node_id.to_string(),
                movement_id: r.request_id,
                data: serde_json::json!({
                    "intent_id": r.id, "chain_id": r.chain_id, "nonce": r.nonce, "message_id": r.message_id,
                    "age_seconds": age_seconds,
                }),
            },
        )
        .await?;
    }
    Ok(rows)
}

/// The open delivery nodes (`ccip_delivery`, OBSERVING) of a movement that follow the message
/// `message_id` (their refs name it): where an overdue message is handed to a person.
pub async fn delivery_nodes(conn: &mut sqlx::PgConnection, movement: Uuid, message_id: &str) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar!(
        "SELECT n.id FROM movement_request_nodes n JOIN plan_nodes p ON p.id = n.plan_node_id
          WHERE n.request_id = $1 AND p.action_type = 'ccip_delivery' AND n.node_state = 'OBSERVING'
            AND lower(n.provider_refs->>'message_id') = lower($2)
          ORDER BY n.id FOR UPDATE OF n",
        movement,
        message_id
    )
    .fetch_all(&mut *conn)
    .await?)
}
