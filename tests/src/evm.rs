//! The EVM lanes' test bed: anvil, its accounts, an RPC proxy that misbehaves on demand.

use super::*;

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
            "{sim}\n[executors.\"exec.evm.transfer\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
             config = {{ from = \"{ANVIL_ADDR_0}\" }}\n\n\
             [signers.\"signer.evm.local\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
             config = {{ account = \"anvil0\" }}\n\n\
             [signers.\"signer.evm.other\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
             config = {{ account = \"anvil1\" }}\n"
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
