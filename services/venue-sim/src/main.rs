//! `qtg-venue-sim`: a simulated exchange speaking the Binance-compatible withdrawal API the
//! CEX lane uses — same signing (HMAC-SHA256 over query + body, `X-MBX-APIKEY`, `timestamp`
//! and `recvWindow` checked against its own clock), a persistent ledger, withdrawals that
//! progress over time, deposits on the destination account — with fault injection through
//! `/admin/faults`, and a log of every withdraw request it receives (`/admin/requests`), so a
//! test can tell a deduplicated blind re-submit from none. For demos and tests, not for money.

mod kraken;
mod ledger;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use clap::Parser;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::Mutex;

use ledger::{units, Books, RequestRow, Setup, WithdrawalRow};

#[derive(Parser, Debug)]
#[command(
    name = "qtg-venue-sim",
    about = "A simulated exchange (Binance-compatible withdrawal API) for qtg's CEX lane"
)]
struct Args {
    /// Address to listen on (port 0: any free port; the address is logged as `venue_addr`).
    #[arg(long, env = "QTG_VENUE_SIM_ADDR", default_value = "127.0.0.1:9400")]
    addr: SocketAddr,
    /// Accounts, coins and timing (TOML).
    #[arg(long, env = "QTG_VENUE_SIM_ACCOUNTS")]
    accounts: PathBuf,
    /// The ledger file (JSON), created from the accounts' opening balances if absent.
    #[arg(long, env = "QTG_VENUE_SIM_STATE")]
    state: PathBuf,
}

/// A fault to inject, from `POST /admin/faults`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fault {
    /// `latency`, `error_before_commit`, `drop_after_commit`, `unauthorized`, `ambiguous`,
    /// `unknown_status`, `bad_number`, `lookalike`.
    kind: String,
    /// `withdraw`, `history`, `deposits`, `time`, `config`, `whitelist`, `account`, `any`.
    #[serde(default = "withdraw")]
    endpoint: String,
    /// Only for this account (by name).
    #[serde(default)]
    account: Option<String>,
    /// How many times it fires (0 = until cleared).
    #[serde(default = "one")]
    count: u32,
    /// Latency, or how long a dropped answer is held before the connection is closed.
    #[serde(default)]
    ms: Option<u64>,
    /// The HTTP status of `error_before_commit` (default 503).
    #[serde(default)]
    status: Option<u16>,
    /// The status code `unknown_status` pins (default 99).
    #[serde(default)]
    code: Option<i64>,
    /// What `bad_number` answers in place of every amount, balance, fee and bound of the
    /// read (`"Infinity"`, `"NaN"`, `"-5"`): a venue whose numbers are not numbers.
    #[serde(default)]
    value: Option<String>,
}

fn withdraw() -> String {
    "withdraw".into()
}
fn one() -> u32 {
    1
}

const FAULT_KINDS: [&str; 8] = [
    "latency",
    "error_before_commit",
    "drop_after_commit",
    "unauthorized",
    "ambiguous",
    "unknown_status",
    "bad_number",
    "lookalike",
];
const ENDPOINTS: [&str; 8] = ["withdraw", "history", "deposits", "time", "config", "whitelist", "account", "any"];

struct Venue {
    setup: Setup,
    state_path: PathBuf,
    books: Mutex<Books>,
    faults: Mutex<Vec<Fault>>,
    /// Shifts the venue's clock (admin), in ms.
    clock_offset_ms: std::sync::atomic::AtomicI64,
}

type Shared = Arc<Venue>;

