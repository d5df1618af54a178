//! A Binance-compatible [`Venue`]: every private call is signed with HMAC-SHA256 over its full
//! parameter string (`timestamp` and `recvWindow` included) and carries the API key in
//! `X-MBX-APIKEY`; withdrawals go to `POST /sapi/v1/capital/withdraw/apply` with
//! `withdrawOrderId` = qtg's idempotency key. The secret never leaves this module: not in
//! `Debug`, not in an error, not in a log line.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::venue::{
    Balance, Deposit, NetworkInfo, Stamp, Venue, VenueError, WhitelistEntry, WithdrawRequest, Withdrawal,
};

/// `recvWindow` of the read calls (the venue's default).
const READ_WINDOW_MS: u32 = 5000;

/// API key and secret of one venue account.
#[derive(Clone)]
pub struct Credentials {
    pub api_key: String,
    pub secret: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials { api_key: ***, secret: *** }")
    }
}

pub struct BinanceVenue {
    name: String,
    base: String,
    credentials: Credentials,
    http: reqwest::Client,
    /// The venue's clock minus the host's, in ms, from the last `server_time`.
    offset_ms: AtomicI64,
}

impl std::fmt::Debug for BinanceVenue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinanceVenue").field("name", &self.name).field("base", &self.base).finish_non_exhaustive()
    }
}

impl BinanceVenue {
    pub fn new(name: &str, base_url: &str, credentials: Credentials, timeout: Duration) -> Result<Self, String> {
        let http = http_client(timeout)?;
        Ok(BinanceVenue {
            name: name.to_string(),
            base: base_url.trim_end_matches('/').to_string(),
            credentials,
            http,
            offset_ms: AtomicI64::new(0),
        })
    }

    fn signature(&self, payload: &str) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(self.credentials.secret.as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(payload.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The host's clock corrected by the venue's (as last measured), for read calls.
    fn read_stamp(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(self.offset_ms.load(Ordering::Relaxed))
    }

    /// One signed call: `params`, then `timestamp` and `recvWindow`, url-encoded, signed, the
    /// signature appended last. GET sends them in the query, POST in a form body.
    async fn signed(
        &self,
        post: bool,
        path: &str,
        params: &[(&str, String)],
        stamp: DateTime<Utc>,
        recv_window_ms: u32,
    ) -> Result<Value, VenueError> {
        let payload = encode(params, stamp, recv_window_ms);
        let signed = format!("{payload}&signature={}", self.signature(&payload));
        let url = format!("{}{path}", self.base);
        let req = if post {
            self.http.post(&url).header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded").body(signed)
        } else {
            self.http.get(format!("{url}?{signed}"))
        };
        self.send(req.header("X-MBX-APIKEY", &self.credentials.api_key), path).await
    }

    async fn send(&self, req: reqwest::RequestBuilder, path: &str) -> Result<Value, VenueError> {
        let resp = req.send().await.map_err(|e| transport(e, path))?;
        let status = resp.status().as_u16();
        let retry_after =
            resp.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        let text = resp.text().await.map_err(|e| VenueError::NoAnswer(format!("{path}: reading the answer: {e}")))?;
        if (200..300).contains(&status) {
            return serde_json::from_str(&text)
                .map_err(|e| VenueError::Protocol(format!("{path}: not JSON ({e}): {}", clip(&text))));
        }
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let code = body.get("code").and_then(Value::as_i64).unwrap_or(0);
        let msg = body.get("msg").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| clip(&text));
        Err(match status {
            401 | 403 => VenueError::Auth { status, code, msg },
            // Invalid API key, signature or permissions, whatever the HTTP status.
            _ if matches!(code, -2014 | -2015 | -1022 | -1002) => VenueError::Auth { status, code, msg },
            418 | 429 => VenueError::RateLimited { status, retry_after },
            // Only a refusal the venue documents as "not processed" proves nothing was done;
            // any other 4xx (a backend timeout, an unknown code) leaves the outcome unknown.
            400..=499 if refused_before_processing(code) => VenueError::Rejected { status, code, msg },
            _ => VenueError::Server { status, body: clip(&text) },
        })
    }

    /// A signed read. Stamped with the host's clock corrected by the last measured offset; a
    /// venue that finds the stamp outside its window (-1021) gets its clock read and the call
    /// once more.
    async fn read(&self, path: &str, params: &[(&str, String)]) -> Result<Value, VenueError> {
        match self.signed(false, path, params, self.read_stamp(), READ_WINDOW_MS).await {
            Err(VenueError::Rejected { code: -1021, .. }) => {
                self.server_time().await?;
                self.signed(false, path, params, self.read_stamp(), READ_WINDOW_MS).await
            }
            other => other,
        }
    }

    async fn deposit_history(
        &self,
        coin: Option<&str>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<Deposit>, VenueError> {
        let mut params =
            vec![("startTime", from.timestamp_millis().to_string()), ("endTime", to.timestamp_millis().to_string())];
        if let Some(c) = coin {
            params.insert(0, ("coin", c.to_string()));
        }
        let v = self.read("/sapi/v1/capital/deposit/hisrec", &params).await?;
        array(&v, "deposit/hisrec")?.iter().map(deposit).collect()
    }

    async fn history(&self, params: &[(&str, String)]) -> Result<Vec<Withdrawal>, VenueError> {
        let v = self.read("/sapi/v1/capital/withdraw/history", params).await?;
        array(&v, "withdraw/history")?.iter().map(withdrawal).collect()
    }
}

/// The HTTP client of a venue: redirects never followed (a signed request goes where it was
/// addressed), no proxy from the environment, every call bounded by `timeout`.
pub(crate) fn http_client(timeout: Duration) -> Result<reqwest::Client, String> {
    qtg_executor::remote::install_tls_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}

/// The venue's error codes that mean the request was refused before it was processed: the
/// timestamp, signature and parameter checks (-1021, -1022, -11xx) and the withdrawal's own
/// validations (-4xxx). -1000 (unknown), -1006 / -1007 (execution status unknown) and
/// anything else are not proof.
fn refused_before_processing(code: i64) -> bool {
    matches!(code, -1021 | -1022 | -1199..=-1100 | -4999..=-4000)
}

/// `params`, `timestamp` and `recvWindow`, url-encoded in that order: what is signed.
fn encode(params: &[(&str, String)], stamp: DateTime<Utc>, recv_window_ms: u32) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        s.append_pair(k, v);
    }
    s.append_pair("timestamp", &stamp.timestamp_millis().to_string());
    s.append_pair("recvWindow", &recv_window_ms.to_string());
    s.finish()
}

