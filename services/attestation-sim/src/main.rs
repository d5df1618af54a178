//! `qtg-attestation-sim`: an attestation service speaking the shape of Circle's attestation API
//! (`GET /v2/messages/{sourceDomain}?transactionHash=0x…`) for the CCTP-shaped contracts of
//! `contracts/QtgCctp.sol`: 404 until the burn is mined on the source chain, then
//! `pending_confirmations` until it has its confirmations, then `complete` with the message and
//! its m-of-n attestation, as Circle's transmitter verifies it: the signatures of `threshold`
//! attesters over keccak256(message), 65 bytes each, in increasing order of signer address. An
//! optional rate limit answers 429 with `Retry-After`; `/admin/faults` injects answers for
//! tests. For demos and tests only.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy::primitives::{keccak256, Bytes, B256};
use alloy::signers::local::PrivateKeySigner;
use alloy::signers::SignerSync;
use alloy::sol_types::SolValue;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use qtg_cctp::fees::Bps;
use qtg_evm::calls::MessageV2;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(name = "qtg-attestation-sim", about = "A CCTP attestation service simulator for qtg's tests and demo")]
struct Args {
    /// Address to listen on (port 0: any; logged as `attestation_addr`).
    #[arg(long, env = "QTG_ATTESTATION_SIM_ADDR", default_value = "127.0.0.1:9500")]
    addr: SocketAddr,
    /// A source chain: `<domain>=<rpc url>` (repeatable).
    #[arg(long = "source", required = true)]
    sources: Vec<String>,
    /// The attesters' private keys (hex, comma-separated). Test keys: this service is never
    /// for real money.
    #[arg(long, env = "QTG_ATTESTATION_SIM_ATTESTER_KEY", hide_env_values = true)]
    attester_key: String,
    /// How many of the attesters sign each message (the transmitter's `signatureThreshold`;
    /// default: all of them): those with the lowest addresses.
    #[arg(long, env = "QTG_ATTESTATION_SIM_THRESHOLD")]
    threshold: Option<usize>,
    /// Blocks (the burn's included) before an attestation is complete.
    #[arg(long, env = "QTG_ATTESTATION_SIM_CONFIRMATIONS", default_value_t = 1)]
    confirmations: u64,
    /// Requests per second answered before 429 (0: no limit).
    #[arg(long, env = "QTG_ATTESTATION_SIM_RATE_LIMIT", default_value_t = 0)]
    rate_limit: u32,
    /// CCTP V2: the fee of a Fast Transfer (finality 1000), in basis points (fractions allowed),
    /// as `GET /v2/burn/USDC/fees/{src}/{dst}` answers it and as the attester executes it.
    #[arg(long, env = "QTG_ATTESTATION_SIM_FAST_FEE_BPS", default_value = "1")]
    fast_fee_bps: String,
    /// CCTP V2: the fee of a Standard Transfer (finality 2000), in basis points.
    #[arg(long, env = "QTG_ATTESTATION_SIM_STANDARD_FEE_BPS", default_value = "0")]
    standard_fee_bps: String,
    /// CCTP V2: a destination chain, `<domain>=<rpc url>` (repeatable), where Fast attestations
    /// expire `--fast-expiry-blocks` after they are signed.
    #[arg(long = "destination")]
    destinations: Vec<String>,
    /// CCTP V2: blocks of the destination chain a Fast attestation stays valid
    /// (`expirationBlock` = its head then + this; 0: no expiry). `POST /v2/reattest/{nonce}`
    /// signs it again from the head at that time.
    #[arg(long, env = "QTG_ATTESTATION_SIM_FAST_EXPIRY_BLOCKS", default_value_t = 0)]
    fast_expiry_blocks: u64,
    /// CCTP V2: the Fast Transfer allowance in USDC (default: unlimited), as
    /// `GET /v2/fastBurn/USDC/allowance` answers it. Each Fast transfer debits its amount when
    /// first seen; one the allowance does not cover is attested Standard with `delayReason:
    /// insufficient_allowance_available`.
    #[arg(long, env = "QTG_ATTESTATION_SIM_FAST_ALLOWANCE")]
    fast_allowance: Option<String>,
}