impl Venue {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(self.clock_offset_ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The faults of `kind`s that fire now on `endpoint` for `account`, consumed.
    async fn take_faults(&self, endpoint: &str, account: Option<&str>) -> Vec<Fault> {
        let mut faults = self.faults.lock().await;
        let mut fired = Vec::new();
        for f in faults.iter_mut() {
            let here = f.endpoint == "any" || f.endpoint == endpoint;
            let whose = f.account.as_deref().is_none_or(|a| Some(a) == account);
            if here && whose {
                fired.push(f.clone());
                if f.count > 0 {
                    f.count -= 1;
                    if f.count == 0 {
                        f.kind.clear();
                    }
                }
            }
        }
        faults.retain(|f| !f.kind.is_empty());
        fired
    }

    async fn save(&self, books: &Books) {
        if let Err(e) = books.save(&self.state_path) {
            tracing::error!(error = %e, "cannot write the ledger file");
        }
    }
}

/// A venue error answer: `{"code": …, "msg": …}`.
fn refuse(status: u16, code: i64, msg: &str) -> Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), Json(json!({"code": code, "msg": msg})))
        .into_response()
}

/// A refusal before anything was done: HTTP status, the venue's code, its message.
struct Refusal(u16, i64, &'static str);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        refuse(self.0, self.1, self.2)
    }
}

/// A checked, signed private call.
struct Signed {
    account: String,
    params: HashMap<String, String>,
}

/// Checks the API key, the signature over query + body, and `timestamp` / `recvWindow`
/// against the venue's clock.
fn verify(v: &Venue, headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Result<Signed, Refusal> {
    let key = headers.get("X-MBX-APIKEY").and_then(|h| h.to_str().ok()).unwrap_or("");
    let Some(account) = v.setup.account_by_key(key).filter(|a| a.api == ledger::Api::Binance) else {
        return Err(Refusal(401, -2015, "Invalid API-key, IP, or permissions for action."));
    };
    let query = query.unwrap_or("");
    let body =
        std::str::from_utf8(body).map_err(|_| Refusal(400, -1100, "Illegal characters found in a parameter."))?;
    let strip = |s: &str| -> (String, Option<String>) {
        let mut kept = Vec::new();
        let mut sig = None;
        for part in s.split('&').filter(|p| !p.is_empty()) {
            match part.strip_prefix("signature=") {
                Some(x) => sig = Some(x.to_string()),
                None => kept.push(part),
            }
        }
        (kept.join("&"), sig)
    };
    let (q, sq) = strip(query);
    let (b, sb) = strip(body);
    let Some(signature) = sq.or(sb) else {
        return Err(Refusal(400, -1102, "Mandatory parameter 'signature' was not sent, was empty/null, or malformed."));
    };
    let total = format!("{q}{b}");
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(account.secret.as_bytes()).expect("any key length");
    mac.update(total.as_bytes());
    let expected = hex::encode(mac.finalize().into_bytes());
    if !expected.eq_ignore_ascii_case(&signature) {
        return Err(Refusal(400, -1022, "Signature for this request is not valid."));
    }
    let params: HashMap<String, String> = form_urlencoded::parse(q.as_bytes())
        .into_owned()
        .chain(form_urlencoded::parse(b.as_bytes()).into_owned())
        .collect();
    let Some(ts) = params.get("timestamp").and_then(|t| t.parse::<i64>().ok()) else {
        return Err(Refusal(400, -1102, "Mandatory parameter 'timestamp' was not sent, was empty/null, or malformed."));
    };
    let window = match params.get("recvWindow") {
        None => 5000,
        Some(w) => match w.parse::<i64>() {
            Ok(w) if (1..=60_000).contains(&w) => w,
            _ => return Err(Refusal(400, -1131, "recvWindow must be less than 60000")),
        },
    };
    let now = v.now().timestamp_millis();
    if ts > now + 1000 || now - ts > window {
        return Err(Refusal(400, -1021, "Timestamp for this request is outside of the recvWindow."));
    }
    Ok(Signed { account: account.name.clone(), params })
}

/// Faults before the handler: latency, 401, 5xx before anything is done.
async fn before(v: &Venue, endpoint: &str, account: Option<&str>) -> (Option<Response>, Vec<Fault>) {
    let fired = v.take_faults(endpoint, account).await;
    for f in &fired {
        if f.kind == "latency" {
            tokio::time::sleep(Duration::from_millis(f.ms.unwrap_or(1000))).await;
        }
    }
    for f in &fired {
        match f.kind.as_str() {
            "unauthorized" => {
                return (Some(refuse(401, -2015, "Invalid API-key, IP, or permissions for action.")), fired)
            }
            "error_before_commit" => {
                let status = f.status.unwrap_or(503);
                return (
                    Some(refuse(status, -1001, "Internal error; unable to process your request. Please try again.")),
                    fired,
                );
            }
            _ => {}
        }
    }
    (None, fired)
}

/// A private read: verified, then faults, then `answer`.
async fn read(
    v: &Shared,
    endpoint: &str,
    headers: &HeaderMap,
    query: Option<String>,
    answer: impl FnOnce(&Signed, &Books) -> Value,
) -> Response {
    let signed = match verify(v, headers, query.as_deref(), &[]) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let (refused, fired) = before(v, endpoint, Some(&signed.account)).await;
    if let Some(r) = refused {
        return r;
    }
    let books = v.books.lock().await;
    let mut body = answer(&signed, &books);
    if let Some(bad) = fired.iter().find(|f| f.kind == "bad_number") {
        replace_numbers(&mut body, bad.value.as_deref().unwrap_or("Infinity"));
    }
    Json(body).into_response()
}

/// The `bad_number` fault: every amount, balance, fee and bound in a read's answer becomes
/// `bad`.
fn replace_numbers(v: &mut Value, bad: &str) {
    const NUMBERS: [&str; 7] =
        ["free", "locked", "amount", "transactionFee", "withdrawFee", "withdrawMin", "withdrawMax"];
    replace_fields(v, bad, &NUMBERS, false);
}

/// Every string field named in `numbers` (and, with `values`, every string value of an
/// object's map, as Kraken's `Balance` answers) becomes `bad`.
fn replace_fields(v: &mut Value, bad: &str, numbers: &[&str], values: bool) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if (values || numbers.contains(&k.as_str())) && x.is_string() {
                    *x = Value::String(bad.to_string());
                } else {
                    replace_fields(x, bad, numbers, values);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| replace_fields(x, bad, numbers, values)),
        _ => {}
    }
}