pub(crate) fn transport(e: reqwest::Error, path: &str) -> VenueError {
    // Never the URL: a signed request's query carries its timestamp and signature.
    let e = e.without_url();
    // A connection never made: the request did not leave.
    if e.is_connect() {
        VenueError::Unreachable(format!("{path}: {e}"))
    } else {
        VenueError::NoAnswer(format!("{path}: {e}"))
    }
}

pub(crate) fn clip(s: &str) -> String {
    s.chars().take(300).collect()
}

fn array<'a>(v: &'a Value, what: &str) -> Result<&'a Vec<Value>, VenueError> {
    v.as_array().ok_or_else(|| VenueError::Protocol(format!("{what}: expected a JSON array")))
}

/// A string or a number as text (venues send amounts and ids either way).
pub(crate) fn text(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(crate) fn required(v: &Value, key: &str, what: &str) -> Result<String, VenueError> {
    text(v, key).ok_or_else(|| VenueError::Protocol(format!("{what}: `{key}` is missing")))
}

/// A number the venue states (an amount, a fee, a balance, a bound): absent, or a finite
/// non-negative decimal. Anything else — `"Infinity"`, `"NaN"`, `"-5"`, `"1e400"` — is the
/// answer's protocol error: nothing built on it moves money.
pub(crate) fn decimal(v: &Value, key: &str, what: &str) -> Result<Option<String>, VenueError> {
    match text(v, key) {
        None => Ok(None),
        Some(t) if qtg_core::risk::Amount::parse(&t).is_some() => Ok(Some(t)),
        Some(t) => {
            Err(VenueError::Protocol(format!("{what}: `{key}` is {:?}, not a finite non-negative decimal", clip(&t))))
        }
    }
}

pub(crate) fn required_decimal(v: &Value, key: &str, what: &str) -> Result<String, VenueError> {
    decimal(v, key, what)?.ok_or_else(|| VenueError::Protocol(format!("{what}: `{key}` is missing")))
}

fn millis(ms: i64) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms).single()
}