/// An injected answer for the next `count` requests: `not_found`, `pending`, `rate_limit`,
/// `error`; or `expired`: the next `count` Fast attestations are signed already expired (their
/// `expirationBlock` the destination's head), until re-attested; or `replay`: the next `count`
/// complete V2 lookups are answered with the previous complete V2 message (another burn's).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct Fault {
    kind: String,
    #[serde(default = "one")]
    count: u32,
    #[serde(default)]
    retry_after_seconds: Option<u64>,
}

fn one() -> u32 {
    1
}

struct Service {
    sources: BTreeMap<u32, String>,
    /// The attesters who sign, in increasing order of address (the order the transmitter
    /// requires).
    attesters: Vec<PrivateKeySigner>,
    confirmations: u64,
    rate_limit: u32,
    http: reqwest::Client,
    faults: Mutex<Vec<Fault>>,
    window: Mutex<(Instant, u32)>,
    requests: Mutex<u64>,
    /// Every messages request: seconds since start and the status answered.
    log: Mutex<Vec<(f64, u16)>>,
    /// V2 fees (basis points) of Fast (1000) and Standard (2000) transfers.
    fast_fee: (String, Bps),
    standard_fee: (String, Bps),
    destinations: BTreeMap<u32, String>,
    fast_expiry_blocks: u64,
    /// The `expirationBlock` of every Fast message signed so far, by nonce (stable between
    /// lookups until re-attested), and where each nonce's burn is (for `?nonce=` lookups).
    expiries: Mutex<BTreeMap<B256, u64>>,
    nonces: Mutex<BTreeMap<B256, (u32, String)>>,
    /// How many Fast answers are still to be signed already expired (fault `expired`).
    expire_next: Mutex<u32>,
    /// The last complete V2 answer, and how many V2 lookups are still to be answered with it
    /// instead of their own (fault `replay`: a hostile or broken service).
    last_v2: Mutex<Option<Value>>,
    replay_next: Mutex<u32>,
    reattests: Mutex<u64>,
    /// The Fast allowance left (USDC base units; `None`: unlimited), and each V2 nonce's
    /// decision — Fast or not — taken when first seen, so every answer about it agrees.
    fast_allowance: Mutex<Option<alloy::primitives::U256>>,
    fast_decisions: Mutex<BTreeMap<B256, bool>>,
    started: Instant,
}

type Shared = Arc<Service>;

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"code": status.as_u16(), "message": message}))).into_response()
}

fn too_many(retry_after: u64) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert("Retry-After", HeaderValue::from(retry_after));
    (StatusCode::TOO_MANY_REQUESTS, headers, Json(json!({"code": 429, "message": "Too Many Requests"}))).into_response()
}

impl Service {
    async fn rpc(&self, url: &str, method: &str, params: Value) -> anyhow::Result<Value> {
        let v: Value = self
            .http
            .post(url)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await?
            .json()
            .await?;
        if let Some(e) = v.get("error") {
            anyhow::bail!("{method}: {e}");
        }
        Ok(v["result"].clone())
    }

    fn take_fault(&self) -> Option<Fault> {
        let mut faults = self.faults.lock().ok()?;
        let f = faults.first_mut()?;
        let out = f.clone();
        f.count = f.count.saturating_sub(1);
        if f.count == 0 {
            faults.remove(0);
        }
        Some(out)
    }

    fn over_limit(&self) -> bool {
        if self.rate_limit == 0 {
            return false;
        }
        let Ok(mut w) = self.window.lock() else { return false };
        if w.0.elapsed() >= Duration::from_secs(1) {
            *w = (Instant::now(), 0);
        }
        w.1 += 1;
        w.1 > self.rate_limit
    }
}

fn quantity(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.trim_start_matches("0x"), 16).ok()
}

#[derive(Deserialize)]
struct MessagesQuery {
    #[serde(rename = "transactionHash")]
    transaction_hash: Option<String>,
    /// A V2 nonce this service attested (Circle's `?nonce=` lookup).
    nonce: Option<String>,
}