async fn time(State(v): State<Shared>) -> Response {
    if let (Some(r), _) = before(&v, "time", None).await {
        return r;
    }
    Json(json!({"serverTime": v.now().timestamp_millis()})).into_response()
}

fn history_row(w: &WithdrawalRow) -> Value {
    let mut o = json!({
        "id": w.id, "amount": w.amount, "transactionFee": w.fee, "coin": w.coin, "status": w.status,
        "address": w.address, "applyTime": w.applied_at.format("%Y-%m-%d %H:%M:%S").to_string(),
        "network": w.network, "transferType": 0, "walletType": 0, "info": "",
    });
    if let Some(m) = o.as_object_mut() {
        if let Some(c) = &w.client_id {
            m.insert("withdrawOrderId".into(), json!(c));
        }
        if let Some(t) = &w.address_tag {
            m.insert("addressTag".into(), json!(t));
        }
        if let Some(tx) = &w.tx_id {
            m.insert("txId".into(), json!(tx));
        }
        if let Some(c) = w.completed_at {
            m.insert("completeTime".into(), json!(c.format("%Y-%m-%d %H:%M:%S").to_string()));
        }
    }
    o
}

fn ms_param(p: &HashMap<String, String>, k: &str) -> Option<DateTime<Utc>> {
    p.get(k).and_then(|v| v.parse::<i64>().ok()).and_then(DateTime::from_timestamp_millis)
}

