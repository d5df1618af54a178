//! Black-box test harness: a fresh database per test, the real binaries spawned as separate
//! processes (addresses read from their logs), an API client, and DB assertions.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use sqlx::{PgPool, Row};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub mod chaos;
pub mod webdriver;

/// The server tests create their databases on: `QTG_TEST_DATABASE_URL`, `DATABASE_URL`, or
/// the local default.
pub fn admin_url() -> String {
    std::env::var("QTG_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn with_db(url: &str, db: &str) -> String {
    let (base, rest) = match url.find("://").and_then(|s| url[s + 3..].find('/').map(|i| s + 3 + i)) {
        Some(slash) => (&url[..slash], &url[slash + 1..]),
        None => (url, ""),
    };
    let query = rest.find('?').map(|q| &rest[q..]).unwrap_or("");
    format!("{base}/{db}{query}")
}

/// A fresh, migrated database, dropped by [`TestDb::drop_db`] — or, when a test fails before
/// it gets there (a panic, an early `?`), when the value is dropped.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
    dropped: bool,
}

/// The name of the migrated template database of this schema: one per set of migrations
/// (their versions and checksums), so a changed migration gets a template of its own.
fn template_name() -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for m in qtg_store::MIGRATOR.iter() {
        h.update(m.version.to_le_bytes());
        h.update(&m.checksum);
    }
    format!("qtg_tpl_{}", &hex::encode(h.finalize())[..16])
}

/// Creates the template database once per schema, across test processes (an advisory lock on
/// the server serialises them): migrated under a temporary name, then renamed, so a template
/// that exists is complete. Templates of other schemas are dropped.
async fn ensure_template(admin_pool: &PgPool) -> anyhow::Result<String> {
    let name = template_name();
    let mut conn = admin_pool.acquire().await?;
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('qtg-test-template', 0))").execute(&mut *conn).await?;
    let made = async {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await?;
        if exists {
            return anyhow::Ok(());
        }
        let stale: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'qtg\\_tpl\\_%'")
                .fetch_all(&mut *conn)
                .await?;
        for old in stale {
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {old} WITH (FORCE)")))
                .execute(&mut *conn)
                .await?;
        }
        let building = format!("{name}_building");
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)")))
            .execute(&mut *conn)
            .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {building}"))).execute(&mut *conn).await?;
        let pool = qtg_store::connect(&with_db(&admin_url(), &building), 1).await?;
        qtg_store::migrate(&pool).await?;
        pool.close().await;
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE {building} RENAME TO {name}")))
            .execute(&mut *conn)
            .await?;
        Ok(())
    }
    .await;
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended('qtg-test-template', 0))").execute(&mut *conn).await?;
    made?;
    Ok(name)
}

impl TestDb {
    /// A fresh database with the schema: a copy of the migrated template (migrating every
    /// test's database from scratch was most of a test's set-up).
    pub async fn new() -> anyhow::Result<TestDb> {
        let admin = admin_url();
        let admin_pool = qtg_store::connect(&admin, 1).await.context("connect to the test Postgres server")?;
        let template = ensure_template(&admin_pool).await?;
        let name = format!("qtg_t_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name} TEMPLATE {template}")))
            .execute(&admin_pool)
            .await
            .context("copy the template database")?;
        admin_pool.close().await;
        let url = with_db(&admin, &name);
        let pool = qtg_store::connect(&url, 20).await?;
        // Already current: this checks the copy against the migrations and applies nothing.
        qtg_store::migrate(&pool).await?;
        Ok(TestDb { name, url, pool, dropped: false })
    }

    /// A fresh database without the schema.
    pub async fn empty() -> anyhow::Result<TestDb> {
        let admin = admin_url();
        let name = format!("qtg_t_{}", uuid::Uuid::new_v4().simple());
        let admin_pool = qtg_store::connect(&admin, 1).await.context("connect to the test Postgres server")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&admin_pool).await?;
        admin_pool.close().await;
        let url = with_db(&admin, &name);
        let pool = qtg_store::connect(&url, 20).await?;
        Ok(TestDb { name, url, pool, dropped: false })
    }

    pub async fn drop_db(mut self) {
        self.pool.close().await;
        drop_database(&self.name).await;
        self.dropped = true;
    }
}

async fn drop_database(name: &str) {
    if let Ok(admin_pool) = qtg_store::connect(&admin_url(), 1).await {
        // FORCE: a spawned binary still connected does not keep it alive.
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&admin_pool)
            .await;
        admin_pool.close().await;
    }
}

impl Drop for TestDb {
    /// The test ended without [`TestDb::drop_db`] (it failed): drop the database anyway, on a
    /// thread of its own (a runtime cannot block inside the test's runtime).
    fn drop(&mut self) {
        if self.dropped || std::env::var_os("QTG_TEST_KEEP_DB").is_some() {
            return;
        }
        let name = self.name.clone();
        let dropper = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                rt.block_on(drop_database(&name));
            }
        });
        let _ = dropper.join();
    }
}