async fn messages(State(s): State<Shared>, Path(domain): Path<u32>, Query(q): Query<MessagesQuery>) -> Response {
    let at = s.started.elapsed().as_secs_f64();
    let answer = answer(&s, domain, q).await;
    if let Ok(mut log) = s.log.lock() {
        log.push((at, answer.status().as_u16()));
    }
    answer
}

async fn answer(s: &Shared, domain: u32, q: MessagesQuery) -> Response {
    if let Ok(mut n) = s.requests.lock() {
        *n += 1;
    }
    match s.take_fault() {
        Some(f) if f.kind == "rate_limit" => return too_many(f.retry_after_seconds.unwrap_or(1)),
        Some(f) if f.kind == "not_found" => return error(StatusCode::NOT_FOUND, "Message hash not found"),
        Some(f) if f.kind == "error" => return error(StatusCode::INTERNAL_SERVER_ERROR, "Internal error"),
        Some(f) if f.kind == "pending" => {
            return Json(json!({"messages": [{"message": "0x", "eventNonce": "", "attestation": "PENDING",
                                              "status": "pending_confirmations"}]}))
            .into_response()
        }
        _ => {}
    }
    if s.over_limit() {
        return too_many(1);
    }
    let by_nonce = q.nonce.as_deref().and_then(|n| n.parse::<B256>().ok()).and_then(|n| {
        let (d, tx) = s.nonces.lock().ok()?.get(&n).cloned()?;
        (d == domain).then_some(tx)
    });
    if q.nonce.is_some() && by_nonce.is_none() {
        return error(StatusCode::NOT_FOUND, "Message not found for nonce");
    }
    let Some(hash) = by_nonce.or(q.transaction_hash).filter(|h| h.starts_with("0x") && h.len() == 66) else {
        return error(StatusCode::BAD_REQUEST, "transactionHash or nonce is required");
    };
    let Some(url) = s.sources.get(&domain) else {
        return error(StatusCode::NOT_FOUND, "unknown source domain");
    };
    let receipt = match s.rpc(url, "eth_getTransactionReceipt", json!([hash])).await {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_GATEWAY, &format!("source chain: {e}")),
    };
    let Some(block) = receipt.get("blockNumber").and_then(quantity) else {
        return error(StatusCode::NOT_FOUND, "Message hash not found");
    };
    let topic = keccak256("MessageSent(bytes)").to_string();
    let messages: Vec<Bytes> = receipt["logs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["topics"][0].as_str() == Some(topic.as_str()))
        .filter_map(|l| {
            l["data"].as_str().and_then(|d| alloy::primitives::hex::decode(d.trim_start_matches("0x")).ok())
        })
        .filter_map(|d| Bytes::abi_decode(&d).ok())
        .collect();
    if messages.is_empty() {
        return error(StatusCode::NOT_FOUND, "Message hash not found");
    }
    let head = match s.rpc(url, "eth_blockNumber", json!([])).await.map(|v| quantity(&v)) {
        Ok(Some(h)) => h,
        _ => return error(StatusCode::BAD_GATEWAY, "source chain: no head"),
    };
    let complete = head.saturating_sub(block) + 1 >= s.confirmations;
    let mut items: Vec<Value> = Vec::new();
    for (index, m) in messages.iter().enumerate() {
        if let Some(emitted) = MessageV2::parse(m).filter(|v| v.version == 1) {
            let item = attest_v2(s, &emitted, &hash, index, complete).await;
            let replayed = complete.then(|| s.replayed()).flatten();
            if complete && replayed.is_none() {
                if let Ok(mut last) = s.last_v2.lock() {
                    *last = Some(item.clone());
                }
            }
            items.push(replayed.unwrap_or(item));
            continue;
        }
        let nonce = m.get(12..20).map(|b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]))).unwrap_or(0);
        let decoded = json!({
            "sourceDomain":
                m.get(4..8).map(|b| u32::from_be_bytes(b.try_into().unwrap_or([0; 4]))).unwrap_or(0).to_string(),
            "destinationDomain":
                m.get(8..12).map(|b| u32::from_be_bytes(b.try_into().unwrap_or([0; 4]))).unwrap_or(0).to_string(),
            "nonce": nonce.to_string(),
        });
        items.push(if complete {
            let attestation = attest(&s.attesters, &keccak256(m));
            json!({"message": m.to_string(), "eventNonce": nonce.to_string(), "attestation": attestation,
                   "cctpVersion": 1, "status": "complete", "decodedMessage": decoded})
        } else {
            json!({"message": "0x", "eventNonce": nonce.to_string(), "attestation": "PENDING",
                   "cctpVersion": 1, "status": "pending_confirmations", "decodedMessage": decoded})
        });
    }
    Json(json!({"messages": items})).into_response()
}

