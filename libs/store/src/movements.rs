//! Movement requests and their nodes: creation (idempotent by a unique constraint), reads
//! and cursor paging.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::rows::column;
use crate::{NodeRow, RequestRow, Result};

#[derive(Debug, Clone)]
pub struct NewMovement<'a> {
    pub id: Uuid,
    pub template_id: Uuid,
    pub plan_version_id: Uuid,
    pub template_key: &'a str,
    pub template_version: i32,
    pub compiled_plan_hash: &'a str,
    pub intent: &'a Value,
    pub intent_hash: &'a str,
    pub input_params: &'a Value,
    pub created_by: &'a str,
    pub idempotency_key: &'a str,
    pub body_hash: &'a str,
    pub callback_url: Option<&'a str>,
    pub callback_secret: Option<&'a str>,
    /// `v3` or `standard_webhooks`; none = the deployment's default.
    pub callback_signature: Option<&'a str>,
    pub ttl_seconds: f64,
    pub approvals_required: i32,
}

/// One node to create: `(plan_node_id, node_key, node_kind, lane)`.
pub type NewNode<'a> = (Uuid, &'a str, &'a str, &'a str);

#[derive(Debug, Clone)]
pub enum Created {
    New(Uuid),
    /// The principal already used this idempotency key.
    Existing {
        id: Uuid,
        body_hash: String,
    },
}

/// Inserts the movement (PENDING_APPROVAL) and its nodes (all BLOCKED), or finds the one the
/// principal created earlier with the same idempotency key. Concurrent duplicates meet at
/// the unique constraint, so only one movement is ever created.
pub async fn insert(conn: &mut PgConnection, m: &NewMovement<'_>, nodes: &[NewNode<'_>]) -> Result<Created> {
    let inserted: Option<Uuid> = sqlx::query_scalar!(
        "INSERT INTO movement_requests (id, template_id, plan_version_id, template_key,
             template_version, compiled_plan_hash, intent, intent_hash, input_params,
             request_state, created_by, idempotency_key, body_hash, callback_url, expires_at, callback_secret,
             approvals_required, callback_signature)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'PENDING_APPROVAL', $10, $11, $12, $13,
             now() + make_interval(secs => $14), $15, $16, $17)
         ON CONFLICT (created_by, idempotency_key) DO NOTHING
         RETURNING id",
        m.id,
        m.template_id,
        m.plan_version_id,
        m.template_key,
        m.template_version,
        m.compiled_plan_hash,
        m.intent,
        m.intent_hash,
        m.input_params,
        m.created_by,
        m.idempotency_key,
        m.body_hash,
        m.callback_url,
        m.ttl_seconds,
        m.callback_secret,
        m.approvals_required,
        m.callback_signature
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(id) = inserted else {
        let row = sqlx::query!(
            "SELECT id, body_hash FROM movement_requests WHERE created_by = $1 AND idempotency_key = $2",
            m.created_by,
            m.idempotency_key
        )
        .fetch_one(&mut *conn)
        .await?;
        return Ok(Created::Existing { id: row.id, body_hash: row.body_hash });
    };
    let plan_node_ids: Vec<Uuid> = nodes.iter().map(|n| n.0).collect();
    let keys: Vec<&str> = nodes.iter().map(|n| n.1).collect();
    let kinds: Vec<&str> = nodes.iter().map(|n| n.2).collect();
    let lanes: Vec<&str> = nodes.iter().map(|n| n.3).collect();
    sqlx::query!(
        // Created when their movement was, with their plan node's executor key: the dispatch
        // listing walks the READY nodes by key and lane, ordered by the node's own
        // `created_at` as the movement's (`claims::candidates`). A plan node that is not there
        // fails the node's key to it (LEFT JOIN) rather than leaving the node out.
        "INSERT INTO movement_request_nodes
             (id, request_id, plan_node_id, node_key, node_kind, lane, node_state, created_at, executor_key)
         SELECT qtg_uuid7(), $1, x.p, x.k, x.kind, x.lane, 'BLOCKED', r.created_at, pn.executor_key
         FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[]) AS x(p, k, kind, lane)
         JOIN movement_requests r ON r.id = $1
         LEFT JOIN plan_nodes pn ON pn.id = x.p",
        id,
        &plan_node_ids,
        &keys as &[&str],
        &kinds as &[&str],
        &lanes as &[&str]
    )
    .execute(&mut *conn)
    .await?;
    Ok(Created::New(id))
}

