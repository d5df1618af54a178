//! Kraken's REST funding API, as its public documentation describes it, for accounts with
//! `api = "kraken"`: `GET /0/public/Time`, and `POST /0/private/<Method>` with a form body
//! carrying `nonce`, the key in `API-Key` and `API-Sign` = base64(HMAC-SHA512(base64-decoded
//! secret, URI path ‖ SHA256(nonce ‖ body))). Every answer is `{"error": [...], "result": ...}`.
//! A nonce not above the last one the account's key used is refused (`EAPI:Invalid nonce`,
//! a key with nonce window 0). There is no client id: a withdrawal names a withdrawal *key*
//! (an address saved on the account) and is known by Kraken's `refid`.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Digest;

use crate::ledger::{self, Api, RequestRow, WithdrawalRow};
use crate::{before, book, Booked, Order, Shared};

/// An answer: `{"error": [], "result": …}`.
fn ok(result: Value) -> Response {
    Json(json!({"error": [], "result": result})).into_response()
}

/// A refusal as Kraken sends it: HTTP 200 with the error string.
fn err(e: &str) -> Response {
    Json(json!({"error": [e]})).into_response()
}

pub async fn time(State(v): State<Shared>) -> Response {
    if let (Some(r), _) = before(&v, "time", None).await {
        return r;
    }
    let now = v.now();
    ok(json!({"unixtime": now.timestamp(), "rfc1123": now.format("%a, %d %b %y %H:%M:%S +0000").to_string()}))
}

/// The endpoint name a method's faults are armed under (the Binance shape's names).
fn endpoint(method: &str) -> &'static str {
    match method {
        "Withdraw" => "withdraw",
        "WithdrawStatus" => "history",
        "DepositStatus" => "deposits",
        "WithdrawMethods" | "WithdrawInfo" => "config",
        "WithdrawAddresses" => "whitelist",
        _ => "account",
    }
}

/// The account a private call is signed for, its parameters, or the refusal.
fn verify(
    v: &Shared,
    method: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(String, HashMap<String, String>, u64), &'static str> {
    let key = headers.get("API-Key").and_then(|h| h.to_str().ok()).unwrap_or("");
    let account = v.setup.account_by_key(key).filter(|a| a.api == Api::Kraken).ok_or("EAPI:Invalid key")?;
    let params: HashMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
    let nonce = params.get("nonce").and_then(|n| n.parse::<u64>().ok()).ok_or("EAPI:Invalid nonce")?;
    let secret = base64::engine::general_purpose::STANDARD.decode(&account.secret).map_err(|_| "EAPI:Invalid key")?;
    let sign = headers.get("API-Sign").and_then(|h| h.to_str().ok()).unwrap_or("");
    let mut message = format!("/0/private/{method}").into_bytes();
    let mut inner = nonce.to_string().into_bytes();
    inner.extend_from_slice(body);
    message.extend_from_slice(&sha2::Sha256::digest(&inner));
    let mut mac = <Hmac<sha2::Sha512> as KeyInit>::new_from_slice(&secret).expect("any key length");
    mac.update(&message);
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    if expected != sign {
        return Err("EAPI:Invalid signature");
    }
    Ok((account.name.clone(), params, nonce))
}

/// `POST /0/private/<Method>`. A withdraw request is logged first, whatever happens. The
/// faults act first, as the network would: a `latency` fault is a request in flight, checked
/// (signature, nonce) only when it arrives — by then a call with a higher nonce may have been
/// accepted, and it is refused.
pub async fn private(State(v): State<Shared>, Path(method): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    // A request that left the client arrives even when the client has given up waiting: its
    // handling is not cancelled with the connection.
    let handled = tokio::spawn(handle(v, method, headers, body));
    handled.await.unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
}