/// A CCTP V2 message as Circle's attester answers it: the fields the source left zero filled
/// in — the `bytes32` nonce (unique per source domain, transaction and message), the finality
/// executed (Fast when the burn asked for it and its `maxFee` covers the Fast fee, else
/// Standard with `delayReason: insufficient_fee`), the fee executed (that finality's fee,
/// rounded up), and for Fast the `expirationBlock` (with `--fast-expiry-blocks` and the
/// destination's chain known; else 0) — then signed.
async fn attest_v2(s: &Service, emitted: &MessageV2, tx: &str, index: usize, complete: bool) -> Value {
    let Some(burn) = emitted.burn() else {
        return json!({"message": "0x", "attestation": "PENDING", "cctpVersion": 2, "status": "pending"});
    };
    let mut seed = emitted.source_domain.to_be_bytes().to_vec();
    seed.extend_from_slice(tx.as_bytes());
    seed.extend_from_slice(&(index as u64).to_be_bytes());
    let nonce = keccak256(seed);
    if let Ok(mut n) = s.nonces.lock() {
        n.insert(nonce, (emitted.source_domain, tx.to_string()));
    }
    let fast_fee = s.fast_fee.1.of(burn.amount);
    let fee_covers = burn.max_fee >= fast_fee;
    let fast = emitted.min_finality_threshold <= 1000 && fee_covers && s.fast_allowed(nonce, burn.amount);
    let (finality, fee) =
        if fast { (1000u32, fast_fee) } else { (2000u32, s.standard_fee.1.of(burn.amount).min(burn.max_fee)) };
    let delay = (emitted.min_finality_threshold <= 1000 && !fast).then_some(if fee_covers {
        "insufficient_allowance_available"
    } else {
        "insufficient_fee"
    });
    let expiry = if fast && complete { s.expiry(nonce, emitted.destination_domain, false).await } else { 0 };
    let mut m = emitted.clone();
    m.nonce = nonce;
    m.finality_threshold_executed = finality;
    let mut body = m.body.to_vec();
    body[164..196].copy_from_slice(&fee.to_be_bytes::<32>());
    body[196..228].copy_from_slice(&alloy::primitives::U256::from(expiry).to_be_bytes::<32>());
    m.body = body.into();
    let bytes = m.encode();
    let decoded = json!({
        "sourceDomain": m.source_domain.to_string(), "destinationDomain": m.destination_domain.to_string(),
        "nonce": nonce.to_string(), "minFinalityThreshold": m.min_finality_threshold.to_string(),
        "finalityThresholdExecuted": finality.to_string(),
        "decodedMessageBody": {"amount": burn.amount.to_string(), "maxFee": burn.max_fee.to_string(),
                               "feeExecuted": fee.to_string(), "expirationBlock": expiry.to_string()},
    });
    if complete {
        json!({"message": bytes.to_string(), "eventNonce": nonce.to_string(),
               "attestation": attest(&s.attesters, &keccak256(&bytes)), "cctpVersion": 2, "status": "complete",
               "decodedMessage": decoded, "delayReason": delay})
    } else {
        json!({"message": "0x", "eventNonce": nonce.to_string(), "attestation": "PENDING", "cctpVersion": 2,
               "status": "pending_confirmations", "decodedMessage": decoded, "delayReason": delay})
    }
}