/// A [`RequestRow`] as the database returns it: the state still text.
struct RequestRecord {
    id: Uuid,
    template_id: Uuid,
    plan_version_id: Uuid,
    template_key: String,
    template_version: i32,
    compiled_plan_hash: String,
    intent: Value,
    intent_hash: String,
    input_params: Value,
    request_state: String,
    approval_status: String,
    approved_by: Option<String>,
    approved_at: Option<DateTime<Utc>>,
    review_reason: Option<String>,
    created_by: String,
    idempotency_key: String,
    body_hash: String,
    callback_url: Option<String>,
    current_frontier: Value,
    expires_at: Option<DateTime<Utc>>,
    expired: bool,
    completed_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    approvals_required: i32,
    policy_version: Option<i32>,
    policy_rule: Option<String>,
    policy_groups: Option<Value>,
    created_by_role: Option<String>,
}

/// `query_as!(RequestRecord, …)`: a movement's columns `FROM movement_requests`, then `$tail`
/// (a literal: sqlx joins it to the checked text) — one column list for every read.
macro_rules! requests {
    ($tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            RequestRecord,
            r#"SELECT id, template_id, plan_version_id, template_key, template_version, compiled_plan_hash,
                   intent, intent_hash, input_params, request_state, approval_status, approved_by, approved_at,
                   review_reason, created_by, idempotency_key, body_hash, callback_url, current_frontier,
                   expires_at, COALESCE(expires_at <= now(), false) AS "expired!", completed_at, created_at,
                   updated_at, approvals_required, policy_version, policy_rule, policy_groups, created_by_role
               FROM movement_requests "# + $tail
            $(, $arg)*
        )
    };
}

impl RequestRecord {
    fn into_row(self) -> Result<RequestRow> {
        Ok(RequestRow {
            id: self.id,
            template_id: self.template_id,
            plan_version_id: self.plan_version_id,
            template_key: self.template_key,
            template_version: self.template_version,
            compiled_plan_hash: self.compiled_plan_hash,
            intent: self.intent,
            intent_hash: self.intent_hash,
            input_params: self.input_params,
            request_state: column("request_state", self.request_state)?,
            approval_status: self.approval_status,
            approved_by: self.approved_by,
            approved_at: self.approved_at,
            review_reason: self.review_reason,
            created_by: self.created_by,
            idempotency_key: self.idempotency_key,
            body_hash: self.body_hash,
            callback_url: self.callback_url,
            current_frontier: self.current_frontier,
            expires_at: self.expires_at,
            expired: self.expired,
            completed_at: self.completed_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            approvals_required: self.approvals_required,
            policy_version: self.policy_version,
            policy_rule: self.policy_rule,
            policy_groups: self.policy_groups,
            created_by_role: self.created_by_role,
        })
    }
}