async fn handle(v: Shared, method: String, headers: HeaderMap, body: Bytes) -> Response {
    let named = headers
        .get("API-Key")
        .and_then(|h| h.to_str().ok())
        .and_then(|k| v.setup.account_by_key(k))
        .map(|a| a.name.clone());
    let raw: HashMap<String, String> = form_urlencoded::parse(&body).into_owned().collect();
    let seq = if method == "Withdraw" { Some(log(&v, named.clone(), &raw, "received", 0, None).await) } else { None };
    let (refused, fired) = before(&v, endpoint(&method), named.as_deref()).await;
    if let Some(r) = refused {
        let kind = fired.iter().find(|f| f.kind != "latency").map(|f| f.kind.clone()).unwrap_or_default();
        return settle(&v, seq, r, &kind, None).await;
    }
    let (account, params, nonce) = match verify(&v, &method, &headers, &body) {
        Ok(x) => x,
        Err(e) => return settle(&v, seq, err(e), &format!("refused:{e}"), None).await,
    };
    {
        // The key's nonce only goes up: a request signed before a later one was accepted is
        // refused, whenever it arrives.
        let mut books = v.books.lock().await;
        let last = books.nonces.get(&account).copied().unwrap_or(0);
        if nonce <= last {
            drop(books);
            let e = "EAPI:Invalid nonce";
            return settle(&v, seq, err(e), &format!("refused:{e}"), None).await;
        }
        books.nonces.insert(account.clone(), nonce);
        v.save(&books).await;
    }
    if let Some(seq) = seq {
        return withdraw(&v, seq, &account, &params, &fired).await;
    }
    let books = v.books.lock().await;
    let setup_account = v.setup.accounts.iter().find(|a| a.name == account);
    let asset = params.get("asset");
    let secs = |k: &str| params.get(k).and_then(|s| s.parse::<i64>().ok());
    let mut result = match method.as_str() {
        "Balance" => Value::Object(
            books
                .balances
                .get(&account)
                .map(|b| b.iter().map(|(c, u)| (c.clone(), json!(ledger::text(*u)))).collect())
                .unwrap_or_default(),
        ),
        "BalanceEx" => Value::Object(
            books
                .balances
                .get(&account)
                .map(|b| {
                    b.iter()
                        .map(|(c, u)| (c.clone(), json!({"balance": ledger::text(*u), "hold_trade": "0.00000000"})))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        "WithdrawMethods" => Value::Array(
            v.setup
                .coins
                .iter()
                .filter(|c| asset.is_none_or(|a| a == &c.coin))
                .flat_map(|c| c.networks.iter().filter(|n| n.withdraw_enable).map(move |n| (c, n)))
                .map(|(c, n)| {
                    json!({"asset": c.coin, "method": n.network, "network": n.network, "minimum": n.withdraw_min,
                           "limits": [], "fee": {"aclass": "currency", "asset": c.coin, "fee": n.withdraw_fee}})
                })
                .collect(),
        ),
        "WithdrawAddresses" => Value::Array(
            setup_account
                .map(|a| {
                    a.whitelist
                        .iter()
                        .filter(|w| w.key.is_some())
                        .filter(|w| asset.is_none_or(|x| x == &w.coin))
                        .filter(|w| params.get("key").is_none_or(|k| Some(k) == w.key.as_ref()))
                        .map(|w| {
                            let mut o = json!({"address": w.address, "asset": w.coin, "method": w.network,
                                               "key": w.key, "verified": true});
                            if let (Some(tag), Some(m)) = (&w.address_tag, o.as_object_mut()) {
                                m.insert("memo".into(), json!(tag));
                            }
                            o
                        })
                        .collect()
                })
                .unwrap_or_default(),
        ),
        "WithdrawStatus" => Value::Array(
            books
                .withdrawals
                .iter()
                .filter(|w| w.account == account)
                .filter(|w| (v.now() - w.applied_at).num_milliseconds() >= v.setup.timing.history_lag_ms)
                .filter(|w| asset.is_none_or(|a| a == &w.coin))
                .filter(|w| secs("start").is_none_or(|s| w.applied_at.timestamp() >= s))
                .filter(|w| secs("end").is_none_or(|e| w.applied_at.timestamp() <= e))
                .map(|w| status_row(setup_account, w))
                .collect(),
        ),
        "DepositStatus" => Value::Array(
            books
                .deposits
                .iter()
                .filter(|d| d.account == account)
                .filter(|d| asset.is_none_or(|a| a == &d.coin))
                .filter(|d| secs("start").is_none_or(|s| d.inserted_at.timestamp() >= s))
                .filter(|d| secs("end").is_none_or(|e| d.inserted_at.timestamp() <= e))
                .map(|d| {
                    let status = match d.status {
                        1 | 6 => "Success",
                        0 | 8 => "Pending",
                        _ => "Failure",
                    };
                    json!({"method": d.network, "aclass": "currency", "asset": d.coin, "refid": d.id, "txid": d.tx_id,
                           "info": d.address, "amount": d.amount, "fee": "0.00000000",
                           "time": d.inserted_at.timestamp(), "status": status})
                })
                .collect(),
        ),
        _ => return err("EGeneral:Unknown method"),
    };
    if let Some(bad) = fired.iter().find(|f| f.kind == "bad_number") {
        const NUMBERS: [&str; 5] = ["amount", "fee", "balance", "hold_trade", "minimum"];
        crate::replace_fields(&mut result, bad.value.as_deref().unwrap_or("Infinity"), &NUMBERS, method == "Balance");
    }
    ok(result)
}

/// A withdrawal as `WithdrawStatus` shows it: `amount` is what was sent on chain (the amount
/// applied for less the fee Kraken deducts), `info` the address, `key` the withdrawal key.
fn status_row(account: Option<&ledger::AccountSetup>, w: &WithdrawalRow) -> Value {
    let (status, prop) = match w.status {
        2 | 0 => ("Initial", None),
        4 => ("Pending", None),
        6 => ("Success", None),
        1 => ("Failure", Some("canceled")),
        3 | 5 => ("Failure", None),
        other => return status_with(account, w, &format!("Status{other}"), None),
    };
    status_with(account, w, status, prop)
}

fn status_with(account: Option<&ledger::AccountSetup>, w: &WithdrawalRow, status: &str, prop: Option<&str>) -> Value {
    let key = account.and_then(|a| {
        a.whitelist
            .iter()
            .find(|x| x.coin == w.coin && x.address.eq_ignore_ascii_case(&w.address))
            .and_then(|x| x.key.clone())
    });
    let mut o = json!({"method": w.network, "aclass": "currency", "asset": w.coin, "refid": w.id,
                       "txid": w.tx_id.clone().unwrap_or_default(), "info": w.address,
                       "amount": w.arrival.clone().unwrap_or_else(|| w.amount.clone()), "fee": w.fee,
                       "time": w.applied_at.timestamp(), "status": status});
    if let Some(m) = o.as_object_mut() {
        if let Some(p) = prop {
            m.insert("status-prop".into(), json!(p));
        }
        if let Some(k) = key {
            m.insert("key".into(), json!(k));
        }
    }
    o
}

/// Records what a logged withdraw request came to (`seq`: none for another call) and answers.
async fn settle(v: &Shared, seq: Option<u64>, response: Response, outcome: &str, id: Option<String>) -> Response {
    if let Some(seq) = seq {
        let mut books = v.books.lock().await;
        if let Some(r) = books.requests.iter_mut().find(|r| r.seq == seq) {
            r.outcome = outcome.to_string();
            r.http_status = response.status().as_u16();
            r.withdrawal_id = id;
        }
        v.save(&books).await;
        tracing::info!(seq, outcome, "kraken withdraw request");
    }
    response
}

async fn log(
    v: &Shared,
    account: Option<String>,
    params: &HashMap<String, String>,
    outcome: &str,
    http_status: u16,
    id: Option<String>,
) -> u64 {
    let mut books = v.books.lock().await;
    let seq = books.requests.len() as u64 + 1;
    books.requests.push(RequestRow {
        seq,
        at: v.now(),
        account,
        client_id: None,
        amount: params.get("amount").cloned(),
        address: params.get("address").cloned().or_else(|| params.get("key").cloned()),
        outcome: outcome.into(),
        http_status,
        code: None,
        withdrawal_id: id,
    });
    v.save(&books).await;
    seq
}

/// `Withdraw` (asset, key, amount[, address, max_fee]), accepted: booked, or refused.
async fn withdraw(
    v: &Shared,
    seq: u64,
    account: &str,
    params: &HashMap<String, String>,
    fired: &[crate::Fault],
) -> Response {
    let (response, outcome, id, hold) = apply(v, account, params, fired).await;
    let response = settle(v, Some(seq), response, &outcome, id).await;
    if let Some(ms) = hold {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        return (StatusCode::GATEWAY_TIMEOUT, "upstream timeout").into_response();
    }
    response
}

async fn apply(
    v: &Shared,
    account: &str,
    params: &HashMap<String, String>,
    fired: &[crate::Fault],
) -> (Response, String, Option<String>, Option<u64>) {
    let refused = |e: &str| (err(e), format!("refused:{e}"), None, None);
    let (Some(asset), Some(key), Some(amount)) = (params.get("asset"), params.get("key"), params.get("amount")) else {
        return refused("EGeneral:Invalid arguments");
    };
    let setup_account = v.setup.accounts.iter().find(|a| a.name == account);
    let Some(saved) =
        setup_account.and_then(|a| a.whitelist.iter().find(|w| w.key.as_ref() == Some(key) && &w.coin == asset))
    else {
        return refused("EFunding:Unknown withdraw key");
    };
    if params.get("address").is_some_and(|a| !a.eq_ignore_ascii_case(&saved.address)) {
        return refused("EFunding:Invalid withdrawal address");
    }
    if let (Some(max), Some(net)) = (params.get("max_fee"), v.setup.network(asset, Some(&saved.network))) {
        match (ledger::units(max), ledger::units(&net.withdraw_fee)) {
            (Some(max), Some(fee)) if fee > max => return refused("EFunding:Fee exceeds max_fee"),
            (None, _) => return refused("EGeneral:Invalid arguments:max_fee"),
            _ => {}
        }
    }
    let order = Order {
        coin: asset.clone(),
        network: Some(saved.network.clone()),
        address: saved.address.clone(),
        tag: saved.address_tag.clone(),
        amount: amount.clone(),
        client_id: None,
    };
    match book(v, account, &order, fired).await {
        Booked::Id { id, outcome, hold } => (ok(json!({"refid": id})), outcome, Some(id), hold),
        Booked::Refused(_, code, _) => refused(match code {
            -4026 => "EFunding:Insufficient funds",
            -4022 | -1100 => "EFunding:Invalid amount",
            -4014 => "EFunding:Unknown withdraw key",
            -4019 => "EFunding:Method unavailable",
            _ => "EGeneral:Invalid arguments",
        }),
        Booked::Lookalike => (
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": ["EService:Unavailable"]}))).into_response(),
            "lookalike".into(),
            None,
            None,
        ),
    }
}
