//! The CEX lane's test bed: `qtg-venue-sim`, its accounts and registries.

use super::*;

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
