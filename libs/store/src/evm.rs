//! The EVM lane's nonce reservations (docs/architecture.md §9.5): the lane's fence. A nonce is
//! reserved per (chain, address) in one short transaction, owned by the node until a
//! transaction with it is final; every hash broadcast with it is recorded before the send.

use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;

/// A node's reservation.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    pub id: i64,
    pub chain_id: i64,
    pub address: String,
    pub nonce: i64,
    pub request_node_id: Option<Uuid>,
    pub status: String,
    pub tx_hashes: Vec<String>,
    /// Zero-value self-sends broadcast by recovery to force the nonce.
    pub cancel_hashes: Vec<String>,
}

fn hashes(v: &serde_json::Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|h| h.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// A [`Reservation`] from the record of a query that reads a reservation's columns (its hash
/// lists are JSON arrays in the table).
macro_rules! reservation {
    ($r:expr) => {{
        let r = $r;
        Reservation {
            id: r.id,
            chain_id: r.chain_id,
            address: r.address,
            nonce: r.nonce,
            request_node_id: r.request_node_id,
            status: r.status,
            tx_hashes: hashes(&r.tx_hashes),
            cancel_hashes: hashes(&r.cancel_hashes),
        }
    }};
}

/// The node's live reservation on `chain_id`, or a new one: the lowest released nonce at or
/// above `chain_next` (a gap to fill), else one above every nonce this address has used and
/// at least `chain_next` (the chain's pending count). One transaction, serialised per
/// (chain, address).
pub async fn reserve(pool: &PgPool, chain_id: i64, address: &str, node: Uuid, chain_next: i64) -> Result<Reservation> {
    let address = address.to_ascii_lowercase();
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtextextended($1::int8::text || ':' || $2, 17))", chain_id, address)
        .execute(&mut *tx)
        .await?;
    let live = sqlx::query!(
        "SELECT id, chain_id, address, nonce, request_node_id, status, tx_hashes, cancel_hashes
           FROM evm_nonce_reservation
          WHERE request_node_id = $1 AND chain_id = $2 AND status IN ('reserved', 'broadcast')",
        node,
        chain_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(row) = live {
        let r = reservation!(row);
        tx.commit().await?;
        return Ok(r);
    }
    let gap = sqlx::query!(
        "UPDATE evm_nonce_reservation SET status = 'reserved', request_node_id = $3, tx_hashes = '[]'::jsonb,
                updated_at = now()
          WHERE id = (SELECT r.id FROM evm_nonce_reservation r
                       WHERE r.chain_id = $1 AND r.address = $2 AND r.status = 'released' AND r.nonce >= $4
                         AND NOT EXISTS (SELECT 1 FROM evm_nonce_reservation l
                                          WHERE l.chain_id = r.chain_id AND l.address = r.address
                                            AND l.nonce = r.nonce AND l.status <> 'released')
                       ORDER BY r.nonce LIMIT 1)
          RETURNING id, chain_id, address, nonce, request_node_id, status, tx_hashes, cancel_hashes",
        chain_id,
        address,
        node,
        chain_next
    )
    .fetch_optional(&mut *tx)
    .await?;
    let r = match gap {
        Some(row) => reservation!(row),
        None => {
            let row = sqlx::query!(
                "INSERT INTO evm_nonce_reservation (chain_id, address, nonce, request_node_id, status)
                 SELECT $1, $2, GREATEST($4, COALESCE(max(nonce) + 1, 0)), $3, 'reserved'
                   FROM evm_nonce_reservation WHERE chain_id = $1 AND address = $2 AND status <> 'released'
                 RETURNING id, chain_id, address, nonce, request_node_id, status, tx_hashes, cancel_hashes",
                chain_id,
                address,
                node,
                chain_next
            )
            .fetch_one(&mut *tx)
            .await?;
            reservation!(row)
        }
    };
    tx.commit().await?;
    Ok(r)
}

/// Records `hash` as broadcast with the reservation, before the send. `false`: the
/// reservation is no longer the node's live one (consumed or released): nothing may be sent.
pub async fn mark_broadcast(pool: &PgPool, id: i64, node: Uuid, hash: &str) -> Result<bool> {
    let moved = sqlx::query!(
        "UPDATE evm_nonce_reservation
            SET status = 'broadcast', updated_at = now(),
                tx_hashes = CASE WHEN tx_hashes ? $3 THEN tx_hashes ELSE tx_hashes || to_jsonb($3::text) END
          WHERE id = $1 AND request_node_id = $2 AND status IN ('reserved', 'broadcast')",
        id,
        node,
        hash.to_ascii_lowercase()
    )
    .execute(pool)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Records a zero-value self-send `hash` that recovery broadcasts to force the nonce, before
/// the send. `false`: the reservation is no longer the node's live one.
pub async fn mark_cancel(pool: &PgPool, id: i64, node: Uuid, hash: &str) -> Result<bool> {
    let moved = sqlx::query!(
        "UPDATE evm_nonce_reservation
            SET updated_at = now(),
                cancel_hashes = CASE WHEN cancel_hashes ? $3 THEN cancel_hashes ELSE cancel_hashes || \
                    to_jsonb($3::text) END
          WHERE id = $1 AND request_node_id = $2 AND status IN ('reserved', 'broadcast')",
        id,
        node,
        hash.to_ascii_lowercase()
    )
    .execute(pool)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// The nonce is final on chain (`by` = the transaction hash that consumed it, the node's or
/// another's).
pub async fn mark_consumed(pool: &PgPool, id: i64, by: &str) -> Result<()> {
    sqlx::query!(
        "UPDATE evm_nonce_reservation SET status = 'consumed', consumed_by = $2, updated_at = now()
          WHERE id = $1 AND status IN ('reserved', 'broadcast')",
        id,
        by.to_ascii_lowercase()
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Gives back the node's reservation when nothing was ever broadcast with it (no transaction
/// or cancel hash): the node's effect happened without it (a CCTP message another caller
/// received first). `false` when something was broadcast with it or it is not the node's.
pub async fn release_unsent(pool: &PgPool, id: i64, node: Uuid) -> Result<bool> {
    let moved = sqlx::query!(
        "UPDATE evm_nonce_reservation SET status = 'released', updated_at = now()
          WHERE id = $1 AND request_node_id = $2 AND status = 'reserved'
            AND tx_hashes = '[]'::jsonb AND cancel_hashes = '[]'::jsonb",
        id,
        node
    )
    .execute(pool)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// A reservation given back — by a node that failed before anything was broadcast
/// ([`release_before_broadcast`]) or by the reaper ([`reclaim`]) — and the node and movement
/// that held it.
#[derive(Debug, Clone, PartialEq)]
pub struct GivenBack {
    pub id: i64,
    pub chain_id: i64,
    pub address: String,
    pub nonce: i64,
    pub request_node_id: Option<Uuid>,
    pub request_id: Option<Uuid>,
}

/// Reads what the releasing statement returned and writes one audit row `action` per
/// reservation, in the caller's transaction; `detail` is added to each row's data.
async fn audit_given_back(
    conn: &mut sqlx::PgConnection,
    rows: Vec<GivenBack>,
    actor: &str,
    action: &str,
    detail: (&str, serde_json::Value),
) -> Result<Vec<GivenBack>> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mut data = serde_json::json!({
            "reservation_id": r.id, "chain_id": r.chain_id, "address": r.address, "nonce": r.nonce,
        });
        data[detail.0] = detail.1.clone();
        crate::audit::record(
            conn,
            &crate::audit::AuditRecord {
                actor,
                action,
                // The node that held it (the reservation is in `data`).
                entity_type: "node",
                entity_id: r.request_node_id.map(|n| n.to_string()).unwrap_or_default(),
                movement_id: r.request_id,
                data,
            },
        )
        .await?;
        out.push(r);
    }
    Ok(out)
}

/// Gives back, in the caller's transaction, every reservation of `node` that nothing was
/// broadcast with and for which no signature can exist: no `sign_result` of the node since it
/// was made, and no prepared action handed to a signer since — except those of attempt
/// `cleared_attempt`, whose signer answered in a way that proves no usable signature exists
/// (it refused, or it signed as another address). A nonce a signature may exist for stays
/// with the node (a retry must use it again, or a second transaction could pay twice); the
/// reaper never takes those either. One audit row `evm.nonce.release` per reservation, with
/// `why` (the failure). The next movement from the address takes the nonce at once.
pub async fn release_before_broadcast(
    conn: &mut sqlx::PgConnection,
    node: Uuid,
    cleared_attempt: Option<i32>,
    why: &str,
    actor: &str,
) -> Result<Vec<GivenBack>> {
    let rows = sqlx::query_as!(
        GivenBack,
        "UPDATE evm_nonce_reservation r SET status = 'released', updated_at = now()
           FROM movement_request_nodes n
          WHERE n.id = r.request_node_id AND r.request_node_id = $1 AND r.status = 'reserved'
            AND r.tx_hashes = '[]'::jsonb AND r.cancel_hashes = '[]'::jsonb
            AND NOT EXISTS (SELECT 1 FROM artifacts a
                             WHERE a.request_node_id = $1 AND a.created_at >= r.created_at
                               AND a.kind IN ('sign_result', 'prepared_action')
                               AND a.attempt_no IS DISTINCT FROM $2)
         RETURNING r.id, r.chain_id, r.address, r.nonce, r.request_node_id, n.request_id",
        node,
        cleared_attempt
    )
    .fetch_all(&mut *conn)
    .await?;
    audit_given_back(conn, rows, actor, "evm.nonce.release", ("why", serde_json::json!(why))).await
}

/// Every reservation the node ever held on `chain_id` (hashes included), newest first.
pub async fn of_node(pool: &PgPool, node: Uuid, chain_id: i64) -> Result<Vec<Reservation>> {
    Ok(sqlx::query!(
        "SELECT id, chain_id, address, nonce, request_node_id, status, tx_hashes, cancel_hashes
           FROM evm_nonce_reservation WHERE request_node_id = $1 AND chain_id = $2 ORDER BY id DESC",
        node,
        chain_id
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| reservation!(r))
    .collect())
}

/// The reaper: releases reservations older than `age_seconds` that nothing was ever broadcast
/// with and that no signer can hold a signature for (no `sign_result` artifact of the node
/// since the reservation was made, and no prepared action handed to a signer unless the
/// signer refused it), held by a node that is not in flight — never the nonce of an armed
/// attempt. One audit row per reclaim, in the same transaction. At most `limit` a call.
pub async fn reclaim(
    conn: &mut sqlx::PgConnection,
    age_seconds: f64,
    actor: &str,
    limit: i64,
) -> Result<Vec<GivenBack>> {
    let rows = sqlx::query_as!(
        GivenBack,
        "WITH stale AS (
             SELECT r.id FROM evm_nonce_reservation r
               JOIN movement_request_nodes n ON n.id = r.request_node_id
              WHERE r.status = 'reserved' AND r.tx_hashes = '[]'::jsonb AND r.cancel_hashes = '[]'::jsonb
                AND r.updated_at < now() - make_interval(secs => $1)
                AND n.node_state NOT IN ('PREPARING', 'AWAITING_SIGNATURE', 'SUBMITTING', 'SUBMITTED', \
                    'OBSERVING', 'UNKNOWN')
                -- Never after a signer may have signed: a signature stored at the arm, or a prepared
                -- action handed to a signer that did not answer (a refusal proves none exists).
                AND NOT EXISTS (SELECT 1 FROM artifacts a
                                 WHERE a.request_node_id = n.id AND a.created_at >= r.created_at
                                   AND (a.kind = 'sign_result'
                                        OR (a.kind = 'prepared_action'
                                            AND (n.error_code IS DISTINCT FROM 'SIGNER_REFUSED'
                                                 OR a.attempt_no < (SELECT max(p.attempt_no) FROM artifacts p
                                                                     WHERE p.request_node_id = n.id
                                                                       AND p.kind = 'prepared_action')))))
              ORDER BY r.id
              LIMIT $2
              FOR UPDATE OF r, n SKIP LOCKED)
         UPDATE evm_nonce_reservation r SET status = 'released', updated_at = now()
           FROM stale, movement_request_nodes n
          WHERE r.id = stale.id AND n.id = r.request_node_id
         RETURNING r.id, r.chain_id, r.address, r.nonce, r.request_node_id, n.request_id",
        age_seconds,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    audit_given_back(conn, rows, actor, "evm.nonce.reclaim", ("age_seconds", serde_json::json!(age_seconds))).await
}

/// A nonce of an address nothing of qtg will send with any more but the chain still waits
/// for: a released reservation with no live one of the same nonce, or a fill of it already
/// broadcast and not yet final (`filling`, its zero-value self-sends in `cancel_hashes`).
#[derive(Debug, Clone, PartialEq)]
pub struct Gap {
    pub id: i64,
    pub nonce: i64,
    pub filling: bool,
    pub cancel_hashes: Vec<String>,
    /// Seconds since the row last changed (a fill: since its last self-send was recorded).
    pub age_seconds: f64,
}

/// The gaps of `address` on `chain_id` in `[from, below)`, lowest first: what keeps a
/// transaction with nonce `below` from being mined when the chain's count is `from`.
pub async fn gaps(pool: &PgPool, chain_id: i64, address: &str, from: i64, below: i64) -> Result<Vec<Gap>> {
    Ok(sqlx::query!(
        "SELECT DISTINCT ON (r.nonce) r.id, r.nonce, r.status, r.cancel_hashes,
                EXTRACT(EPOCH FROM now() - r.updated_at)::float8 AS \"age_seconds!\"
           FROM evm_nonce_reservation r
          WHERE r.chain_id = $1 AND r.address = $2 AND r.nonce >= $3 AND r.nonce < $4
            AND ((r.status = 'released'
                  AND NOT EXISTS (SELECT 1 FROM evm_nonce_reservation l
                                   WHERE l.chain_id = r.chain_id AND l.address = r.address
                                     AND l.nonce = r.nonce AND l.status <> 'released'))
                 OR (r.status = 'broadcast' AND r.request_node_id IS NULL))
          ORDER BY r.nonce, r.id DESC",
        chain_id,
        address.to_ascii_lowercase(),
        from,
        below
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| Gap {
        id: r.id,
        nonce: r.nonce,
        filling: r.status == "broadcast",
        cancel_hashes: hashes(&r.cancel_hashes),
        age_seconds: r.age_seconds,
    })
    .collect())
}

/// Records `hash`, a zero-value self-send with the gap's nonce, before it is sent: the gap
/// becomes a fill (`broadcast`, owned by no node, so no node's retry can take the nonce and
/// no new reservation can reuse it), with one audit row `evm.nonce.fill` naming the node whose
/// transaction waits on it, in the same transaction. `false`: the nonce is no longer a gap
/// (a new reservation took it meanwhile): nothing may be sent.
pub async fn record_fill(pool: &PgPool, gap: i64, hash: &str, waiting: Uuid, actor: &str) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query!("SELECT chain_id, address FROM evm_nonce_reservation WHERE id = $1", gap)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(row) = row else { return Ok(false) };
    // The same lock as `reserve`: a fill and a new reservation of the nonce never both win.
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1::int8::text || ':' || $2, 17))",
        row.chain_id,
        row.address
    )
    .execute(&mut *tx)
    .await?;
    let filled = sqlx::query!(
        "UPDATE evm_nonce_reservation r
            SET status = 'broadcast', request_node_id = NULL, updated_at = now(),
                cancel_hashes = CASE WHEN cancel_hashes ? $2 THEN cancel_hashes ELSE cancel_hashes || \
                    to_jsonb($2::text) END
          WHERE r.id = $1
            AND ((r.status = 'released'
                  AND NOT EXISTS (SELECT 1 FROM evm_nonce_reservation l
                                   WHERE l.chain_id = r.chain_id AND l.address = r.address
                                     AND l.nonce = r.nonce AND l.status <> 'released'))
                 OR (r.status = 'broadcast' AND r.request_node_id IS NULL))
          RETURNING r.chain_id, r.address, r.nonce,
                    (SELECT request_id FROM movement_request_nodes WHERE id = $3) AS movement_id",
        gap,
        hash.to_ascii_lowercase(),
        waiting
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(f) = filled else { return Ok(false) };
    crate::audit::record(
        &mut tx,
        &crate::audit::AuditRecord {
            actor,
            action: "evm.nonce.fill",
            entity_type: "node",
            entity_id: waiting.to_string(),
            movement_id: f.movement_id,
            data: serde_json::json!({
                "reservation_id": gap, "chain_id": f.chain_id, "address": f.address, "nonce": f.nonce,
                "tx_hash": hash.to_ascii_lowercase(),
            }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// The fills of `address` on `chain_id` whose nonce the chain has passed (below `count`,
/// its mined transaction count), with their self-sends: each is then marked consumed.
pub async fn passed_fills(pool: &PgPool, chain_id: i64, address: &str, count: i64) -> Result<Vec<Gap>> {
    Ok(sqlx::query!(
        "SELECT id, nonce, cancel_hashes, EXTRACT(EPOCH FROM now() - updated_at)::float8 AS \"age_seconds!\"
           FROM evm_nonce_reservation
          WHERE chain_id = $1 AND address = $2 AND nonce < $3 AND status = 'broadcast' AND request_node_id IS NULL
          ORDER BY nonce",
        chain_id,
        address.to_ascii_lowercase(),
        count
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| Gap {
        id: r.id,
        nonce: r.nonce,
        filling: true,
        cancel_hashes: hashes(&r.cancel_hashes),
        age_seconds: r.age_seconds,
    })
    .collect())
}