async fn withdraw_history(State(v): State<Shared>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    let now = v.now();
    let lag = v.setup.timing.history_lag_ms;
    read(&v, "history", &headers, q, |s, books| {
        let p = &s.params;
        let ids: Option<Vec<&str>> = p.get("idList").map(|l| l.split(',').collect());
        let from = ms_param(p, "startTime");
        let to = ms_param(p, "endTime");
        let rows: Vec<Value> = books
            .withdrawals
            .iter()
            .filter(|w| w.account == s.account)
            .filter(|w| (now - w.applied_at).num_milliseconds() >= lag)
            .filter(|w| p.get("coin").is_none_or(|c| c == &w.coin))
            .filter(|w| p.get("withdrawOrderId").is_none_or(|c| w.client_id.as_ref() == Some(c)))
            .filter(|w| ids.as_ref().is_none_or(|ids| ids.contains(&w.id.as_str())))
            .filter(|w| from.is_none_or(|f| w.applied_at >= f) && to.is_none_or(|t| w.applied_at <= t))
            .map(history_row)
            .collect();
        Value::Array(rows)
    })
    .await
}

async fn deposit_history(State(v): State<Shared>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    read(&v, "deposits", &headers, q, |s, books| {
        let p = &s.params;
        let from = ms_param(p, "startTime");
        let to = ms_param(p, "endTime");
        let rows: Vec<Value> = books
            .deposits
            .iter()
            .filter(|d| d.account == s.account)
            .filter(|d| p.get("coin").is_none_or(|c| c == &d.coin))
            .filter(|d| from.is_none_or(|f| d.inserted_at >= f) && to.is_none_or(|t| d.inserted_at <= t))
            .map(|d| {
                json!({"id": d.id, "amount": d.amount, "coin": d.coin, "network": d.network, "status": d.status,
                       "address": d.address, "addressTag": d.address_tag.clone().unwrap_or_default(), "txId": d.tx_id,
                       "insertTime": d.inserted_at.timestamp_millis(), "transferType": 0, "confirmTimes": "12/12",
                       "unlockConfirm": 0, "walletType": 0})
            })
            .collect();
        Value::Array(rows)
    })
    .await
}

async fn config_getall(State(v): State<Shared>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    let coins = v.setup.coins.clone();
    read(&v, "config", &headers, q, move |s, books| {
        Value::Array(
            coins
                .iter()
                .map(|c| {
                    json!({"coin": c.coin, "name": c.coin, "free": ledger::text(books.balance(&s.account, &c.coin)),
                           "locked": "0", "depositAllEnable": true, "withdrawAllEnable": true,
                           "networkList": c.networks.iter().map(|n| json!({
                               "network": n.network, "coin": c.coin, "withdrawEnable": n.withdraw_enable,
                               "depositEnable": n.deposit_enable, "withdrawMin": n.withdraw_min,
                               "withdrawMax": n.withdraw_max, "withdrawFee": n.withdraw_fee,
                               "addressRegex": n.address_regex, "memoRegex": n.memo_regex})).collect::<Vec<_>>()})
                })
                .collect(),
        )
    })
    .await
}

async fn address_list(State(v): State<Shared>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    let setup = v.setup.clone();
    read(&v, "whitelist", &headers, q, move |s, _| {
        let account = setup.accounts.iter().find(|a| a.name == s.account);
        Value::Array(
            account
                .map(|a| {
                    a.whitelist
                        .iter()
                        .map(|w| {
                            json!({"address": w.address, "addressTag": w.address_tag.clone().unwrap_or_default(),
                                        "coin": w.coin, "name": "qtg", "network": w.network, "origin": "sim",
                                        "originType": "others", "whiteStatus": true})
                        })
                        .collect()
                })
                .unwrap_or_default(),
        )
    })
    .await
}

async fn account(State(v): State<Shared>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    read(&v, "account", &headers, q, |s, books| {
        let balances: Vec<Value> = books
            .balances
            .get(&s.account)
            .map(|b| {
                b.iter().map(|(c, u)| json!({"asset": c, "free": ledger::text(*u), "locked": "0.00000000"})).collect()
            })
            .unwrap_or_default();
        json!({"canWithdraw": true, "accountType": "SPOT", "balances": balances})
    })
    .await
}