fn withdrawal(v: &Value) -> Result<Withdrawal, VenueError> {
    let what = "withdraw/history";
    Ok(Withdrawal {
        id: required(v, "id", what)?,
        client_id: text(v, "withdrawOrderId"),
        coin: required(v, "coin", what)?,
        network: text(v, "network"),
        address: required(v, "address", what)?,
        address_tag: text(v, "addressTag"),
        amount: required_decimal(v, "amount", what)?,
        fee: decimal(v, "transactionFee", what)?,
        status: v
            .get("status")
            .and_then(Value::as_i64)
            .ok_or_else(|| VenueError::Protocol(format!("{what}: `status` is not an integer")))?,
        tx_id: text(v, "txId"),
        // "2019-10-12 11:12:02", UTC.
        apply_time: text(v, "applyTime").and_then(|t| {
            NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M:%S").ok().map(|n| Utc.from_utc_datetime(&n))
        }),
        info: text(v, "info"),
        key: None,
    })
}

fn deposit(v: &Value) -> Result<Deposit, VenueError> {
    let what = "deposit/hisrec";
    Ok(Deposit {
        id: required(v, "id", what)?,
        coin: required(v, "coin", what)?,
        network: text(v, "network"),
        address: required(v, "address", what)?,
        address_tag: text(v, "addressTag"),
        amount: required_decimal(v, "amount", what)?,
        status: v
            .get("status")
            .and_then(Value::as_i64)
            .ok_or_else(|| VenueError::Protocol(format!("{what}: `status` is not an integer")))?,
        tx_id: text(v, "txId"),
        insert_time: v.get("insertTime").and_then(Value::as_i64).and_then(millis),
    })
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

#[async_trait]
impl Venue for BinanceVenue {
    fn name(&self) -> &str {
        &self.name
    }

    async fn server_time(&self) -> Result<DateTime<Utc>, VenueError> {
        let before = Utc::now();
        let v = self.send(self.http.get(format!("{}/api/v3/time", self.base)), "/api/v3/time").await?;
        let t = v
            .get("serverTime")
            .and_then(Value::as_i64)
            .and_then(millis)
            .ok_or_else(|| VenueError::Protocol("/api/v3/time: `serverTime` is missing".into()))?;
        // The venue's clock against the host's at the middle of the call.
        let mid = before + (Utc::now() - before) / 2;
        self.offset_ms.store((t - mid).num_milliseconds(), Ordering::Relaxed);
        Ok(t)
    }

    async fn submit_withdrawal(&self, req: &WithdrawRequest, stamp: Stamp) -> Result<String, VenueError> {
        let mut params = vec![
            ("coin", req.coin.clone()),
            ("withdrawOrderId", req.client_id.clone()),
            ("address", req.address.clone()),
            ("amount", req.amount.clone()),
        ];
        if let Some(n) = &req.network {
            params.push(("network", n.clone()));
        }
        if let Some(t) = &req.address_tag {
            params.push(("addressTag", t.clone()));
        }
        let v = self
            .signed(true, "/sapi/v1/capital/withdraw/apply", &params, stamp.signed_at, stamp.recv_window_ms)
            .await?;
        required(&v, "id", "withdraw/apply")
    }

    async fn withdrawals_by_client_id(&self, coin: &str, client_id: &str) -> Result<Vec<Withdrawal>, VenueError> {
        let found = self.history(&[("coin", coin.to_string()), ("withdrawOrderId", client_id.to_string())]).await?;
        // Only what carries the id (a venue that ignored the filter answers everything).
        Ok(found.into_iter().filter(|w| w.client_id.as_deref() == Some(client_id)).collect())
    }

    async fn withdrawal_by_id(&self, id: &str) -> Result<Option<Withdrawal>, VenueError> {
        let found = self.history(&[("idList", id.to_string())]).await?;
        Ok(found.into_iter().find(|w| w.id == id))
    }

    async fn withdrawals(
        &self,
        coin: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<Withdrawal>, VenueError> {
        self.history(&[
            ("coin", coin.to_string()),
            ("startTime", from.timestamp_millis().to_string()),
            ("endTime", to.timestamp_millis().to_string()),
        ])
        .await
    }

    async fn deposits(&self, coin: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Deposit>, VenueError> {
        self.deposit_history(Some(coin), from, to).await
    }

    async fn all_withdrawals(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Withdrawal>, VenueError> {
        self.history(&[
            ("startTime", from.timestamp_millis().to_string()),
            ("endTime", to.timestamp_millis().to_string()),
        ])
        .await
    }

    async fn all_deposits(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Deposit>, VenueError> {
        self.deposit_history(None, from, to).await
    }

    async fn networks(&self, coin: &str) -> Result<Vec<NetworkInfo>, VenueError> {
        let v = self.read("/sapi/v1/capital/config/getall", &[]).await?;
        let mut out = Vec::new();
        for c in array(&v, "config/getall")?.iter().filter(|c| text(c, "coin").as_deref() == Some(coin)) {
            for n in c.get("networkList").and_then(Value::as_array).into_iter().flatten() {
                out.push(NetworkInfo {
                    coin: coin.to_string(),
                    network: required(n, "network", "config/getall")?,
                    withdraw_enable: flag(n, "withdrawEnable"),
                    deposit_enable: flag(n, "depositEnable"),
                    withdraw_min: decimal(n, "withdrawMin", "config/getall")?,
                    withdraw_max: decimal(n, "withdrawMax", "config/getall")?,
                    withdraw_fee: decimal(n, "withdrawFee", "config/getall")?,
                    address_regex: text(n, "addressRegex"),
                    memo_regex: text(n, "memoRegex"),
                });
            }
        }
        Ok(out)
    }

    async fn whitelist(&self) -> Result<Vec<WhitelistEntry>, VenueError> {
        let v = self.read("/sapi/v1/capital/withdraw/address/list", &[]).await?;
        Ok(array(&v, "withdraw/address/list")?
            .iter()
            // `whiteStatus` false: saved, but not whitelisted.
            .filter(|a| a.get("whiteStatus").and_then(Value::as_bool) != Some(false))
            .filter_map(|a| {
                Some(WhitelistEntry {
                    coin: text(a, "coin"),
                    network: text(a, "network"),
                    address: text(a, "address")?,
                    address_tag: text(a, "addressTag"),
                    key: None,
                })
            })
            .collect())
    }

    async fn balances(&self) -> Result<Vec<Balance>, VenueError> {
        let v = self.read("/api/v3/account", &[]).await?;
        let list = v
            .get("balances")
            .and_then(Value::as_array)
            .ok_or_else(|| VenueError::Protocol("/api/v3/account: `balances` is missing".into()))?;
        let what = "/api/v3/account";
        let mut out = Vec::with_capacity(list.len());
        for b in list {
            let Some(asset) = text(b, "asset") else { continue };
            out.push(Balance {
                asset,
                free: decimal(b, "free", what)?.unwrap_or_else(|| "0".into()),
                locked: decimal(b, "locked", what)?.unwrap_or_else(|| "0".into()),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the venue's own API documentation ("SIGNED endpoint examples"): this
    /// query string, this secret, this signature.
    #[test]
    fn signs_like_the_venue_documents() {
        let v = BinanceVenue::new(
            "doc",
            "http://127.0.0.1:1",
            Credentials {
                api_key: "vmPUZE6mv9SD5VNHk4HlWFsOr6aKE2zvsw0MuIgwCIPy6utIco14y7Ju91duEh8A".into(),
                secret: "NhqPtmdSJYdKjVHjA7PZj4Mge3R5YNiP1e3UZjInClVN65XAbvqqM6A7H5fATj0j".into(),
            },
            Duration::from_secs(1),
        )
        .unwrap();
        let payload = "symbol=LTCBTC&side=BUY&type=LIMIT&timeInForce=GTC&quantity=1&price=0.1&recvWindow=5000&\
                       timestamp=1499827319559";
        assert_eq!(v.signature(payload), "c8db56825ae71d6d79447849e617115f4a920fa2acdcab2b053c4b2838bd6b71");
        assert!(!format!("{v:?}").contains("NhqPtmd"), "the secret never reaches Debug");
    }

    #[test]
    fn history_rows_parse_as_the_venue_sends_them() {
        let v: Value = serde_json::from_str(
            r#"{"id":"b6ae22b3aa844210a7041aee7589627c","amount":"8.91000000","transactionFee":"0.004","coin":"USDT",
                "status":6,"address":"0x94df8b352de7f46f64b01d3666bf6e936e44ce60","txId":"0xb5ef",
                "applyTime":"2019-10-12 11:12:02",
                "network":"ETH","transferType":0,"withdrawOrderId":"WITHDRAWtest123","info":"","confirmNo":3}"#,
        )
        .unwrap();
        let w = withdrawal(&v).unwrap();
        assert_eq!(w.client_id.as_deref(), Some("WITHDRAWtest123"));
        assert_eq!(w.apply_time.unwrap().to_rfc3339(), "2019-10-12T11:12:02+00:00");
        assert_eq!(w.status, 6);
        assert!(withdrawal(&serde_json::json!({"id": "x"})).is_err());
        assert!(
            refused_before_processing(-1021) && refused_before_processing(-1102) && refused_before_processing(-4026)
        );
        assert!(
            !refused_before_processing(-1007) && !refused_before_processing(-1000) && !refused_before_processing(0)
        );
    }
}
