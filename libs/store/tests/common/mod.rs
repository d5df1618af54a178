//! Fixtures shared by the store's integration tests: templates and movements built with the
//! store's own functions (as the engine builds them), and a few small readers for assertions.
#![allow(dead_code)]

use qtg_core::{NodeKind, NodeState, PlanDefinition, PlanEdge, PlanNode, RequestState};
use qtg_store::movements::{self, Created, NewMovement};
use qtg_store::transition::{self, Cas, Meta, NodePatch, RequestPatch};
use qtg_store::{templates, PgPool, Result};
use serde_json::{json, Value};
use uuid::Uuid;

/// A well-formed `compiled_plan_hash` (64 hex digits).
pub const PLAN_HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// The executor key every fixture node is bound to.
pub const EXECUTOR: &str = "exec.other.test";
pub const ACTOR: &str = "tester";

/// An action node bound to [`EXECUTOR`].
pub fn action(key: &str) -> PlanNode {
    PlanNode {
        node_key: key.to_string(),
        node_kind: NodeKind::Action,
        action_type: "transfer".to_string(),
        executor_key: EXECUTOR.to_string(),
        signer_key: None,
        signing_required: false,
        config: json!({}),
        timeout_policy: json!({}),
    }
}

/// A plan of `nodes` with edges `from -> to`.
pub fn plan(nodes: Vec<PlanNode>, edges: &[(&str, &str)]) -> PlanDefinition {
    PlanDefinition {
        nodes,
        edges: edges.iter().map(|(f, t)| PlanEdge { from: f.to_string(), to: t.to_string() }).collect(),
        risk_controls: json!({}),
    }
}

/// Stores the next version of `template_key` with `plan`; `(plan_version_id, version)`.
pub async fn install(pool: &PgPool, template_key: &str, plan: &PlanDefinition) -> Result<(Uuid, i32)> {
    let mut conn = pool.acquire().await?;
    templates::create_version(&mut conn, template_key, Some("fixture"), plan, PLAN_HASH, None, ACTOR).await
}

/// What a new movement is created with (everything else as the engine would set it).
pub struct Spec<'a> {
    pub template_key: &'a str,
    pub created_by: &'a str,
    pub idempotency_key: &'a str,
    pub body_hash: &'a str,
    pub intent: Value,
    pub callback_url: Option<&'a str>,
    pub ttl_seconds: f64,
    /// The lane every node is created in.
    pub lane: &'a str,
}

impl<'a> Spec<'a> {
    pub fn new(template_key: &'a str, idempotency_key: &'a str) -> Self {
        Spec {
            template_key,
            created_by: "bot",
            idempotency_key,
            body_hash: "body",
            intent: json!({"asset": "USDC", "amount": "10", "source": "treasury"}),
            callback_url: None,
            ttl_seconds: 3600.0,
            lane: "other",
        }
    }
}

/// A movement and its nodes by key.
#[derive(Debug, Clone)]
pub struct Movement {
    pub id: Uuid,
    pub nodes: Vec<(String, Uuid)>,
}

impl Movement {
    pub fn node(&self, key: &str) -> Uuid {
        self.nodes.iter().find(|(k, _)| k == key).map(|(_, id)| *id).expect("no such node key")
    }
}

/// Inserts a movement of the latest version of `spec.template_key` through
/// [`movements::insert`] (PENDING_APPROVAL, nodes BLOCKED), as the engine does.
pub async fn insert_movement(pool: &PgPool, spec: &Spec<'_>) -> Result<Created> {
    let mut conn = pool.acquire().await?;
    let pv = templates::plan_version(&mut conn, spec.template_key, None).await?.expect("template installed");
    let nodes: Vec<_> =
        pv.nodes.iter().map(|(id, n)| (*id, n.node_key.as_str(), n.node_kind.as_str(), spec.lane)).collect();
    let intent_hash = qtg_core::hash::canonical_hash(&spec.intent);
    movements::insert(
        &mut conn,
        &NewMovement {
            id: Uuid::new_v4(),
            template_id: pv.template_id,
            plan_version_id: pv.plan_version_id,
            template_key: &pv.template_key,
            template_version: pv.version,
            compiled_plan_hash: &pv.compiled_plan_hash,
            intent: &spec.intent,
            intent_hash: &intent_hash,
            input_params: &json!({}),
            created_by: spec.created_by,
            idempotency_key: spec.idempotency_key,
            body_hash: spec.body_hash,
            callback_url: spec.callback_url,
            callback_secret: None,
            callback_signature: None,
            ttl_seconds: spec.ttl_seconds,
            approvals_required: 1,
        },
        &nodes,
    )
    .await
}

/// [`insert_movement`] of a new movement, with its node ids.
pub async fn movement(pool: &PgPool, spec: &Spec<'_>) -> Result<Movement> {
    let id = match insert_movement(pool, spec).await? {
        Created::New(id) => id,
        Created::Existing { id, .. } => panic!("movement {id} already existed"),
    };
    let mut conn = pool.acquire().await?;
    let nodes = movements::nodes(&mut conn, id).await?.into_iter().map(|n| (n.node_key, n.id)).collect();
    Ok(Movement { id, nodes })
}

/// Installs a one-node template `template_key` (node `n`) and creates one movement of it.
pub async fn one_node_movement(pool: &PgPool, template_key: &str, callback_url: Option<&str>) -> Result<Movement> {
    install(pool, template_key, &plan(vec![action("n")], &[])).await?;
    movement(pool, &Spec { callback_url, ..Spec::new(template_key, "k-1") }).await
}

/// Moves a request `from` → `to`, which must apply.
pub async fn move_request(pool: &PgPool, id: Uuid, from: RequestState, to: RequestState) -> Result<()> {
    let mut conn = pool.acquire().await?;
    transition::transition_request(&mut conn, id, from, to, &RequestPatch::default(), &Meta::actor(ACTOR))
        .await?
        .or_stale()
}

/// PENDING_APPROVAL → APPROVED → EXECUTING.
pub async fn execute(pool: &PgPool, id: Uuid) -> Result<()> {
    move_request(pool, id, RequestState::PendingApproval, RequestState::Approved).await?;
    move_request(pool, id, RequestState::Approved, RequestState::Executing).await
}

/// Moves a node `from` → `to` with `patch`; answers what the one door answered.
pub async fn write(pool: &PgPool, node: Uuid, from: NodeState, to: NodeState, patch: &NodePatch) -> Result<Cas<i32>> {
    let mut conn = pool.acquire().await?;
    transition::transition_node(&mut conn, node, from, to, patch, &Meta::actor(ACTOR)).await
}

/// Moves a node along `path` (each step must apply, no patch).
pub async fn walk(pool: &PgPool, node: Uuid, path: &[NodeState]) -> Result<()> {
    for w in path.windows(2) {
        write(pool, node, w[0], w[1], &NodePatch::default()).await?.or_stale()?;
    }
    Ok(())
}

/// `SELECT count(*) …` (assertions only).
pub async fn count(pool: &PgPool, sql: &'static str, id: Uuid) -> Result<i64> {
    Ok(sqlx::query_scalar(sql).bind(id).fetch_one(pool).await?)
}

/// The node's state and attempt as the store reads them.
pub async fn node_state(pool: &PgPool, node: Uuid) -> Result<(NodeState, i32)> {
    let mut conn = pool.acquire().await?;
    let now = qtg_store::claims::node_now(&mut conn, node).await?.expect("node exists");
    Ok((now.node_state, now.attempt_no))
}
