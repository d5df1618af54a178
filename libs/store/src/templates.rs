//! Templates, their versions (plan nodes + edges) and the proposals that create them.

use chrono::{DateTime, Utc};
use qtg_core::{PlanDefinition, PlanEdge, PlanNode};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::rows::column;
use crate::{Result, StoreError};

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProposalRow {
    pub id: Uuid,
    pub template_key: String,
    pub description: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub definition: Value,
    pub compiled_plan_hash: String,
    pub status: String,
    pub proposed_by: String,
    pub reviewed_by: Option<String>,
    pub review_reason: Option<String>,
    pub plan_version_id: Option<Uuid>,
    pub expires_at: DateTime<Utc>,
    pub expired: bool,
    pub created_at: DateTime<Utc>,
}

#[allow(clippy::too_many_arguments)]
pub async fn insert_proposal(
    conn: &mut PgConnection,
    id: Uuid,
    template_key: &str,
    description: Option<&str>,
    definition: &Value,
    plan_hash: &str,
    proposed_by: &str,
    ttl_seconds: f64,
) -> Result<ProposalRow> {
    Ok(sqlx::query_as!(
        ProposalRow,
        r#"INSERT INTO template_proposals (id, template_key, description, definition, compiled_plan_hash,
             proposed_by, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
         RETURNING id, template_key, description, definition, compiled_plan_hash, status, proposed_by, reviewed_by,
             review_reason, plan_version_id, expires_at, (expires_at <= now()) AS "expired!", created_at"#,
        id,
        template_key,
        description,
        definition,
        plan_hash,
        proposed_by,
        ttl_seconds
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// Reads a proposal; with `lock`, waits for its row lock.
pub async fn get_proposal(conn: &mut PgConnection, id: Uuid, lock: bool) -> Result<Option<ProposalRow>> {
    let proposal = if lock {
        sqlx::query_as!(
            ProposalRow,
            r#"SELECT id, template_key, description, definition, compiled_plan_hash, status, proposed_by, reviewed_by,
                   review_reason, plan_version_id, expires_at, (expires_at <= now()) AS "expired!", created_at
             FROM template_proposals WHERE id = $1 FOR UPDATE"#,
            id
        )
        .fetch_optional(&mut *conn)
        .await?
    } else {
        sqlx::query_as!(
            ProposalRow,
            r#"SELECT id, template_key, description, definition, compiled_plan_hash, status, proposed_by, reviewed_by,
                   review_reason, plan_version_id, expires_at, (expires_at <= now()) AS "expired!", created_at
             FROM template_proposals WHERE id = $1"#,
            id
        )
        .fetch_optional(&mut *conn)
        .await?
    };
    Ok(proposal)
}

/// Proposals newest first, by status, after the `(created_at, id)` cursor.
pub async fn list_proposals(
    conn: &mut PgConnection,
    status: Option<&str>,
    template_key: Option<&str>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<ProposalRow>> {
    let (at, aid) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
    Ok(sqlx::query_as!(
        ProposalRow,
        r#"SELECT id, template_key, description, definition, compiled_plan_hash, status, proposed_by, reviewed_by,
               review_reason, plan_version_id, expires_at, (expires_at <= now()) AS "expired!", created_at
         FROM template_proposals
         WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR template_key = $2)
           AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
         ORDER BY created_at DESC, id DESC LIMIT $5"#,
        status,
        template_key,
        at,
        aid,
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Marks a pending proposal reviewed (`approved` / `rejected`).
pub async fn review_proposal(
    conn: &mut PgConnection,
    id: Uuid,
    status: &str,
    reviewer: &str,
    reason: Option<&str>,
    plan_version_id: Option<Uuid>,
) -> Result<()> {
    let res = sqlx::query!(
        "UPDATE template_proposals SET status = $2, reviewed_by = $3, review_reason = $4,
             plan_version_id = $5, updated_at = now()
         WHERE id = $1 AND status = 'pending'",
        id,
        status,
        reviewer,
        reason,
        plan_version_id
    )
    .execute(&mut *conn)
    .await?;
    if res.rows_affected() != 1 {
        return Err(StoreError::StaleState {
            entity: "template proposal",
            id: id.to_string(),
            expected: "pending".into(),
        });
    }
    Ok(())
}

/// Creates the next version of `template_key` (and the template on first use) from `plan`.
/// Returns `(plan_version_id, version)`.
pub async fn create_version(
    conn: &mut PgConnection,
    template_key: &str,
    description: Option<&str>,
    plan: &PlanDefinition,
    plan_hash: &str,
    proposal_id: Option<Uuid>,
    created_by: &str,
) -> Result<(Uuid, i32)> {
    let template_id: Uuid = sqlx::query_scalar!(
        "INSERT INTO templates (id, template_key) VALUES (gen_random_uuid(), $1)
         ON CONFLICT (template_key) DO UPDATE SET template_key = EXCLUDED.template_key
         RETURNING id",
        template_key
    )
    .fetch_one(&mut *conn)
    .await?;
    // Serialize version numbering per template.
    sqlx::query!("SELECT id FROM templates WHERE id = $1 FOR UPDATE", template_id).fetch_optional(&mut *conn).await?;
    let version = sqlx::query_scalar!(
        r#"SELECT COALESCE(max(version), 0) + 1 AS "version!" FROM plan_versions WHERE template_id = $1"#,
        template_id
    )
    .fetch_one(&mut *conn)
    .await?;
    let plan_version_id = Uuid::new_v4();
    sqlx::query!(
        "INSERT INTO plan_versions (id, template_id, version, compiled_plan_hash, description,
             risk_controls, proposal_id, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        plan_version_id,
        template_id,
        version,
        plan_hash,
        description,
        &plan.risk_controls,
        proposal_id,
        created_by
    )
    .execute(&mut *conn)
    .await?;
    let nodes = serde_json::to_value(&plan.nodes).map_err(StoreError::corrupt)?;
    sqlx::query!(
        "INSERT INTO plan_nodes (id, plan_version_id, node_key, node_kind, action_type, executor_key,
             signer_key, signing_required, config, timeout_policy)
         SELECT gen_random_uuid(), $1, n->>'node_key', n->>'node_kind', n->>'action_type',
             n->>'executor_key', n->>'signer_key', COALESCE((n->>'signing_required')::boolean, false),
             COALESCE(n->'config', '{}'::jsonb), COALESCE(n->'timeout_policy', '{}'::jsonb)
         FROM jsonb_array_elements($2) AS n",
        plan_version_id,
        nodes
    )
    .execute(&mut *conn)
    .await?;
    let froms: Vec<&str> = plan.edges.iter().map(|e| e.from.as_str()).collect();
    let tos: Vec<&str> = plan.edges.iter().map(|e| e.to.as_str()).collect();
    sqlx::query!(
        "INSERT INTO plan_edges (plan_version_id, from_node_key, to_node_key)
         SELECT $1, f, t FROM unnest($2::text[], $3::text[]) AS e(f, t)",
        plan_version_id,
        &froms as &[&str],
        &tos as &[&str]
    )
    .execute(&mut *conn)
    .await?;
    Ok((plan_version_id, version))
}

/// Retires every version of `template_key` older than `version` that is not retired yet (a
/// successor was approved). Returns the versions retired.
pub async fn retire_older(conn: &mut PgConnection, template_key: &str, version: i32, actor: &str) -> Result<Vec<i32>> {
    Ok(sqlx::query_scalar!(
        "UPDATE plan_versions SET retired_at = now(), retired_by = $3,
             retired_reason = 'superseded by version ' || $2
         WHERE template_id = (SELECT id FROM templates WHERE template_key = $1)
           AND version < $2 AND retired_at IS NULL RETURNING version",
        template_key,
        version,
        actor
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Retires `template_key` version `version` by hand. `None`: no such version; `Some(false)`:
/// it was retired already.
pub async fn retire(
    conn: &mut PgConnection,
    template_key: &str,
    version: i32,
    actor: &str,
    reason: &str,
) -> Result<Option<bool>> {
    let exists: Option<bool> = sqlx::query_scalar!(
        r#"SELECT v.retired_at IS NULL AS "live!" FROM plan_versions v JOIN templates t ON t.id = v.template_id
         WHERE t.template_key = $1 AND v.version = $2 FOR UPDATE OF v"#,
        template_key,
        version
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(live) = exists else { return Ok(None) };
    if live {
        sqlx::query!(
            "UPDATE plan_versions v SET retired_at = now(), retired_by = $3, retired_reason = $4
             FROM templates t WHERE t.id = v.template_id AND t.template_key = $1 AND v.version = $2",
            template_key,
            version,
            actor,
            reason
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(Some(live))
}

/// The risk controls of the newest version of movement `request_id`'s template: what a
/// movement created on an older version is also held to.
pub async fn current_risk_controls(conn: &mut PgConnection, request_id: Uuid) -> Result<Option<(i32, Value)>> {
    let row = sqlx::query!(
        "SELECT v.version, v.risk_controls FROM plan_versions v
         WHERE v.template_id = (SELECT template_id FROM movement_requests WHERE id = $1)
         ORDER BY v.version DESC LIMIT 1",
        request_id
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|r| (r.version, r.risk_controls)))
}

/// A stored template version with its plan.
#[derive(Debug, Clone)]
pub struct PlanVersion {
    pub template_id: Uuid,
    pub template_key: String,
    pub plan_version_id: Uuid,
    pub version: i32,
    pub compiled_plan_hash: String,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Set once a later version was approved or an admin retired it: no new movement.
    pub retired_at: Option<DateTime<Utc>>,
    /// `(plan_node_id, node)` in node_key order.
    pub nodes: Vec<(Uuid, PlanNode)>,
    pub plan: PlanDefinition,
}

/// Loads `template_key` at `version` (the latest when `None`).
pub async fn plan_version(
    conn: &mut PgConnection,
    template_key: &str,
    version: Option<i32>,
) -> Result<Option<PlanVersion>> {
    let head = sqlx::query!(
        "SELECT t.id AS template_id, v.id, v.version, v.compiled_plan_hash, v.description,
                v.risk_controls, v.created_at, v.retired_at
         FROM templates t JOIN plan_versions v ON v.template_id = t.id
         WHERE t.template_key = $1 AND ($2::int IS NULL OR v.version = $2)
         ORDER BY v.version DESC LIMIT 1",
        template_key,
        version
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(head) = head else { return Ok(None) };
    let plan_version_id = head.id;
    let node_rows = sqlx::query!(
        "SELECT id, node_key, node_kind, action_type, executor_key, signer_key, signing_required,
                config, timeout_policy
         FROM plan_nodes WHERE plan_version_id = $1 ORDER BY node_key",
        plan_version_id
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut nodes = Vec::with_capacity(node_rows.len());
    for r in node_rows {
        nodes.push((
            r.id,
            PlanNode {
                node_key: r.node_key,
                node_kind: column("node_kind", r.node_kind)?,
                action_type: r.action_type,
                executor_key: r.executor_key,
                signer_key: r.signer_key,
                signing_required: r.signing_required,
                config: r.config,
                timeout_policy: r.timeout_policy,
            },
        ));
    }
    let edges: Vec<PlanEdge> = crate::context::plan_edges(conn, plan_version_id).await?;
    let plan = PlanDefinition {
        nodes: nodes.iter().map(|(_, n)| n.clone()).collect(),
        edges,
        risk_controls: head.risk_controls,
    };
    Ok(Some(PlanVersion {
        template_id: head.template_id,
        template_key: template_key.to_string(),
        plan_version_id,
        version: head.version,
        compiled_plan_hash: head.compiled_plan_hash,
        description: head.description,
        created_at: head.created_at,
        retired_at: head.retired_at,
        nodes,
        plan,
    }))
}

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TemplateSummary {
    pub template_key: String,
    pub latest_version: i32,
    pub compiled_plan_hash: String,
    pub created_at: DateTime<Utc>,
}

/// Templates by key, after `cursor` (a template_key), at most `limit`.
pub async fn list_templates(conn: &mut PgConnection, cursor: Option<&str>, limit: i64) -> Result<Vec<TemplateSummary>> {
    Ok(sqlx::query_as!(
        TemplateSummary,
        "SELECT DISTINCT ON (t.template_key) t.template_key, v.version AS latest_version, v.compiled_plan_hash,
                t.created_at
         FROM templates t JOIN plan_versions v ON v.template_id = t.id
         WHERE ($1::text IS NULL OR t.template_key > $1)
         ORDER BY t.template_key, v.version DESC LIMIT $2",
        cursor,
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Version numbers of a template, newest first.
pub async fn template_versions(conn: &mut PgConnection, template_key: &str) -> Result<Vec<i32>> {
    Ok(sqlx::query_scalar!(
        "SELECT v.version FROM templates t JOIN plan_versions v ON v.template_id = t.id
         WHERE t.template_key = $1 ORDER BY v.version DESC",
        template_key
    )
    .fetch_all(&mut *conn)
    .await?)
}