/// Directory of the workspace's built binaries (next to this test executable).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    // A binary lives in target/<profile>/, a test in target/<profile>/deps/.
    if dir.join("qtg-api").exists() {
        dir.to_path_buf()
    } else {
        dir.parent().expect("target dir").to_path_buf()
    }
}

pub fn registry_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/registry.sim.toml")
}

/// A spawned binary with its captured log lines.
pub struct Proc {
    pub name: String,
    child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    /// Reads stderr into `lines` until EOF.
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Proc {
    pub async fn spawn(binary: &str, db_url: &str, extra: &[(&str, &str)]) -> anyhow::Result<Proc> {
        Self::spawn_args(binary, &[], db_url, extra).await
    }

    pub async fn spawn_args(binary: &str, args: &[&str], db_url: &str, extra: &[(&str, &str)]) -> anyhow::Result<Proc> {
        let path = bin_dir().join(binary);
        if !path.exists() {
            bail!("{} is not built; run `cargo build --workspace --bins` (make test does)", path.display());
        }
        let mut cmd = Command::new(&path);
        cmd.args(args);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("MG_DATABASE_URL", db_url)
            .env("MG_ADMIN_ADDR", "127.0.0.1:0")
            .env("MG_API_ADDR", "127.0.0.1:0")
            .env("MG_LOG_FORMAT", "json")
            .env("MG_DB_POOL_SIZE", "4")
            .env("MG_EXECUTOR_REGISTRY", registry_file())
            // A small clock-skew margin lets tests nest short graces (grace > window + skew).
            .env("MG_CLOCK_SKEW_MARGIN_SECONDS", "0.2")
            // Tests approve right after start, before a health worker may have run; the strict
            // gate (the default) has its own test (health.rs).
            .env("MG_APPROVAL_HEALTH_GATE", "down-only")
            .env("RUST_LOG", "info");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("spawn {binary}"))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("piped");
        let sink = lines.clone();
        let tag = binary.to_string();
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if std::env::var("QTG_TEST_ECHO").is_ok() {
                    eprintln!("[{tag}] {line}");
                }
                sink.lock().expect("log lock").push(line);
            }
        });
        Ok(Proc { name: binary.to_string(), child, lines, reader: Some(reader) })
    }

    /// Waits for a JSON log line carrying `field` and returns its value.
    pub async fn wait_field(&self, field: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let lines = self.lines.lock().expect("log lock");
                for l in lines.iter() {
                    if let Ok(v) = serde_json::from_str::<Value>(l) {
                        if let Some(s) = v.get(field).and_then(Value::as_str) {
                            return Ok(s.to_string());
                        }
                    }
                }
            }
            if Instant::now() > deadline {
                bail!("{} never logged {field}; log:\n{}", self.name, self.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log(&self) -> String {
        self.lines.lock().expect("log lock").join("\n")
    }

    /// How many ticks worker `worker` of this process has finished (from its `/metrics`).
    pub async fn ticks(&self, worker: &str) -> anyhow::Result<u64> {
        let admin = self.wait_field("admin_addr", Duration::from_secs(30)).await?;
        let text = http_client().get(format!("http://{admin}/metrics")).send().await?.text().await?;
        let prefix = format!("qtg_worker_tick_duration_seconds_count{{worker=\"{worker}\"}} ");
        Ok(text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok()).unwrap_or(0))
    }

    /// Waits until worker `worker` of this process has run `n` more ticks: long enough for it
    /// to have seen whatever was in the database when this was called.
    pub async fn wait_ticks(&self, worker: &str, n: u64, timeout: Duration) -> anyhow::Result<()> {
        let start = self.ticks(worker).await?;
        wait_until(&format!("{n} ticks of {worker} in {}", self.name), timeout, || async {
            Ok(self.ticks(worker).await? >= start + n)
        })
        .await
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = std::process::Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status();
        }
    }

    /// The exit status if the process has ended on its own (`None` while it runs).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for the process to exit; returns its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<Option<i32>> {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| anyhow!("{} did not exit", self.name))??;
        // Its last words: the exit can be seen before the rest of stderr has been read.
        if let Some(r) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), r).await;
        }
        Ok(status.code())
    }
}

/// A running API process plus a client.
pub struct Api {
    pub proc: Proc,
    pub base: String,
    pub http: reqwest::Client,
    pub admin_key: String,
}

pub const BOOTSTRAP_KEY: &str = "qtg-test-bootstrap-admin-key-0001";

impl Api {
    pub async fn start(db_url: &str, extra: &[(&str, &str)]) -> anyhow::Result<Api> {
        let mut env = vec![("MG_API_BOOTSTRAP_ADMIN_KEY", BOOTSTRAP_KEY), ("MG_MIGRATE", "true")];
        env.extend_from_slice(extra);
        let proc = Proc::spawn("qtg-api", db_url, &env).await?;
        let addr = proc.wait_field("api_addr", Duration::from_secs(30)).await?;
        Ok(Api { proc, base: format!("http://{addr}"), http: http_client(), admin_key: BOOTSTRAP_KEY.into() })
    }