pub async fn get(conn: &mut PgConnection, id: Uuid) -> Result<Option<RequestRow>> {
    let record = requests!(r#"WHERE id = $1"#, id).fetch_optional(&mut *conn).await?;
    record.map(RequestRecord::into_row).transpose()
}

/// A movement's nodes; a READY non-manual node carries the pause holding it, if any (the pause
/// test is `controls::holding_pauses!`, the one definition the claim shares, handed to the
/// checked macro as literals).
pub async fn nodes(conn: &mut PgConnection, request_id: Uuid) -> Result<Vec<NodeRow>> {
    let rows = crate::controls::holding_pauses!(
        sqlx::query!,
        r#"SELECT n.id, n.node_key, n.node_kind, n.node_state, p.action_type, p.executor_key,
                  p.signer_key, n.attempt_no, n.provider_state, n.provider_refs, n.provider_ref_id,
                  n.error_code, n.error_detail, n.started_at, n.completed_at, n.last_observed_at,
                  n.observe_count, n.next_observe_at, n.updated_at,
                  h.scope AS "hold_scope?", h.target AS "hold_target?", h.reason AS "hold_reason?",
                  h.paused_by AS "hold_by?", h.paused_at AS "hold_at?"
           FROM movement_request_nodes n JOIN plan_nodes p ON p.id = n.plan_node_id
           LEFT JOIN LATERAL ("#,
        "c.*",
        ") h ON n.node_state = 'READY' AND n.node_kind <> 'manual'
         WHERE n.request_id = $1 ORDER BY n.node_key",
        request_id
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(NodeRow {
                id: r.id,
                node_key: r.node_key,
                node_kind: column("node_kind", r.node_kind)?,
                node_state: column("node_state", r.node_state)?,
                action_type: r.action_type,
                executor_key: r.executor_key,
                signer_key: r.signer_key,
                attempt_no: r.attempt_no,
                provider_state: r.provider_state,
                provider_refs: r.provider_refs,
                provider_ref_id: r.provider_ref_id,
                error_code: r.error_code,
                error_detail: r.error_detail,
                started_at: r.started_at,
                completed_at: r.completed_at,
                last_observed_at: r.last_observed_at,
                observe_count: r.observe_count,
                next_observe_at: r.next_observe_at,
                updated_at: r.updated_at,
                dispatch_hold: match (r.hold_scope, r.hold_target, r.hold_reason, r.hold_by, r.hold_at) {
                    (Some(scope), Some(target), Some(reason), Some(paused_by), Some(paused_at)) => {
                        Some(crate::controls::Pause { scope, target, reason, paused_by, paused_at })
                    }
                    _ => None,
                },
            })
        })
        .collect()
}

/// What a movement list is narrowed to; `None` is no filter. Every filter is checked by the
/// caller (decimal amounts, a hex id prefix).
#[derive(Debug, Default)]
pub struct MovementFilter<'a> {
    pub state: Option<&'a str>,
    pub template_key: Option<&'a str>,
    pub created_by: Option<&'a str>,
    /// Created at or after.
    pub since: Option<DateTime<Utc>>,
    /// Created before.
    pub until: Option<DateTime<Utc>>,
    /// Ids within this range, both ends included (an id's first hex digits, padded with 0 and f).
    pub id_range: Option<(Uuid, Uuid)>,
    pub idempotency_key: Option<&'a str>,
    /// The intent's destination, compared without case.
    pub destination: Option<&'a str>,
    /// The intent's asset, compared without case.
    pub asset: Option<&'a str>,
    /// The intent's amount at least / at most (decimal strings).
    pub amount_min: Option<&'a str>,
    pub amount_max: Option<&'a str>,
    /// Only movements with a node in this state (`UNKNOWN`: waiting for recovery or a person).
    pub node_state: Option<&'a str>,
    /// Only movements waiting for this principal's approval: PENDING_APPROVAL, not created by
    /// them, not yet approved by them.
    pub awaiting_approval_by: Option<&'a str>,
}

/// Movements newest first, narrowed by `filter`, after the `(created_at, id)` cursor.
pub async fn list(
    conn: &mut PgConnection,
    filter: &MovementFilter<'_>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<RequestRow>> {
    let (at, id) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
    let records = requests!(
        r#"
           WHERE ($1::text IS NULL OR request_state = $1)
             AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3))
             AND ($5::text IS NULL OR template_key = $5)
             AND ($6::text IS NULL OR created_by = $6)
             AND ($7::timestamptz IS NULL OR created_at >= $7)
             AND ($8::timestamptz IS NULL OR created_at < $8)
             AND ($9::uuid IS NULL OR id BETWEEN $9 AND $17)
             AND ($10::text IS NULL OR idempotency_key = $10)
             AND ($11::text IS NULL OR lower(CASE jsonb_typeof(intent -> 'destination')
                                                   WHEN 'object' THEN intent -> 'destination' ->> 'address'
                                                   ELSE intent ->> 'destination' END) = lower($11))
             AND ($12::text IS NULL OR lower(intent ->> 'asset') = lower($12))
             AND ($13::text IS NULL OR (CASE WHEN intent ->> 'amount' ~ '^[0-9]+(\.[0-9]+)?$'
                                             THEN (intent ->> 'amount')::numeric END) >= $13::numeric)
             AND ($14::text IS NULL OR (CASE WHEN intent ->> 'amount' ~ '^[0-9]+(\.[0-9]+)?$'
                                             THEN (intent ->> 'amount')::numeric END) <= $14::numeric)
             AND ($15::text IS NULL OR EXISTS (SELECT 1 FROM movement_request_nodes n
                                               WHERE n.request_id = movement_requests.id AND n.node_state = $15))
             AND ($16::text IS NULL OR (request_state = 'PENDING_APPROVAL' AND lower(created_by) <> lower($16)
                  AND (expires_at IS NULL OR expires_at > now())
                  AND NOT EXISTS (SELECT 1 FROM movement_approvals a
                                  WHERE a.request_id = movement_requests.id AND lower(a.approver) = lower($16))))
           ORDER BY created_at DESC, id DESC LIMIT $4"#,
        filter.state,
        at,
        id,
        limit,
        filter.template_key,
        filter.created_by,
        filter.since,
        filter.until,
        filter.id_range.map(|r| r.0),
        filter.idempotency_key,
        filter.destination,
        filter.asset,
        filter.amount_min,
        filter.amount_max,
        filter.node_state,
        filter.awaiting_approval_by,
        filter.id_range.map(|r| r.1),
    )
    .fetch_all(&mut *conn)
    .await?;
    records.into_iter().map(RequestRecord::into_row).collect()
}

