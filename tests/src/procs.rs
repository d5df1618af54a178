//! The real binaries as processes: spawned with settings, their logs read for addresses and
//! ticks; the API client and its keys; waiting for a condition.

use super::*;

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

    /// Waits for a JSON log line carrying `field` and returns its value (a string's text, else
    /// the JSON).
    pub async fn wait_field(&self, field: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let lines = self.lines.lock().expect("log lock");
                for l in lines.iter() {
                    if let Ok(v) = serde_json::from_str::<Value>(l) {
                        if let Some(x) = v.get(field) {
                            return Ok(x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string()));
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
/// The movement once it settled (COMPLETED, FAILED or MANUAL_INTERVENTION) within 90 s; else
/// the error with the logs of `procs`.
pub async fn wait_settled(api: &Api, key: &str, id: &str, procs: &[&Proc]) -> anyhow::Result<Value> {
    wait_state(api, key, id, &["COMPLETED", "FAILED", "MANUAL_INTERVENTION"], Duration::from_secs(90))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", procs.iter().map(|p| p.log()).collect::<Vec<_>>().join("\n")))
}

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

/// Owned `(key, value)` settings as the pairs [`Proc::spawn`] takes.
pub fn env_pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}
