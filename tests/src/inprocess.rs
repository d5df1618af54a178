//! In-process engines over a test database, for the pipelines' edge cases.

use super::*;

/// Worker settings for tests: the seed's intervals, with a 3 s recovery grace instead of 90 s
/// (an idle recovery worker wakes when a node's grace ends, so its 60 s poll is not waited),
/// nested as every binary insists: a 1.5 s call deadline, so a 1.9 s submit window
/// (deadline + 2 × the harness' 0.2 s skew margin) and grace 3 > 1.9 + 0.2.
pub fn fast_recovery() -> HashMap<&'static str, &'static str> {
    HashMap::from([("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "3"), ("MG_EXECUTOR_TIMEOUT_MS", "1500")])
}

/// The binaries' engine settings (`EngineSettings::default()`), except the approval gate: an
/// in-process engine runs no health worker, so nothing would vouch for its executors; down-only
/// refuses only what is known to be down.
pub fn test_settings() -> qtg_engine::EngineSettings {
    qtg_engine::EngineSettings { approval_health_gate: qtg_engine::HealthGate::DownOnly, ..Default::default() }
}

/// An in-process engine over `db` with the sim lanes of `deploy/registry.sim.toml`.
pub fn sim_engine(db: &TestDb, settings: qtg_engine::EngineSettings) -> anyhow::Result<qtg_engine::Engine> {
    let text = std::fs::read_to_string(registry_file())?;
    let file = qtg_executor::RegistryFile::parse(&text)?;
    let none = |_: &str| None;
    let sim = qtg_sim::lane(&qtg_executor::LaneContext {
        pool: &db.pool,
        setting: &none,
        clock_skew: settings.clock_skew,
        shared: &Default::default(),
    })
    .map_err(anyhow::Error::msg)?;
    let registry = qtg_executor::Registry::build(&file, &[sim], &none)?;
    Ok(qtg_engine::Engine {
        pool: db.pool.clone(),
        registry: Arc::new(registry),
        settings,
        actor: "test-worker".into(),
        shutdown: Default::default(),
    })
}

/// Installs `nodes`/`edges` as template `key` (proposed by "ops", approved by "admin").
pub async fn install_plan(engine: &qtg_engine::Engine, key: &str, plan: Value) -> anyhow::Result<()> {
    let plan = serde_json::from_value(plan)?;
    let p = engine
        .propose_template(
            "ops",
            qtg_engine::templates::Proposal { template_key: key.into(), description: None, plan },
            Duration::from_secs(3600),
        )
        .await?;
    engine.review_template_proposal("admin", p.id, true, None).await?;
    Ok(())
}

/// Creates (as "bot") and approves (as "alice") a movement of `template`; returns its id.
pub async fn create_approved(engine: &qtg_engine::Engine, template: &str, idem: &str) -> anyhow::Result<uuid::Uuid> {
    let (row, _) = engine
        .create_movement(
            "bot",
            qtg_engine::movements::NewMovementInput {
                template_key: template.into(),
                template_version: None,
                intent: json!({"asset": "USDC", "amount": "10"}),
                input_params: json!({}),
                callback_url: None,
                callback_secret: None,
                callback_signature: None,
                idempotency_key: idem.into(),
                body_hash: idem.into(),
                created_by_role: None,
            },
            Duration::from_secs(300),
        )
        .await?;
    engine.approve_movement("alice", "approver", row.id, None).await?;
    Ok(row.id)
}

/// Node `key` of movement `id`: (state, error_code, provider_refs, attempt_no).
pub async fn node_row(
    pool: &PgPool,
    id: uuid::Uuid,
    key: &str,
) -> anyhow::Result<(String, Option<String>, Value, i32)> {
    let r = sqlx::query(
        "SELECT node_state, error_code, provider_refs, attempt_no FROM movement_request_nodes WHERE request_id = \
         $1 AND node_key = $2",
    )
    .bind(id)
    .bind(key)
    .fetch_one(pool)
    .await?;
    Ok((r.get(0), r.get(1), r.get(2), r.get(3)))
}

pub async fn request_state(pool: &PgPool, id: uuid::Uuid) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar("SELECT request_state FROM movement_requests WHERE id = $1").bind(id).fetch_one(pool).await?)
}