impl Service {
    /// Whether the Fast transfer with `nonce` is attested Fast as far as the allowance goes: the
    /// decision of its first sight (debiting `amount` then), the same on every later lookup.
    fn fast_allowed(&self, nonce: B256, amount: alloy::primitives::U256) -> bool {
        let Ok(mut decisions) = self.fast_decisions.lock() else { return false };
        if let Some(d) = decisions.get(&nonce) {
            return *d;
        }
        let Ok(mut left) = self.fast_allowance.lock() else { return false };
        let allowed = match left.as_mut() {
            None => true,
            Some(l) if *l >= amount => {
                *l -= amount;
                true
            }
            Some(_) => false,
        };
        decisions.insert(nonce, allowed);
        allowed
    }

    /// The previous complete V2 answer, while a `replay` fault lasts.
    fn replayed(&self) -> Option<Value> {
        let mut n = self.replay_next.lock().ok()?;
        if *n == 0 {
            return None;
        }
        let last = self.last_v2.lock().ok()?.clone()?;
        *n -= 1;
        Some(last)
    }

    /// A Fast message's `expirationBlock`: the one it was signed with, or (first signature, or
    /// `again` for a re-attestation) the destination's head + `--fast-expiry-blocks` — the head
    /// itself (already expired) while an `expired` fault lasts. 0 without expiry.
    async fn expiry(&self, nonce: B256, destination: u32, again: bool) -> u64 {
        if self.fast_expiry_blocks == 0 {
            return 0;
        }
        if !again {
            if let Some(e) = self.expiries.lock().ok().and_then(|e| e.get(&nonce).copied()) {
                return e;
            }
        }
        let Some(url) = self.destinations.get(&destination) else { return 0 };
        let Ok(Some(head)) = self.rpc(url, "eth_blockNumber", json!([])).await.map(|v| quantity(&v)) else {
            return 0;
        };
        let expired = self.expire_next.lock().map(|mut n| {
            let hit = *n > 0;
            *n = n.saturating_sub(1);
            hit
        });
        let expiry = if expired.unwrap_or(false) { head } else { head + self.fast_expiry_blocks };
        if let Ok(mut e) = self.expiries.lock() {
            e.insert(nonce, expiry);
        }
        expiry
    }
}

/// `GET /v2/fastBurn/USDC/allowance`: Circle's shape, `{"allowance": <USDC, a JSON number with
/// up to 6 decimals>, "lastUpdated": <RFC 3339>}`; unlimited answers the largest allowance.
async fn fast_allowance(State(s): State<Shared>) -> Response {
    let left = s.fast_allowance.lock().ok().and_then(|l| *l);
    let units = left.unwrap_or(alloy::primitives::U256::from(u64::MAX));
    let (whole, frac) =
        (units / alloy::primitives::U256::from(1_000_000u64), units % alloy::primitives::U256::from(1_000_000u64));
    let text = format!("{whole}.{:06}", frac.to::<u64>());
    let number = text.trim_end_matches('0').trim_end_matches('.').parse::<serde_json::Number>().ok();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Json(json!({"allowance": number, "lastUpdated": now})).into_response()
}

/// USDC base units (6 decimals) of a decimal amount from the command line.
fn usdc_units(text: &str) -> anyhow::Result<alloy::primitives::U256> {
    let (whole, frac) = text.trim().split_once('.').unwrap_or((text.trim(), ""));
    anyhow::ensure!(
        !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && frac.len() <= 6
            && frac.bytes().all(|b| b.is_ascii_digit()),
        "{text:?} is not an amount of USDC (at most 6 decimals)"
    );
    Ok(alloy::primitives::U256::from_str_radix(&format!("{whole}{frac:0<6}"), 10)?)
}