/// Approvals given so far, per movement of `ids` (a movement with none is absent).
pub async fn approval_counts(conn: &mut PgConnection, ids: &[Uuid]) -> Result<Vec<(Uuid, i64)>> {
    let rows = sqlx::query!(
        r#"SELECT request_id, count(*) AS "n!" FROM movement_approvals WHERE request_id = ANY($1) GROUP BY request_id"#,
        ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.request_id, r.n)).collect())
}

/// Executor and signer keys among `keys` whose recorded health is `down`.
/// The executors and signers among `executor_keys` / `signer_keys` whose health does not
/// vouch for them, each with why: `down`, `unknown` (never checked, or not up), `missing`
/// (qtg-health has not seen it) or `stale` (last checked more than `stale_after_seconds` ago).
pub async fn unhealthy_bindings(
    conn: &mut PgConnection,
    executor_keys: &[String],
    signer_keys: &[String],
    stale_after_seconds: f64,
) -> Result<Vec<(String, String)>> {
    let rows = sqlx::query!(
        r#"WITH bound AS (
             SELECT k, e.health_state AS state, e.last_health_checked_at AS checked, e.executor_key IS NOT NULL AS seen
             FROM unnest($1::text[]) AS k LEFT JOIN executors e ON e.executor_key = k
             UNION
             SELECT k, s.health_state, s.last_health_checked_at, s.signer_key IS NOT NULL
             FROM unnest($2::text[]) AS k LEFT JOIN signers s ON s.signer_key = k)
         SELECT k AS "k!", CASE WHEN NOT seen THEN 'missing'
                        WHEN state = 'down' THEN 'down'
                        WHEN state <> 'up' OR checked IS NULL THEN 'unknown'
                        WHEN checked < now() - make_interval(secs => $3) THEN 'stale'
                   END AS "why!"
         FROM bound
         WHERE NOT seen OR state <> 'up' OR checked IS NULL OR checked < now() - make_interval(secs => $3)
         ORDER BY k"#,
        executor_keys,
        signer_keys,
        stale_after_seconds
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.k, r.why)).collect())
}

/// Serialises velocity checks of one bucket for the rest of the transaction, so two concurrent
/// movements cannot both fit under a limit only one fits under.
///
/// The bucket a velocity limit counts in, from an intent's asset and source (SQL over a jsonb
/// intent): the asset trimmed and case-folded (none: empty, as the engine's risk check reads it
/// — never a NULL bucket, which would lock nothing and count nothing), and the source trimmed
/// and case-folded whether it is a string or an object's `address` (any other object: its
/// jsonb text, which has one canonical form; none: empty). So `"0xAbC"`, `" 0xabc "` and
/// `{"address": "0xabc"}` share one budget, as the executor will debit one account. It is spelled
/// out here and twice in [`velocity_used`]: the three stay identical, and identical to the index of
/// migration 0023 (`movement_requests_velocity_bucket_v2`) that the sum uses.
pub async fn lock_velocity(conn: &mut PgConnection, intent: &Value) -> Result<()> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended('qtg.velocity:'
             || COALESCE(lower(btrim($1::jsonb ->> 'asset')), '') || '|'
             || CASE jsonb_typeof($1::jsonb -> 'source')
                 WHEN 'string' THEN lower(btrim($1::jsonb ->> 'source'))
                 WHEN 'object' THEN COALESCE(lower(btrim($1::jsonb -> 'source' ->> 'address')),
                     ($1::jsonb -> 'source')::text)
                 ELSE '' END, 0))",
        intent
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
}