    /// The all-in-one `qtg` (API + every worker) as the API under test.
    pub async fn all_in_one(db_url: &str, extra: &[(&str, &str)]) -> anyhow::Result<Api> {
        let mut env = vec![("MG_API_BOOTSTRAP_ADMIN_KEY", BOOTSTRAP_KEY)];
        env.extend_from_slice(extra);
        let proc = Proc::spawn("qtg", db_url, &env).await?;
        let addr = proc.wait_field("api_addr", Duration::from_secs(30)).await?;
        Ok(Api { proc, base: format!("http://{addr}"), http: http_client(), admin_key: BOOTSTRAP_KEY.into() })
    }

    pub async fn call(&self, method: &str, path: &str, key: &str, body: Option<Value>) -> anyhow::Result<(u16, Value)> {
        let url = format!("{}{}", self.base, path);
        let mut req = match method {
            "GET" => self.http.get(&url),
            "POST" => self.http.post(&url),
            "DELETE" => self.http.delete(&url),
            "PUT" => self.http.put(&url),
            other => bail!("method {other}"),
        };
        if !key.is_empty() {
            req = req.bearer_auth(key);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Ok((status, value))
    }

    /// Calls and insists on `expect`.
    pub async fn ok(
        &self,
        method: &str,
        path: &str,
        key: &str,
        body: Option<Value>,
        expect: u16,
    ) -> anyhow::Result<Value> {
        let (status, value) = self.call(method, path, key, body).await?;
        if status != expect {
            bail!("{method} {path}: expected {expect}, got {status}: {value}");
        }
        Ok(value)
    }

    pub async fn key(&self, principal: &str, role: &str) -> anyhow::Result<String> {
        let v = self
            .ok("POST", "/v3/api-keys", &self.admin_key, Some(json!({"principal": principal, "roles": [role]})), 201)
            .await?;
        Ok(v["secret"].as_str().context("secret")?.to_string())
    }
}

/// The principals a lifecycle test needs (four-eyes: proposer ≠ reviewer, creator ≠ approver).
pub struct Keys {
    pub operator: String,
    pub requester: String,
    pub approver: String,
}

impl Keys {
    pub async fn create(api: &Api) -> anyhow::Result<Keys> {
        Ok(Keys {
            operator: api.key("ops", "operator").await?,
            requester: api.key("treasury-bot", "requester").await?,
            approver: api.key("alice", "approver").await?,
        })
    }
}

/// Proposes `template` (as the operator) and approves it (as the bootstrap admin).
pub async fn install_template(api: &Api, keys: &Keys, template: Value) -> anyhow::Result<()> {
    let p = api.ok("POST", "/v3/template-proposals", &keys.operator, Some(template), 201).await?;
    let id = p["id"].as_str().context("proposal id")?;
    api.ok(
        "POST",
        &format!("/v3/template-proposals/{id}/approve"),
        &api.admin_key,
        Some(json!({"reason": "test"})),
        200,
    )
    .await?;
    Ok(())
}

/// Creates and approves a movement; returns its id.
pub async fn start_movement(
    api: &Api,
    keys: &Keys,
    template_key: &str,
    idem: &str,
    callback_url: Option<&str>,
) -> anyhow::Result<String> {
    let mut body = json!({
        "template_key": template_key,
        "intent": {"asset": "USDC", "amount": "250.00", "source": "venue-a", "destination": "0xdest"},
        "idempotency_key": idem,
    });
    if let Some(u) = callback_url {
        body["callback_url"] = json!(u);
    }
    let m = api.ok("POST", "/v3/movements", &keys.requester, Some(body), 201).await?;
    let id = m["id"].as_str().context("movement id")?.to_string();
    api.ok("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, None, 200).await?;
    Ok(id)
}

/// Polls `check` until it answers true; fails naming `what` after `timeout`. Tests wait on a
/// condition, never on a fixed sleep.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    while !check().await? {
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Waits until `condition` (a boolean SQL query with `$1` = `id`) is true: for tests about
/// time windows, e.g. `SELECT now() > expires_at FROM movement_requests WHERE id = $1`, read by
/// the database's clock as qtg reads it.
pub async fn wait_db(pool: &PgPool, condition: &str, id: uuid::Uuid, timeout: Duration) -> anyhow::Result<()> {
    wait_until(condition, timeout, || async {
        Ok(sqlx::query_scalar::<_, Option<bool>>(sqlx::AssertSqlSafe(condition.to_string()))
            .bind(id)
            .fetch_optional(pool)
            .await?
            .flatten()
            .unwrap_or(false))
    })
    .await
}

/// Polls the movement until its state is one of `states`.
pub async fn wait_state(api: &Api, key: &str, id: &str, states: &[&str], timeout: Duration) -> anyhow::Result<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let m = api.ok("GET", &format!("/v3/movements/{id}"), key, None, 200).await?;
        if states.iter().any(|s| m["request_state"] == *s) {
            return Ok(m);
        }
        if Instant::now() > deadline {
            bail!("movement {id} never reached {states:?}: {m:#}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn node<'a>(movement: &'a Value, key: &str) -> &'a Value {
    movement["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["node_key"] == key)).unwrap_or(&Value::Null)
}

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
        clock_skew_seconds: settings.clock_skew_seconds,
        shared: &Default::default(),
    })
    .map_err(anyhow::Error::msg)?;
    let registry = qtg_executor::Registry::build(&file, &[sim], &none)?;
    Ok(qtg_engine::Engine {
        pool: db.pool.clone(),
        registry: Arc::new(registry),
        settings,
        actor: "test-worker".into(),
    })
}

/// Installs `nodes`/`edges` as template `key` (proposed by "ops", approved by "admin").
pub async fn install_plan(engine: &qtg_engine::Engine, key: &str, plan: Value) -> anyhow::Result<()> {
    let plan = serde_json::from_value(plan)?;
    let p = engine
        .propose_template(
            "ops",
            qtg_engine::templates::Proposal { template_key: key.into(), description: None, plan },
            3600.0,
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
                idempotency_key: idem.into(),
                body_hash: idem.into(),
            },
            300.0,
        )
        .await?;
    engine.approve_movement("alice", row.id, None).await?;
    Ok(row.id)
}