/// `POST /sapi/v1/capital/withdraw/apply`: every request is logged first, whatever happens.
async fn withdraw_apply(State(v): State<Shared>, headers: HeaderMap, RawQuery(q): RawQuery, body: Bytes) -> Response {
    let raw: HashMap<String, String> = form_urlencoded::parse(q.as_deref().unwrap_or("").as_bytes())
        .into_owned()
        .chain(form_urlencoded::parse(&body).into_owned())
        .collect();
    let seq = {
        let mut books = v.books.lock().await;
        let seq = books.requests.len() as u64 + 1;
        let account = headers
            .get("X-MBX-APIKEY")
            .and_then(|h| h.to_str().ok())
            .and_then(|k| v.setup.account_by_key(k))
            .map(|a| a.name.clone());
        books.requests.push(RequestRow {
            seq,
            at: v.now(),
            account,
            client_id: raw.get("withdrawOrderId").cloned(),
            amount: raw.get("amount").cloned(),
            address: raw.get("address").cloned(),
            outcome: "received".into(),
            http_status: 0,
            code: None,
            withdrawal_id: None,
        });
        v.save(&books).await;
        seq
    };
    let (response, outcome, id, hold) = apply(&v, &headers, q.as_deref(), &body).await;
    {
        let mut books = v.books.lock().await;
        if let Some(r) = books.requests.iter_mut().find(|r| r.seq == seq) {
            r.outcome = outcome.clone();
            r.http_status = response.status().as_u16();
            r.withdrawal_id = id;
        }
        v.save(&books).await;
    }
    tracing::info!(seq, outcome = %outcome, status = response.status().as_u16(), "withdraw request");
    if let Some(ms) = hold {
        // The venue committed; the answer never arrives in time (the caller times out).
        tokio::time::sleep(Duration::from_millis(ms)).await;
        return refuse(504, -1007, "Timeout waiting for response from backend server.");
    }
    response
}

/// A refusal of a withdraw request, as the request log records it (`refused:<code>`).
fn no(status: u16, code: i64, msg: &str) -> (Response, String, Option<String>, Option<u64>) {
    (refuse(status, code, msg), format!("refused:{code}"), None, None)
}

/// The withdrawal itself: `(answer, outcome, withdrawal id, hold the answer for ms)`.
async fn apply(
    v: &Venue,
    headers: &HeaderMap,
    q: Option<&str>,
    body: &[u8],
) -> (Response, String, Option<String>, Option<u64>) {
    let signed = match verify(v, headers, q, body) {
        Ok(s) => s,
        Err(r) => return no(r.0, r.1, r.2),
    };
    let (early, fired) = before(v, "withdraw", Some(&signed.account)).await;
    if let Some(r) = early {
        let kind = fired.iter().find(|f| f.kind != "latency").map(|f| f.kind.clone()).unwrap_or_default();
        return (r, kind, None, None);
    }
    let p = &signed.params;
    let (Some(coin), Some(address), Some(amount)) = (p.get("coin"), p.get("address"), p.get("amount")) else {
        return no(400, -1102, "Mandatory parameter missing (coin, address, amount).");
    };
    let order = Order {
        coin: coin.clone(),
        network: p.get("network").cloned(),
        address: address.clone(),
        tag: p.get("addressTag").filter(|t| !t.is_empty()).cloned(),
        amount: amount.clone(),
        client_id: p.get("withdrawOrderId").filter(|c| !c.is_empty()).cloned(),
    };
    match book(v, &signed.account, &order, &fired).await {
        Booked::Id { id, outcome, hold } => (Json(json!({"id": id})).into_response(), outcome, Some(id), hold),
        Booked::Refused(status, code, msg) => no(status, code, msg),
        Booked::Lookalike => {
            let msg = "Internal error; unable to process your request. Please try again.";
            (refuse(503, -1001, msg), "lookalike".into(), None, None)
        }
    }
}