/// Sum of the amounts of the other movements in `intent`'s velocity bucket (see
/// [`lock_velocity`]) that count in the last `window_seconds`, as a decimal string: every one
/// still in flight (awaiting approval, approved, executing, waiting for a person) whenever it was
/// created, and every one created or approved in the window that did not end unapproved
/// (rejected, expired, cancelled before approval).
pub async fn velocity_used(
    conn: &mut PgConnection,
    intent: &Value,
    window_seconds: i64,
    exclude: Uuid,
) -> Result<String> {
    Ok(sqlx::query_scalar!(
        r#"SELECT COALESCE(sum((intent ->> 'amount')::numeric), 0)::text AS "used!" FROM movement_requests
           WHERE COALESCE(lower(btrim(intent ->> 'asset')), '') || '|'
                 || CASE jsonb_typeof(intent -> 'source')
                     WHEN 'string' THEN lower(btrim(intent ->> 'source'))
                     WHEN 'object' THEN COALESCE(lower(btrim(intent -> 'source' ->> 'address')),
                         (intent -> 'source')::text)
                     ELSE '' END
                 = COALESCE(lower(btrim($1::jsonb ->> 'asset')), '') || '|'
                 || CASE jsonb_typeof($1::jsonb -> 'source')
                     WHEN 'string' THEN lower(btrim($1::jsonb ->> 'source'))
                     WHEN 'object' THEN COALESCE(lower(btrim($1::jsonb -> 'source' ->> 'address')),
                         ($1::jsonb -> 'source')::text)
                     ELSE '' END
             AND id <> $3
             AND request_state NOT IN ('REJECTED', 'EXPIRED')
             AND NOT (request_state = 'CANCELLED' AND approved_at IS NULL)
             AND (request_state IN ('PENDING_APPROVAL', 'APPROVED', 'EXECUTING', 'WAITING_MANUAL_ACTION',
                                    'MANUAL_INTERVENTION')
                  OR created_at > now() - make_interval(secs => $2::float8)
                  OR approved_at > now() - make_interval(secs => $2::float8))"#,
        intent,
        window_seconds as f64,
        exclude
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// One approval of a movement.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Approval {
    pub approver: String,
    /// The approver's role when they approved (none before approval policies).
    pub approver_role: Option<String>,
    pub intent_hash: String,
    pub plan_hash: String,
    pub reason: Option<String>,
    pub approved_at: DateTime<Utc>,
}

/// Records `approver`'s approval with the hashes they saw; `false` if they already approved.
pub async fn add_approval(
    conn: &mut PgConnection,
    request_id: Uuid,
    approver: &str,
    approver_role: Option<&str>,
    reason: Option<&str>,
) -> Result<bool> {
    let done = sqlx::query!(
        "INSERT INTO movement_approvals (request_id, approver, intent_hash, plan_hash, reason, approver_role)
         SELECT id, $2, intent_hash, compiled_plan_hash, $3, $4 FROM movement_requests WHERE id = $1
         ON CONFLICT (request_id, approver) DO NOTHING",
        request_id,
        approver,
        reason,
        approver_role
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Approvals of a movement, oldest first.
pub async fn approvals(conn: &mut PgConnection, request_id: Uuid) -> Result<Vec<Approval>> {
    Ok(sqlx::query_as!(
        Approval,
        "SELECT approver, approver_role, intent_hash, plan_hash, reason, approved_at FROM movement_approvals
         WHERE request_id = $1 ORDER BY approved_at, approver",
        request_id
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Raises the approvals a movement needs (limits tightened since it was created).
pub async fn raise_approvals_required(conn: &mut PgConnection, request_id: Uuid, needed: i32) -> Result<()> {
    sqlx::query!(
        "UPDATE movement_requests SET approvals_required = GREATEST(approvals_required, $2) WHERE id = $1",
        request_id,
        needed
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records what decided a movement: the policy version, its rule and the approver groups they
/// require, and the requester's role.
#[allow(clippy::too_many_arguments)]
pub async fn set_policy(
    conn: &mut PgConnection,
    id: Uuid,
    version: Option<i32>,
    rule: Option<&str>,
    groups: Option<&Value>,
    max_fee: Option<&str>,
    created_by_role: Option<&str>,
) -> Result<()> {
    sqlx::query!(
        "UPDATE movement_requests SET policy_version = $2, policy_rule = $3, policy_groups = $4,
                created_by_role = COALESCE($5, created_by_role), policy_max_fee = $6
          WHERE id = $1",
        id,
        version,
        rule,
        groups,
        created_by_role,
        max_fee
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Shortens a pending movement's approval window to `seconds` from now (a policy's approval
/// TTL), never lengthens it.
pub async fn shorten_expiry(conn: &mut PgConnection, id: Uuid, seconds: f64) -> Result<()> {
    sqlx::query!(
        "UPDATE movement_requests
            SET expires_at = LEAST(COALESCE(expires_at, 'infinity'), now() + make_interval(secs => $2))
          WHERE id = $1",
        id,
        seconds
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The movements created since `since`, oldest first (at most `limit`): what a policy
/// simulation replays.
pub async fn created_since(conn: &mut PgConnection, since: DateTime<Utc>, limit: i64) -> Result<Vec<RequestRow>> {
    let records = requests!("WHERE created_at >= $1 ORDER BY created_at, id LIMIT $2", since, limit)
        .fetch_all(&mut *conn)
        .await?;
    records.into_iter().map(RequestRecord::into_row).collect()
}
