//! A small Ethereum JSON-RPC client over the lane's HTTP client: the dozen methods the lane
//! uses, with the node's own error (code and message) kept apart from a transport failure.

use std::time::Duration;

use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RpcError {
    /// The node answered with a JSON-RPC error.
    #[error("the node refused {method}: {message} (code {code})")]
    Node { method: String, code: i64, message: String },
    /// No answer (connection, timeout, HTTP error, not JSON-RPC).
    #[error("no answer to {method}: {detail}")]
    Transport { method: String, detail: String },
}

impl RpcError {
    pub fn message(&self) -> &str {
        match self {
            RpcError::Node { message, .. } => message,
            RpcError::Transport { detail, .. } => detail,
        }
    }
}

/// One chain's RPC endpoints, tried in order on a transport failure.
#[derive(Clone)]
pub struct Rpc {
    urls: Vec<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Rpc {
    /// The URLs with their credentials and query tokens masked.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| qtg_core::urls::redact(u)).collect();
        f.debug_struct("Rpc").field("urls", &urls).finish()
    }
}

impl Rpc {
    pub fn new(urls: Vec<String>, timeout: Duration) -> Result<Rpc, String> {
        qtg_executor::remote::install_tls_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Rpc { urls, http })
    }

    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut last = RpcError::Transport { method: method.into(), detail: "no RPC URL".into() };
        let mut delivered_maybe = false;
        for url in &self.urls {
            match self.once(url, method, &body).await {
                Err(e @ RpcError::Transport { .. }) => {
                    last = e;
                    delivered_maybe = true;
                }
                // A broadcast an earlier endpoint may have taken: another one's refusal
                // proves nothing about it.
                Err(RpcError::Node { message, .. }) if delivered_maybe && method == "eth_sendRawTransaction" => {
                    return Err(RpcError::Transport {
                        method: method.into(),
                        detail: format!("an earlier endpoint gave no answer; another refused: {message}"),
                    });
                }
                other => return other,
            }
        }
        Err(last)
    }

    async fn once(&self, url: &str, method: &str, body: &Value) -> Result<Value, RpcError> {
        let transport = |detail: String| RpcError::Transport { method: method.into(), detail };
        // Never the URL in an error: RPC URLs often carry a provider's API key.
        let resp = self.http.post(url).json(body).send().await.map_err(|e| transport(e.without_url().to_string()))?;
        let status = resp.status();
        let v: Value = resp.json().await.map_err(|e| transport(format!("HTTP {status}: {}", e.without_url())))?;
        if let Some(err) = v.get("error") {
            return Err(RpcError::Node {
                method: method.into(),
                code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: err.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
            });
        }
        v.get("result").cloned().ok_or_else(|| transport(format!("HTTP {status}: no result")))
    }

    /// A quantity answer (`"0x1a"`) as u128.
    pub async fn quantity(&self, method: &str, params: Value) -> Result<u128, RpcError> {
        let v = self.call(method, params).await?;
        parse_quantity(&v)
            .ok_or_else(|| RpcError::Transport { method: method.into(), detail: format!("not a quantity: {v}") })
    }
}

pub fn parse_quantity(v: &Value) -> Option<u128> {
    let s = v.as_str()?.strip_prefix("0x")?;
    if s.is_empty() {
        return Some(0);
    }
    u128::from_str_radix(s, 16).ok()
}

pub fn quantity(n: u128) -> String {
    format!("0x{n:x}")
}