/// A withdrawal as either API shape asks for it.
pub(crate) struct Order {
    pub coin: String,
    pub network: Option<String>,
    pub address: String,
    pub tag: Option<String>,
    pub amount: String,
    pub client_id: Option<String>,
}

/// What booking an order came to.
pub(crate) enum Booked {
    /// Booked (or a client id seen before): the id, the request log's outcome, and how long
    /// the answer is held (a dropped answer).
    Id { id: String, outcome: String, hold: Option<u64> },
    /// Refused before anything was booked: HTTP status, Binance-style code, message.
    Refused(u16, i64, &'static str),
    /// The `lookalike` fault: nothing booked for the order, a same-shape withdrawal without a
    /// client id booked beside it, the order answered 503.
    Lookalike,
}

/// Checks and books `order` for `account` (the venue's rules, the fee model, the faults that
/// fire after the request was accepted).
pub(crate) async fn book(v: &Venue, account: &str, order: &Order, fired: &[Fault]) -> Booked {
    let (coin, address) = (&order.coin, &order.address);
    let tag = order.tag.clone();
    let Some(net) = v.setup.network(coin, order.network.as_deref()) else {
        return Booked::Refused(400, -4019, "The current currency is not open for withdrawal");
    };
    if !net.withdraw_enable {
        return Booked::Refused(400, -4019, "The current currency is not open for withdrawal");
    }
    let Some(amount_u) = units(&order.amount).filter(|u| *u > 0) else {
        return Booked::Refused(400, -1100, "Illegal characters found in parameter 'amount'.");
    };
    let setup_account = v.setup.accounts.iter().find(|a| a.name == account);
    let listed = setup_account.is_some_and(|a| {
        a.whitelist.is_empty()
            || a.whitelist
                .iter()
                .any(|w| w.coin == *coin && w.address.eq_ignore_ascii_case(address) && w.address_tag == tag)
    });
    if !listed {
        return Booked::Refused(400, -4014, "Withdrawal address is not in the whitelist.");
    }
    if amount_u < units(&net.withdraw_min).unwrap_or(0) || amount_u > units(&net.withdraw_max).unwrap_or(i128::MAX) {
        return Booked::Refused(400, -4022, "The withdrawal amount is out of range.");
    }
    let fee = units(&net.withdraw_fee).unwrap_or(0);
    let client_id = order.client_id.clone();
    let mut books = v.books.lock().await;
    // A client id seen before: the same withdrawal, nothing booked (the request is still in
    // the request log).
    if let Some(c) = &client_id {
        if let Some(w) =
            books.withdrawals.iter().find(|w| w.account == account && w.requested_client_id.as_ref() == Some(c))
        {
            return Booked::Id { id: w.id.clone(), outcome: "duplicate_client_id".into(), hold: None };
        }
    }
    let Some((debit, arriving)) = books.fee_model(&v.setup, account).split(amount_u, fee) else {
        return Booked::Refused(400, -4022, "The withdrawal amount is out of range.");
    };
    if books.balance(account, coin) < debit {
        return Booked::Refused(400, -4026, "Insufficient balance.");
    }
    let ambiguous = fired.iter().any(|f| f.kind == "ambiguous");
    let pinned = fired.iter().find(|f| f.kind == "unknown_status").map(|f| f.code.unwrap_or(99));
    let now = v.now();
    let row = |origin: &str, client: Option<String>| WithdrawalRow {
        id: uuid::Uuid::new_v4().simple().to_string(),
        account: account.to_string(),
        client_id: if ambiguous { None } else { client.clone() },
        requested_client_id: client,
        origin: origin.into(),
        coin: coin.clone(),
        network: net.network.clone(),
        address: address.clone(),
        address_tag: tag.clone(),
        amount: ledger::text(amount_u),
        fee: ledger::text(fee),
        arrival: Some(ledger::text(arriving)),
        status: pinned.unwrap_or(2),
        pinned_status: pinned,
        tx_id: None,
        applied_at: now,
        completed_at: None,
    };
    if fired.iter().any(|f| f.kind == "lookalike") {
        // Someone withdraws the same amount to the same address from the exchange's web UI (no
        // client id), and qtg's own request fails before it is committed (a 503).
        books.credit(account, coin, -debit);
        books.withdrawals.push(row("external", None));
        v.save(&books).await;
        return Booked::Lookalike;
    }
    let booked = row("request", client_id.clone());
    let id = booked.id.clone();
    books.credit(account, coin, -debit);
    books.withdrawals.push(booked);
    if ambiguous {
        // Another desk's withdrawal of the same amount to the same address, without a client id.
        books.credit(account, coin, -debit);
        books.withdrawals.push(row("external", None));
    }
    v.save(&books).await;
    drop(books);
    let dropped = fired.iter().find(|f| f.kind == "drop_after_commit" || f.kind == "ambiguous");
    let outcome = match dropped {
        Some(f) => f.kind.clone(),
        None if pinned.is_some() => "unknown_status".into(),
        None => "booked".into(),
    };
    let hold = dropped.map(|f| f.ms.unwrap_or(30_000));
    Booked::Id { id, outcome, hold }
}

async fn add_faults(State(v): State<Shared>, Json(body): Json<Value>) -> Response {
    let list: Vec<Value> = match body {
        Value::Array(a) => a,
        other => vec![other],
    };
    let mut parsed = Vec::new();
    for f in list {
        let f: Fault = match serde_json::from_value(f) {
            Ok(f) => f,
            Err(e) => return (StatusCode::BAD_REQUEST, Json(json!({"error": e.to_string()}))).into_response(),
        };
        if !FAULT_KINDS.contains(&f.kind.as_str()) || !ENDPOINTS.contains(&f.endpoint.as_str()) {
            let msg = format!("kind one of {FAULT_KINDS:?}, endpoint one of {ENDPOINTS:?}");
            return (StatusCode::BAD_REQUEST, Json(json!({"error": msg}))).into_response();
        }
        parsed.push(f);
    }
    tracing::info!(faults = ?parsed, "faults armed");
    let mut faults = v.faults.lock().await;
    faults.extend(parsed);
    Json(json!({"faults": *faults})).into_response()
}

async fn list_faults(State(v): State<Shared>) -> Response {
    Json(json!({"faults": *v.faults.lock().await})).into_response()
}

async fn clear_faults(State(v): State<Shared>) -> Response {
    v.faults.lock().await.clear();
    Json(json!({"faults": []})).into_response()
}

async fn requests(State(v): State<Shared>) -> Response {
    Json(json!({"requests": v.books.lock().await.requests})).into_response()
}

async fn ledger_view(State(v): State<Shared>) -> Response {
    let books = v.books.lock().await;
    let balances: serde_json::Map<String, Value> = books
        .balances
        .iter()
        .map(|(a, b)| {
            (a.clone(), json!(b.iter().map(|(c, u)| (c.clone(), ledger::text(*u))).collect::<HashMap<_, _>>()))
        })
        .collect();
    Json(json!({"withdrawals": books.withdrawals, "deposits": books.deposits, "balances": balances})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebWithdrawal {
    account: String,
    coin: String,
    #[serde(default)]
    network: Option<String>,
    address: String,
    #[serde(default)]
    address_tag: Option<String>,
    amount: String,
}

/// Someone withdraws from an account in the exchange's web UI (no API call, no client id):
/// booked by the venue's own rules, `origin` `external`.
async fn web_withdrawal(State(v): State<Shared>, Json(w): Json<WebWithdrawal>) -> Response {
    if !v.setup.accounts.iter().any(|a| a.name == w.account) {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": format!("no account {:?}", w.account)})))
            .into_response();
    }
    let order = Order {
        coin: w.coin,
        network: w.network,
        address: w.address,
        tag: w.address_tag,
        amount: w.amount,
        client_id: None,
    };
    match book(&v, &w.account, &order, &[]).await {
        Booked::Id { id, .. } => {
            let mut books = v.books.lock().await;
            if let Some(row) = books.withdrawals.iter_mut().find(|r| r.id == id) {
                row.origin = "external".into();
            }
            v.save(&books).await;
            tracing::info!(account = %w.account, id = %id, "withdrawal from the web UI");
            Json(json!({"id": id})).into_response()
        }
        Booked::Refused(_, code, msg) => {
            (StatusCode::BAD_REQUEST, Json(json!({"error": msg, "code": code}))).into_response()
        }
        Booked::Lookalike => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[derive(Deserialize)]
struct SetFeeModel {
    account: String,
    fee_model: ledger::FeeModel,
}

/// Sets how an account's withdrawals are charged from now on (`deducted` or `added`).
async fn set_fee_model(State(v): State<Shared>, Json(body): Json<SetFeeModel>) -> Response {
    if !v.setup.accounts.iter().any(|a| a.name == body.account) {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": format!("no account {:?}", body.account)})))
            .into_response();
    }
    let mut books = v.books.lock().await;
    books.fee_models.insert(body.account.clone(), body.fee_model);
    v.save(&books).await;
    tracing::info!(account = %body.account, fee_model = ?body.fee_model, "fee model set");
    Json(json!({"account": body.account, "fee_model": body.fee_model})).into_response()
}

#[derive(Deserialize)]
struct Clock {
    offset_ms: i64,
}

async fn set_clock(State(v): State<Shared>, Json(c): Json<Clock>) -> Response {
    v.clock_offset_ms.store(c.offset_ms, std::sync::atomic::Ordering::Relaxed);
    Json(json!({"offset_ms": c.offset_ms, "server_time": v.now().timestamp_millis()})).into_response()
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
    let setup = Setup::load(&args.accounts)?;
    let books = Books::open(&args.state, &setup)?;
    books.save(&args.state)?;
    let venue = Arc::new(Venue {
        setup,
        state_path: args.state.clone(),
        books: Mutex::new(books),
        faults: Mutex::new(Vec::new()),
        clock_offset_ms: std::sync::atomic::AtomicI64::new(0),
    });
    let ticker = venue.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut books = ticker.books.lock().await;
            if books.advance(&ticker.setup, ticker.now()) {
                ticker.save(&books).await;
            }
        }
    });
    let app = Router::new()
        .route("/api/v3/time", get(time))
        .route("/api/v3/account", get(account))
        .route("/sapi/v1/capital/withdraw/apply", post(withdraw_apply))
        .route("/sapi/v1/capital/withdraw/history", get(withdraw_history))
        .route("/sapi/v1/capital/deposit/hisrec", get(deposit_history))
        .route("/sapi/v1/capital/config/getall", get(config_getall))
        .route("/sapi/v1/capital/withdraw/address/list", get(address_list))
        .route("/0/public/Time", get(kraken::time))
        .route("/0/private/{method}", post(kraken::private))
        .route("/admin/faults", post(add_faults).get(list_faults))
        .route("/admin/faults", delete(clear_faults))
        .route("/admin/requests", get(requests))
        .route("/admin/ledger", get(ledger_view))
        .route("/admin/clock", post(set_clock))
        .route("/admin/fee-model", post(set_fee_model))
        .route("/admin/withdrawals", post(web_withdrawal))
        .with_state(venue);
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    let addr = listener.local_addr()?;
    tracing::info!(venue_addr = %addr, state = %args.state.display(), "qtg-venue-sim listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