/// Node `key` of movement `id`: (state, error_code, provider_refs, attempt_no).
pub async fn node_row(
    pool: &PgPool,
    id: uuid::Uuid,
    key: &str,
) -> anyhow::Result<(String, Option<String>, Value, i32)> {
    let r = sqlx::query("SELECT node_state, error_code, provider_refs, attempt_no FROM movement_request_nodes WHERE request_id = $1 AND node_key = $2")
        .bind(id)
        .bind(key)
        .fetch_one(pool)
        .await?;
    Ok((r.get(0), r.get(1), r.get(2), r.get(3)))
}

pub async fn request_state(pool: &PgPool, id: uuid::Uuid) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar("SELECT request_state FROM movement_requests WHERE id = $1").bind(id).fetch_one(pool).await?)
}

/// A test HTTP client (with the process' TLS provider installed, as reqwest requires).
pub fn http_client() -> reqwest::Client {
    qtg_executor::remote::install_tls_provider();
    reqwest::Client::new()
}

pub const EXAMPLE_HMAC_SECRET: &str = "example-hmac-secret-0001";

pub struct Remote {
    pub proc: Proc,
    pub registry: std::path::PathBuf,
}

/// Starts the example executor (`qtg-remote-executor-example`) and writes a registry naming it next to the sim lanes.
/// Calls are HMAC-signed on both transports (the registry names the secret's env var).
pub async fn start_example(db: &TestDb, timeout_ms: u64, extra: &[(&str, &str)]) -> anyhow::Result<Remote> {
    let keys = std::env::temp_dir().join(format!("{}-example-keys.jsonl", db.name)).to_string_lossy().to_string();
    let mut env = vec![
        ("EXAMPLE_GRPC_ADDR", "127.0.0.1:0"),
        ("EXAMPLE_HTTP_ADDR", "127.0.0.1:0"),
        ("EXAMPLE_HMAC_SECRET", EXAMPLE_HMAC_SECRET),
        ("EXAMPLE_KEY_STORE", keys.as_str()),
    ];
    env.extend_from_slice(extra);
    let proc = Proc::spawn("qtg-remote-executor-example", &db.url, &env).await?;
    let grpc = proc.wait_field("grpc_addr", Duration::from_secs(20)).await?;
    let http = proc.wait_field("http_addr", Duration::from_secs(20)).await?;
    let sim = std::fs::read_to_string(registry_file())?;
    let registry = std::env::temp_dir().join(format!("{}-registry.toml", db.name));
    std::fs::write(
        &registry,
        format!(
            "{sim}\n[executors.\"exec.ex.grpc\"]\ntransport = \"grpc\"\nendpoint = \"http://{grpc}\"\ntimeout_ms = {timeout_ms}\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n\
             [executors.\"exec.ex.http\"]\ntransport = \"http\"\nendpoint = \"http://{http}\"\ntimeout_ms = {timeout_ms}\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n\
             [signers.\"signer.ex.grpc\"]\ntransport = \"grpc\"\nendpoint = \"http://{grpc}\"\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n\
             [signers.\"signer.ex.http\"]\ntransport = \"http\"\nendpoint = \"http://{http}/signer\"\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n"
        ),
    )?;
    Ok(Remote { proc, registry })
}

/// The CEX lane tests' settings: call deadline 3 s (submit window 3.4 s), grace 5 s, fast
/// loops.
pub const CEX_ENV: [(&str, &str); 5] = [
    ("MG_EXECUTOR_TIMEOUT_MS", "3000"),
    ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", "5"),
    ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2"),
    ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.2"),
    ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "0.3"),
];

/// The CEX entries' extra config in those tests: the venue answers within 1 s or counts as
/// silent; its history lags 1 s at most.
pub const CEX_ENTRY: &str = "timeout_ms = 1000, history_lag_seconds = 1";