/// `POST /v2/reattest/{nonce}`: sign a Fast message again with a new `expirationBlock` (its
/// next lookup answers it). An unknown nonce is 404.
async fn reattest(State(s): State<Shared>, Path(nonce): Path<String>) -> Response {
    let Some(nonce) = nonce.parse::<B256>().ok() else { return error(StatusCode::BAD_REQUEST, "invalid nonce") };
    let known = s.nonces.lock().ok().and_then(|n| n.get(&nonce).cloned());
    let Some((domain, tx)) = known else { return error(StatusCode::NOT_FOUND, "Message not found for nonce") };
    let Some(url) = s.sources.get(&domain) else { return error(StatusCode::NOT_FOUND, "unknown source domain") };
    // The destination is in the burn's message; read it from the source chain again.
    let destination = match s.rpc(url, "eth_getTransactionReceipt", json!([tx])).await {
        Ok(r) => r["logs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| alloy::primitives::hex::decode(l["data"].as_str()?.trim_start_matches("0x")).ok())
            .filter_map(|d| Bytes::abi_decode(&d).ok())
            .find_map(|m| MessageV2::parse(&m).map(|m| m.destination_domain)),
        Err(e) => return error(StatusCode::BAD_GATEWAY, &format!("source chain: {e}")),
    };
    let Some(destination) = destination else { return error(StatusCode::NOT_FOUND, "Message not found for nonce") };
    let expiry = s.expiry(nonce, destination, true).await;
    if let Ok(mut n) = s.reattests.lock() {
        *n += 1;
    }
    tracing::info!(%nonce, expiration_block = expiry, "re-attested");
    Json(json!({"message": "Re-attestation successfully requested for nonce.", "nonce": nonce.to_string()}))
        .into_response()
}

/// `GET /v2/burn/USDC/fees/{sourceDomain}/{destDomain}`: Circle's bare-array shape, the
/// `minimumFee` of each finality threshold in basis points.
async fn fees(State(s): State<Shared>, Path((src, dst)): Path<(u32, u32)>) -> Response {
    if !s.sources.contains_key(&src) || src == dst {
        return error(StatusCode::BAD_REQUEST, "unsupported route");
    }
    let number = |text: &str| text.parse::<serde_json::Number>().map(Value::Number).unwrap_or(Value::Null);
    Json(json!([
        {"finalityThreshold": 1000, "minimumFee": number(&s.fast_fee.0)},
        {"finalityThreshold": 2000, "minimumFee": number(&s.standard_fee.0)},
    ]))
    .into_response()
}

/// The keys of `list` (comma-separated hex), the `threshold` with the lowest addresses (all when
/// `None`), in increasing order of address.
fn attesters(list: &str, threshold: Option<usize>) -> anyhow::Result<Vec<PrivateKeySigner>> {
    let mut keys = list
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| {
            k.parse::<PrivateKeySigner>().map_err(|_| anyhow::anyhow!("an attester key is not a hex secp256k1 key"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    keys.sort_by_key(|k| k.address());
    keys.dedup_by_key(|k| k.address());
    let n = threshold.unwrap_or(keys.len());
    anyhow::ensure!(
        n >= 1 && n <= keys.len(),
        "the threshold {n} is not between 1 and the {} attester keys",
        keys.len()
    );
    keys.truncate(n);
    Ok(keys)
}

/// Basis points from the command line (as the fee API writes them: `1`, `1.3`).
fn bps(text: &str) -> anyhow::Result<Bps> {
    let n: serde_json::Number = text.trim().parse().map_err(|_| anyhow::anyhow!("{text:?} is not a number"))?;
    Bps::from_json(&n).map_err(anyhow::Error::msg)
}

/// The m-of-n attestation of `digest`: each attester's 65-byte signature (r ‖ s ‖ v, v 27/28,
/// low s), concatenated in the order given (increasing signer address).
fn attest(attesters: &[PrivateKeySigner], digest: &alloy::primitives::B256) -> String {
    let mut out = Vec::with_capacity(65 * attesters.len());
    for a in attesters {
        match a.sign_hash_sync(digest) {
            Ok(sig) => out.extend_from_slice(&sig.as_bytes()),
            Err(_) => return String::new(),
        }
    }
    format!("0x{}", alloy::primitives::hex::encode(out))
}

async fn add_faults(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let list = match body {
        Value::Array(a) => a,
        other => vec![other],
    };
    let mut parsed = Vec::new();
    for f in list {
        match serde_json::from_value::<Fault>(f) {
            Ok(f) if f.kind == "replay" => {
                if let Ok(mut n) = s.replay_next.lock() {
                    *n += f.count;
                }
            }
            Ok(f) if f.kind == "expired" => {
                if let Ok(mut n) = s.expire_next.lock() {
                    *n += f.count;
                }
            }
            Ok(f) if ["not_found", "pending", "rate_limit", "error"].contains(&f.kind.as_str()) => parsed.push(f),
            Ok(f) => return error(StatusCode::BAD_REQUEST, &format!("unknown fault kind {:?}", f.kind)),
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        }
    }
    let Ok(mut faults) = s.faults.lock() else { return error(StatusCode::INTERNAL_SERVER_ERROR, "lock") };
    faults.extend(parsed);
    Json(json!({"faults": *faults})).into_response()
}

async fn stats(State(s): State<Shared>) -> Response {
    let requests = s.requests.lock().map(|n| *n).unwrap_or(0);
    let log: Vec<Value> = s
        .log
        .lock()
        .map(|l| l.iter().map(|(at, status)| json!({"at_seconds": at, "status": status})).collect())
        .unwrap_or_default();
    // `attester`: the first (lowest) one, what a one-attester deployment enables.
    let attesters: Vec<String> = s.attesters.iter().map(|a| a.address().to_string()).collect();
    let reattests = s.reattests.lock().map(|n| *n).unwrap_or(0);
    Json(json!({"requests": requests, "log": log, "attester": attesters.first(), "attesters": attesters,
                "reattests": reattests}))
    .into_response()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut sources = BTreeMap::new();
    for s in &args.sources {
        let (domain, url) =
            s.split_once('=').ok_or_else(|| anyhow::anyhow!("--source {s:?}: expected <domain>=<rpc url>"))?;
        sources.insert(domain.trim().parse::<u32>()?, url.trim().to_string());
    }
    let attesters = attesters(&args.attester_key, args.threshold)?;
    let mut destinations = BTreeMap::new();
    for s in &args.destinations {
        let (domain, url) =
            s.split_once('=').ok_or_else(|| anyhow::anyhow!("--destination {s:?}: expected <domain>=<rpc url>"))?;
        destinations.insert(domain.trim().parse::<u32>()?, url.trim().to_string());
    }
    let service = Arc::new(Service {
        sources,
        attesters,
        confirmations: args.confirmations.max(1),
        rate_limit: args.rate_limit,
        http: reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build()?,
        faults: Mutex::new(Vec::new()),
        window: Mutex::new((Instant::now(), 0)),
        requests: Mutex::new(0),
        log: Mutex::new(Vec::new()),
        started: Instant::now(),
        fast_fee: (args.fast_fee_bps.clone(), bps(&args.fast_fee_bps)?),
        standard_fee: (args.standard_fee_bps.clone(), bps(&args.standard_fee_bps)?),
        destinations,
        fast_expiry_blocks: args.fast_expiry_blocks,
        expiries: Mutex::new(BTreeMap::new()),
        nonces: Mutex::new(BTreeMap::new()),
        expire_next: Mutex::new(0),
        last_v2: Mutex::new(None),
        replay_next: Mutex::new(0),
        reattests: Mutex::new(0),
        fast_allowance: Mutex::new(args.fast_allowance.as_deref().map(usdc_units).transpose()?),
        fast_decisions: Mutex::new(BTreeMap::new()),
    });
    let app = Router::new()
        .route("/v2/messages/{domain}", get(messages))
        .route("/v2/burn/USDC/fees/{src}/{dst}", get(fees))
        .route("/v2/reattest/{nonce}", post(reattest))
        .route("/v2/fastBurn/USDC/allowance", get(fast_allowance))
        .route("/admin/faults", post(add_faults))
        .route("/admin/stats", get(stats))
        .with_state(service.clone());
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    let addr = listener.local_addr()?;
    let attesters: Vec<_> = service.attesters.iter().map(|a| a.address()).collect();
    tracing::info!(attestation_addr = %addr, attesters = ?attesters, "qtg-attestation-sim listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