/// A CEX lane test bed: its own database, a `qtg-venue-sim`, the API with the CEX registry
/// (`kraken`: with the Kraken-shaped account's entries too) and `env`, the four keys, and the
/// demo template `template` (a file of `deploy/`). Workers are spawned with the same env.
pub struct CexBed {
    pub db: TestDb,
    pub venue: VenueSim,
    pub api: Api,
    pub keys: Keys,
    pub env: Vec<(String, String)>,
}

impl CexBed {
    pub async fn start(env: &[(&str, &str)], entry: &str, kraken: bool, template: &str) -> anyhow::Result<CexBed> {
        let db = TestDb::new().await?;
        let venue = VenueSim::start(&db.name).await?;
        let registry =
            if kraken { venue.kraken_registry(&db.name, entry)? } else { venue.registry(&db.name, entry)? };
        let mut env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.extend(VENUE_SIM_CREDENTIALS.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env.push(("MG_EXECUTOR_REGISTRY".into(), registry.to_string_lossy().to_string()));
        let api = Api::start(&db.url, &env_pairs(&env)).await?;
        let keys = Keys::create(&api).await?;
        let template: Value = serde_json::from_str(&std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(template),
        )?)?;
        install_template(&api, &keys, template).await?;
        Ok(CexBed { db, venue, api, keys, env })
    }

    pub async fn worker(&self, binary: &str) -> anyhow::Result<Proc> {
        Proc::spawn(binary, &self.db.url, &env_pairs(&self.env)).await
    }

    /// Creates and approves a movement of `amount` USDT by `template` from `source` to sim_b.
    pub async fn movement(&self, template: &str, source: &str, idem: &str, amount: &str) -> anyhow::Result<String> {
        let body = json!({
            "template_key": template,
            "intent": {"asset": "USDT", "amount": amount, "source": source, "destination": SIM_B_DEPOSIT},
            "idempotency_key": idem,
        });
        let m = self.api.ok("POST", "/v3/movements", &self.keys.requester, Some(body), 201).await?;
        let id = m["id"].as_str().unwrap_or_default().to_string();
        self.api.ok("POST", &format!("/v3/movements/{id}/approve"), &self.keys.approver, None, 200).await?;
        Ok(id)
    }

    /// The id of node `key` of movement `movement`.
    pub async fn node(&self, movement: &str, key: &str) -> anyhow::Result<uuid::Uuid> {
        Ok(sqlx::query_scalar("SELECT id FROM movement_request_nodes WHERE request_id = $1::uuid AND node_key = $2")
            .bind(movement)
            .bind(key)
            .fetch_one(&self.db.pool)
            .await?)
    }

    /// A node's state, refs and error code.
    pub async fn refs(&self, node: uuid::Uuid) -> anyhow::Result<(String, Value, Option<String>)> {
        Ok(sqlx::query_as("SELECT node_state, provider_refs, error_code FROM movement_request_nodes WHERE id = $1")
            .bind(node)
            .fetch_one(&self.db.pool)
            .await?)
    }

    pub async fn wait(&self, id: &str, states: &[&str], secs: u64) -> anyhow::Result<Value> {
        wait_state(&self.api, &self.keys.requester, id, states, Duration::from_secs(secs)).await
    }
}

/// A running `qtg-venue-sim` (accounts of `deploy/venue-sim.toml`, ledger in a temp file).
pub struct VenueSim {
    pub proc: Proc,
    pub base: String,
    pub state: PathBuf,
}

/// The venue sim's credentials for the qtg processes (`MG_SIM_A_…`, `MG_SIM_B_…`, and the
/// Kraken-shaped `MG_SIM_K_…`, whose secret is base64).
pub const VENUE_SIM_CREDENTIALS: [(&str, &str); 6] = [
    ("MG_SIM_A_ACCESS_KEY", "sim-a-api-key-0001"),
    ("MG_SIM_A_SECRET", "sim-a-secret-0001"),
    ("MG_SIM_B_ACCESS_KEY", "sim-b-api-key-0001"),
    ("MG_SIM_B_SECRET", "sim-b-secret-0001"),
    ("MG_SIM_K_ACCESS_KEY", "sim-k-api-key-0001"),
    ("MG_SIM_K_SECRET", "c2ltLWstc2VjcmV0LTAwMDEta3Jha2VuLXNoYXBlZC1hY2NvdW50"),
];

/// A destination address whitelisted at sim_a that is sim_b's USDT deposit address.
pub const SIM_B_DEPOSIT: &str = "0xb0b0000000000000000000000000000000000b0b";

impl VenueSim {
    pub async fn start(tag: &str) -> anyhow::Result<VenueSim> {
        let accounts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/venue-sim.toml");
        let state = std::env::temp_dir().join(format!("{tag}-venue-{}.json", uuid::Uuid::new_v4().simple()));
        let (a, s) = (accounts.to_string_lossy().to_string(), state.to_string_lossy().to_string());
        let proc =
            Proc::spawn_args("qtg-venue-sim", &["--addr", "127.0.0.1:0", "--accounts", &a, "--state", &s], "", &[])
                .await?;
        let addr = proc.wait_field("venue_addr", Duration::from_secs(20)).await?;
        Ok(VenueSim { proc, base: format!("http://{addr}"), state })
    }

    /// A registry of the sim lanes plus the CEX entries of `deploy/registry.cex.toml`, pointed
    /// at this venue; `extra` is appended to each CEX entry's config (e.g. `lookback_seconds = 5`).
    pub fn registry(&self, tag: &str, extra: &str) -> anyhow::Result<PathBuf> {
        self.registry_of(tag, extra, &["registry.cex.toml"])
    }

    /// [`registry`](Self::registry) plus the Kraken-shaped account's entries
    /// (`deploy/registry.cex-kraken.toml`); `extra` goes to every CEX entry.
    pub fn kraken_registry(&self, tag: &str, extra: &str) -> anyhow::Result<PathBuf> {
        self.registry_of(tag, extra, &["registry.cex.toml", "registry.cex-kraken.toml"])
    }

    fn registry_of(&self, tag: &str, extra: &str, files: &[&str]) -> anyhow::Result<PathBuf> {
        let sim = std::fs::read_to_string(registry_file())?;
        let mut cex = String::new();
        for f in files {
            cex.push_str(&std::fs::read_to_string(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(f),
            )?);
            cex.push('\n');
        }
        let extra = if extra.is_empty() { String::new() } else { format!(", {extra}") };
        let cex = cex.replace("http://127.0.0.1:9400\"", &format!("{}\"{extra}", self.base));
        let path = std::env::temp_dir().join(format!("{tag}-registry-cex.toml"));
        std::fs::write(&path, format!("{sim}\n{cex}"))?;
        Ok(path)
    }

    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let http = http_client();
        let req = match method {
            "POST" => http.post(&url).json(&body.unwrap_or(Value::Null)),
            "DELETE" => http.delete(&url),
            _ => http.get(&url),
        };
        let resp = req.send().await?;
        let status = resp.status();
        let v: Value = resp.json().await?;
        if !status.is_success() {
            bail!("venue sim {method} {path}: {status}: {v}");
        }
        Ok(v)
    }

    pub async fn fault(&self, fault: Value) -> anyhow::Result<()> {
        self.admin("POST", "/admin/faults", Some(fault)).await.map(|_| ())
    }

    /// Every withdraw request the venue received, in order.
    pub async fn requests(&self) -> anyhow::Result<Vec<Value>> {
        Ok(self.admin("GET", "/admin/requests", None).await?["requests"].as_array().cloned().unwrap_or_default())
    }

    /// Withdraw requests carrying client id `client_id`.
    pub async fn requests_for(&self, prefix: &str) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .requests()
            .await?
            .into_iter()
            .filter(|r| r["client_id"].as_str().is_some_and(|c| c.starts_with(prefix)))
            .collect())
    }

    /// Withdrawals the venue booked (paid) from requests whose client id starts with `prefix`.
    pub async fn paid(&self, prefix: &str) -> anyhow::Result<Vec<Value>> {
        let ledger = self.admin("GET", "/admin/ledger", None).await?;
        Ok(ledger["withdrawals"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|w| w["origin"] == "request")
            .filter(|w| w["requested_client_id"].as_str().is_some_and(|c| c.starts_with(prefix)))
            .collect())
    }
}

impl Drop for VenueSim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.state);
    }
}

/// The anvil binary: `QTG_ANVIL` (make test sets it), else what `scripts/ensure-evm-tools.sh`
/// installed under `.qtg/evm`.
pub fn anvil_bin() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("QTG_ANVIL") {
        return Ok(PathBuf::from(p));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let modules = root.join(".qtg/evm/node_modules/@foundry-rs");
    let found = std::fs::read_dir(&modules)
        .ok()
        .and_then(|d| d.filter_map(Result::ok).map(|e| e.path().join("bin/anvil")).find(|p| p.exists()));
    found.with_context(|| {
        format!("anvil is not installed under {}: run scripts/ensure-evm-tools.sh (make test does)", modules.display())
    })
}

/// anvil's first default account (its key is public: anvil's documented test mnemonic).
pub const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
pub const ANVIL_ADDR_0: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";
/// anvil's second default account's key.
pub const ANVIL_KEY_1: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
/// anvil's third default account: the tests' recipient.
pub const ANVIL_ADDR_2: &str = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc";

/// A local Ethereum node (chain 31337, instant mining) for one test.
pub struct Anvil {
    child: Child,
    pub url: String,
    http: reqwest::Client,
}

impl Anvil {
    pub async fn start() -> anyhow::Result<Anvil> {
        Self::start_chain(31337).await
    }

    /// A node serving chain `chain_id` (two of them are two chains).
    pub async fn start_chain(chain_id: u64) -> anyhow::Result<Anvil> {
        let mut child = Command::new(anvil_bin()?)
            .args(["--port", "0", "--host", "127.0.0.1", "--chain-id", &chain_id.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("spawn anvil")?;
        let stdout = child.stdout.take().context("anvil stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = line.strip_prefix("Listening on ") {
                    return Some(format!("http://{}", addr.trim()));
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let url = match url {
            Some(u) => u,
            None => bail!("anvil did not say where it listens"),
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Anvil { child, url, http: http_client() })
    }

    pub async fn rpc(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let v: Value = self
            .http
            .post(&self.url)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await?
            .json()
            .await?;
        if let Some(e) = v.get("error") {
            bail!("{method}: {e}");
        }
        Ok(v["result"].clone())
    }

    pub async fn quantity(&self, method: &str, params: Value) -> anyhow::Result<u128> {
        let v = self.rpc(method, params).await?;
        let s = v.as_str().context("quantity")?.trim_start_matches("0x");
        Ok(u128::from_str_radix(if s.is_empty() { "0" } else { s }, 16)?)
    }

    /// Deploys `contracts/QtgTestToken` from anvil's first account with `supply` base units;
    /// returns its address.
    pub async fn deploy_token(&self, supply: u128) -> anyhow::Result<String> {
        let code =
            std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contracts/QtgTestToken.bin"))?;
        let data = format!("0x{}{supply:064x}", code.trim());
        let hash =
            self.rpc("eth_sendTransaction", json!([{"from": ANVIL_ADDR_0, "data": data, "gas": "0x200000"}])).await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let receipt = self.rpc("eth_getTransactionReceipt", json!([hash])).await?;
            if let Some(address) = receipt["contractAddress"].as_str() {
                return Ok(address.to_string());
            }
            if Instant::now() > deadline {
                bail!("the token's deployment {hash} was not mined: {receipt}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn token_balance(&self, token: &str, owner: &str) -> anyhow::Result<u128> {
        let data = format!("0x70a08231{:0>64}", owner.trim_start_matches("0x"));
        let v = self.rpc("eth_call", json!([{"to": token, "data": data}, "latest"])).await?;
        let s = v.as_str().context("balanceOf")?.trim_start_matches("0x").trim_start_matches('0');
        Ok(if s.is_empty() { 0 } else { u128::from_str_radix(s, 16)? })
    }

    /// `MG_EVM_CHAINS` for this node.
    pub fn chains(&self) -> String {
        evm_chains(&self.url, 1, 120.0)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// A registry of the sim lanes plus `exec.evm.transfer` (from anvil's first account),
/// `signer.evm.local` (its key from `MG_ANVIL0_PRIVATE_KEY`) and `signer.evm.other` (anvil's
/// second account, `MG_ANVIL1_PRIVATE_KEY`: a signer that is not the from-address).
pub fn evm_registry(tag: &str) -> anyhow::Result<PathBuf> {
    let sim = std::fs::read_to_string(registry_file())?;
    let path = std::env::temp_dir().join(format!("{tag}-registry-evm.toml"));
    std::fs::write(
        &path,
        format!(
            "{sim}\n[executors.\"exec.evm.transfer\"]\ntransport = \"local\"\nimpl = \"evm\"\nconfig = {{ from = \"{ANVIL_ADDR_0}\" }}\n\n\
             [signers.\"signer.evm.local\"]\ntransport = \"local\"\nimpl = \"evm\"\nconfig = {{ account = \"anvil0\" }}\n\n\
             [signers.\"signer.evm.other\"]\ntransport = \"local\"\nimpl = \"evm\"\nconfig = {{ account = \"anvil1\" }}\n"
        ),
    )?;
    Ok(path)
}

/// A recording JSON-RPC proxy in front of a node: counts every method called through it (the
/// boundary: `eth_sendRawTransaction` calls that reached the chain), and can hold the next
/// broadcasts before forwarding them (until [`RpcProxy::release`]) or hold their answers
/// after forwarding them (the chain has the transaction; the caller hears nothing for 30 s).
pub struct RpcProxy {
    pub url: String,
    inner: Arc<ProxyInner>,
    _task: tokio::task::JoinHandle<()>,
}

struct ProxyInner {
    upstream: String,
    http: reqwest::Client,
    counts: Mutex<HashMap<String, u64>>,
    forwarded: Mutex<HashMap<String, u64>>,
    hold_before: std::sync::atomic::AtomicUsize,
    hold_after: std::sync::atomic::AtomicUsize,
    released: tokio::sync::watch::Sender<bool>,
}

fn take_one(n: &std::sync::atomic::AtomicUsize) -> bool {
    use std::sync::atomic::Ordering::SeqCst;
    n.fetch_update(SeqCst, SeqCst, |v| v.checked_sub(1)).is_ok()
}

async fn proxy_call(
    axum::extract::State(p): axum::extract::State<Arc<ProxyInner>>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let method = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default();
    *p.counts.lock().expect("counts").entry(method.clone()).or_insert(0) += 1;
    // Like a request on the wire: it reaches the node even if its caller gave up meanwhile.
    let forward = {
        let p = p.clone();
        tokio::spawn(async move {
            let broadcast = method == "eth_sendRawTransaction";
            if broadcast && take_one(&p.hold_before) {
                let mut rx = p.released.subscribe();
                let _ = rx.wait_for(|r| *r).await;
            }
            let answer = p.http.post(&p.upstream).header("content-type", "application/json").body(body).send().await;
            let answer = match answer {
                Ok(r) => r.bytes().await.ok(),
                Err(_) => None,
            };
            *p.forwarded.lock().expect("forwarded").entry(method.clone()).or_insert(0) += 1;
            if broadcast && take_one(&p.hold_after) {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            answer
        })
    };
    match forward.await.ok().flatten() {
        Some(answer) => ([(axum::http::header::CONTENT_TYPE, "application/json")], answer).into_response(),
        None => axum::http::StatusCode::BAD_GATEWAY.into_response(),
    }
}

impl RpcProxy {
    pub async fn start(upstream: &str) -> anyhow::Result<RpcProxy> {
        let (released, _) = tokio::sync::watch::channel(false);
        let inner = Arc::new(ProxyInner {
            upstream: upstream.to_string(),
            http: http_client(),
            counts: Mutex::new(HashMap::new()),
            forwarded: Mutex::new(HashMap::new()),
            hold_before: Default::default(),
            hold_after: Default::default(),
            released,
        });
        let app = axum::Router::new().route("/", axum::routing::post(proxy_call)).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(RpcProxy { url, inner, _task: task })
    }

    /// Calls of `method` that reached the proxy.
    pub fn count(&self, method: &str) -> u64 {
        self.inner.counts.lock().expect("counts").get(method).copied().unwrap_or(0)
    }

    /// Calls of `method` the proxy forwarded to the node (and heard back from).
    pub fn forwarded(&self, method: &str) -> u64 {
        self.inner.forwarded.lock().expect("forwarded").get(method).copied().unwrap_or(0)
    }

    /// Holds the next `n` broadcasts before forwarding them, until [`RpcProxy::release`].
    pub fn hold_broadcasts(&self, n: usize) {
        self.inner.hold_before.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Forwards the next `n` broadcasts, then holds their answers for 30 s.
    pub fn swallow_answers(&self, n: usize) {
        self.inner.hold_after.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn release(&self) {
        let _ = self.inner.released.send(true);
    }
}

/// `MG_EVM_CHAINS` for one chain 31337 at `url`, with `confirmations` and
/// `replace_after_seconds`.
pub fn evm_chains(url: &str, confirmations: u64, replace_after_seconds: f64) -> String {
    json!([{"chain_id": 31337, "rpc_urls": [url], "confirmations": confirmations,
            "replace_after_seconds": replace_after_seconds,
            "max_fee_per_gas_wei": "100000000000", "max_priority_fee_per_gas_wei": "2000000000"}])
    .to_string()
}

/// Owned `(key, value)` settings as the pairs [`Proc::spawn`] takes.
pub fn env_pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A callback receiver for a test: keeps every JSON body posted to its URL, answers 200.
#[derive(Clone, Default)]
pub struct Hooks(Arc<Mutex<Vec<Value>>>);

async fn keep_hook(
    axum::extract::State(h): axum::extract::State<Hooks>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
        h.0.lock().expect("hooks").push(v);
    }
    axum::http::StatusCode::OK
}

impl Hooks {
    /// Serves on a port of its own; answers its URL.
    pub async fn serve(&self) -> anyhow::Result<String> {
        let app = axum::Router::new().route("/hook", axum::routing::post(keep_hook)).with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(url)
    }

    /// Every body received.
    pub fn all(&self) -> Vec<Value> {
        self.0.lock().expect("hooks").clone()
    }

    /// The bodies received of `event_type`.
    pub fn of(&self, event_type: &str) -> Vec<Value> {
        self.0.lock().expect("hooks").iter().filter(|h| h["event_type"] == event_type).cloned().collect()
    }
}

/// A TCP proxy in front of Postgres that the test controls: [`DbProxy::cut`] drops every
/// connection through it and refuses new ones (a worker cut off from its database, or the
/// database gone) until [`DbProxy::restore`].
pub struct DbProxy {
    /// `url` with the proxy's address instead of the server's.
    pub url: String,
    cut: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl DbProxy {
    /// In front of the server of `db_url` (`postgres://user@host:port/db`).
    pub async fn start(db_url: &str) -> anyhow::Result<DbProxy> {
        let (head, rest) = db_url.split_once('@').context("a postgres URL with user@host")?;
        let (upstream, tail) = rest.split_once('/').context("a postgres URL with /db")?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("{head}@{}/{tail}", listener.local_addr()?);
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (upstream, c, k) = (upstream.to_string(), cut.clone(), conns.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if c.load(std::sync::atomic::Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let h = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                let mut conns = k.lock().expect("conns");
                conns.retain(|c| !c.is_finished());
                conns.push(h.abort_handle());
            }
        });
        Ok(DbProxy { url, cut, conns, task })
    }

    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for h in self.conns.lock().expect("conns").drain(..) {
            h.abort();
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for DbProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}
