//! `withdrawal_action`: what a withdrawal moves (read from the intent, priced by the venue's
//! fee model), its preflight, and the withdraw request on the wire through the fence.

use super::*;

/// What a withdrawal node moves, read from its intent and config the same way at prepare and
/// at recover.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WithdrawPayload {
    pub venue: String,
    pub coin: String,
    pub network: Option<String>,
    pub address: String,
    pub address_tag: Option<String>,
    /// What the withdraw request says: the intent's amount, grossed up by the fee when the
    /// intent's amount is what must arrive at a venue that deducts it.
    pub amount: String,
    /// The withdrawal's amounts under the venue's fee model, as prepared (absent in a payload
    /// prepared before fee models, and before pricing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priced: Option<Priced>,
    /// The withdrawal key that pays the address, at a venue that pays by key (Kraken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A refusal before anything is sent: an error code and why.
pub(super) type Reason = (&'static str, String);

/// The destination (and memo) against the formats the venue documents for the network
/// (`addressRegex`, `memoRegex`), before anything is sent. A venue format that does not compile
/// refuses too (fail closed): nothing is withdrawn to an address qtg cannot check.
pub(super) fn format_refusal(net: &crate::venue::NetworkInfo, p: &WithdrawPayload) -> Option<(&'static str, String)> {
    let check = |what: &str, pattern: Option<&str>, value: &str| -> Option<(&'static str, String)> {
        let pattern = pattern.filter(|r| !r.is_empty())?;
        match regex::RegexBuilder::new(pattern).size_limit(1 << 20).build() {
            Ok(re) if re.is_match(value) => None,
            Ok(_) => Some((
                qtg_core::codes::CEX_ADDRESS_INVALID,
                format!(
                    "{what} {value:?} is not in {}'s format for {} on {} ({pattern})",
                    p.venue, p.coin, net.network
                ),
            )),
            Err(e) => Some((
                qtg_core::codes::CEX_ADDRESS_INVALID,
                format!(
                    "{}'s {what} format for {} ({pattern:?}) does not compile ({e}); nothing is sent",
                    p.venue, net.network
                ),
            )),
        }
    };
    check("address", net.address_regex.as_deref(), &p.address).or_else(|| match &p.address_tag {
        Some(tag) => check("memo", net.memo_regex.as_deref(), tag),
        None => None,
    })
}

/// The address a withdrawal pays: the node config's `address` (fixed by the template), else
/// the intent's `destination` — the value approvers are shown and allow-lists check. It is a
/// string; a memo or tag goes in `intent.memo` (or `address_tag`), the network in
/// `intent.network` or the entry's config. An intent `address` beside it must say the same.
pub(super) fn destination_of(node_config: &Value, intent: &Value) -> Result<String, String> {
    let expects = "intent.destination must be the withdrawal address as a string (a memo or tag goes in \
                   intent.memo, the network in intent.network)";
    let fixed = node_config.get("address").and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let address = match (fixed, intent.get("destination")) {
        // The template fixes the address: an intent naming another would show the approver
        // an address that is not paid.
        (Some(a), Some(Value::String(d))) if d.trim() != a => {
            return Err(format!("intent.destination {d:?} is not the address this template pays ({a:?})"))
        }
        (Some(a), _) => a.to_string(),
        (None, Some(Value::String(d))) if !d.trim().is_empty() => d.trim().to_string(),
        (None, Some(Value::Object(_))) => return Err(format!("{expects}, not an object")),
        (None, _) => return Err(format!("the intent has no destination: {expects}")),
    };
    match intent.get("address") {
        None | Some(Value::Null) => Ok(address),
        Some(Value::String(a)) if a.trim() == address => Ok(address),
        Some(other) => Err(format!(
            "intent.address {other} is not the address paid ({address:?}): give the destination once, in \
             intent.destination"
        )),
    }
}

impl WithdrawPayload {
    pub(super) fn of(ctx: &ExecutionContext, config: &EntryConfig) -> Result<WithdrawPayload, String> {
        let field = |name: &str| -> Option<String> {
            ctx.node_config
                .get(name)
                .or_else(|| ctx.intent.get(name))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let coin = field("asset").ok_or("the intent has no asset")?;
        let amount = field("amount").ok_or("the intent has no amount")?;
        if Amount::parse(&amount).is_none_or(|a| a.is_zero()) {
            return Err(format!("amount {amount:?} is not a positive decimal"));
        }
        let address = destination_of(&ctx.node_config, &ctx.intent)?;
        Ok(WithdrawPayload {
            venue: config.venue.clone(),
            coin,
            network: field("network").or_else(|| config.network.clone()),
            address,
            address_tag: field("address_tag").or_else(|| field("memo")),
            amount,
            priced: None,
            key: None,
        })
    }

    /// The payload with its amounts under `model`, at the fee the venue states for `net`,
    /// within the template's fee cap. Refused when the venue states no fee (what arrives
    /// could not be known), the fee is over the cap, or nothing would arrive.
    pub(super) fn priced(
        mut self,
        net: &crate::venue::NetworkInfo,
        model: FeeModel,
        amount_is: AmountIs,
        risk_controls: &Value,
    ) -> Result<WithdrawPayload, Reason> {
        let fee = net.withdraw_fee.as_deref().and_then(Amount::parse_any).ok_or_else(|| {
            (
                qtg_core::codes::CEX_FEE_UNKNOWN,
                format!(
                    "{} states no withdrawal fee for {} on {}: what would arrive cannot be known; nothing is sent",
                    self.venue, self.coin, net.network
                ),
            )
        })?;
        let cap = fees::fee_cap(risk_controls, &self.coin).map_err(|e| (qtg_core::codes::CEX_INTENT_INVALID, e))?;
        match &cap {
            Some(cap) if &fee > cap => {
                return Err((
                    qtg_core::codes::CEX_FEE_OVER_CAP,
                    format!(
                        "{}'s fee for {} on {} is {fee}, over the template's cap of {cap} (risk_controls.max_fee)",
                        self.venue, self.coin, net.network
                    ),
                ))
            }
            None if amount_is == AmountIs::Received && model == FeeModel::Deducted => {
                return Err((
                    qtg_core::codes::CEX_FEE_CAP_REQUIRED,
                    "an amount that must arrive is grossed up by the venue's fee: the template must cap the fee \
                     (risk_controls.max_fee)"
                        .to_string(),
                ))
            }
            _ => {}
        }
        let requested = Amount::parse_any(&self.amount).unwrap_or(Amount::ZERO);
        let priced =
            fees::price(model, amount_is, &requested, &fee).map_err(|e| (qtg_core::codes::CEX_AMOUNT_BELOW_FEE, e))?;
        self.network = Some(net.network.clone());
        self.amount = priced.applied.clone();
        self.priced = Some(priced);
        Ok(self)
    }

    pub(super) fn request(&self, client_id: &str) -> WithdrawRequest {
        WithdrawRequest {
            coin: self.coin.clone(),
            network: self.network.clone(),
            address: self.address.clone(),
            address_tag: self.address_tag.clone(),
            amount: self.amount.clone(),
            client_id: client_id.to_string(),
            key: self.key.clone(),
            max_fee: self.priced.as_ref().map(|p| p.fee.clone()),
        }
    }

    pub(super) fn target<'a>(&'a self, client_id: &'a str) -> Target<'a> {
        Target {
            coin: &self.coin,
            address: &self.address,
            address_tag: self.address_tag.as_deref(),
            amount: &self.amount,
            client_id,
            key: self.key.as_deref(),
        }
    }
}

/// What one withdraw request on the wire came to.
pub(super) enum Sent {
    Booked {
        id: String,
        signed_at: DateTime<Utc>,
        recv_window_ms: u32,
    },
    /// The venue's time was too close to `submit_by`: nothing sent, the key is void.
    TooLate {
        venue_time: DateTime<Utc>,
    },
    /// The key was voided (by recovery) before the request left: nothing sent.
    Voided,
    /// The venue's time could not be read: nothing sent, the key is void.
    NoTime(VenueError),
    /// The venue stated it did not act: the key is void.
    Refused(VenueError),
    /// The request may have reached the venue and no answer says what it did.
    Unknown(VenueError),
}

impl CexExecutor {
    /// The withdraw request on the wire: the key marked sent, the venue's time T, the fence's
    /// last check (`T + 1 s ≤ submit_by`), `recvWindow = submit_by − T` (capped), the signed
    /// request. Runs to its end as its own task even if the caller gives up; the venue refuses
    /// it once its clock is past T + `recvWindow` — however long this process was frozen.
    pub(super) async fn send(
        venue: Arc<dyn Venue>,
        pool: PgPool,
        payload: WithdrawPayload,
        key: String,
        submit_by: DateTime<Utc>,
        max_window_ms: u32,
        (node, attempt): (Uuid, i32),
    ) -> Result<Sent, qtg_store::StoreError> {
        let req = payload.request(&key);
        let name = venue.name().to_string();
        if !keys::mark_sent(&pool, &key, &serde_json::to_value(&payload).unwrap_or(Value::Null)).await? {
            // Voided by recovery — or marked sent by a concurrent submit of the same key,
            // whose request may be on its way: then this call knows nothing for sure.
            return Ok(match keys::get(&pool, &key).await?.map(|k| k.status) {
                Some(keys::KeyStatus::Sent) => {
                    Sent::Unknown(VenueError::NoAnswer("another call is sending this key".into()))
                }
                _ => Sent::Voided,
            });
        }
        // Nothing left yet: a key this call voids is its own.
        let t = match venue.server_time().await {
            Ok(t) => t,
            Err(e) => {
                keys::void(&pool, &key, &name, node, attempt, "the venue's time could not be read; nothing was sent")
                    .await?;
                return Ok(Sent::NoTime(e));
            }
        };
        let left = (submit_by - t).num_milliseconds();
        if left < 1000 {
            keys::void(
                &pool,
                &key,
                &name,
                node,
                attempt,
                "the venue's time was within 1 s of submit_by; nothing was sent",
            )
            .await?;
            return Ok(Sent::TooLate { venue_time: t });
        }
        let window = u32::try_from(left).unwrap_or(u32::MAX).min(max_window_ms);
        let nonce = match venue.fencing() {
            Fencing::RecvWindow => {
                keys::note_signature(&pool, &key, t, window as i32).await?;
                None
            }
            Fencing::Nonce => {
                // The nonce is noted before the request is signed with it, and only while
                // recovery has not asked for the fence: recovery then raises the key's nonce
                // above it, or knows nothing was signed.
                let n = venue.reserve_nonce().unwrap_or(0);
                if !keys::note_nonce(&pool, &key, t, i64::try_from(n).unwrap_or(i64::MAX)).await? {
                    return Ok(Sent::Voided);
                }
                Some(n)
            }
        };
        tracing::info!(
            venue = %name, idempotency_key = %key, venue_time = %t, recv_window_ms = window, nonce,
            "sending withdraw request"
        );
        match venue.submit_withdrawal(&req, Stamp { signed_at: t, recv_window_ms: window, nonce }).await {
            Ok(id) => Ok(Sent::Booked { id, signed_at: t, recv_window_ms: window }),
            Err(e) if e.not_executed() => {
                keys::void(&pool, &key, &name, node, attempt, &format!("the venue refused the request: {e}")).await?;
                Ok(Sent::Refused(e))
            }
            Err(e) => Ok(Sent::Unknown(e)),
        }
    }

    /// The venue holds withdrawal `id` for key `key`: its refs carry what was priced (the fee
    /// model, the fee, what was applied for, what leaves the account and what must arrive),
    /// which the observe nodes after it check the venue against.
    pub(super) fn booked(&self, id: &str, key: &str, p: &WithdrawPayload) -> SubmitOutcome {
        let mut r = self.result(AfterSubmit::Submitted);
        r.provider_state = Some("accepted".into());
        r.provider_ref_id = Some(id.to_string());
        r.provider_refs.insert("exchange_withdrawal_id".into(), json!(id));
        r.provider_refs.insert("withdraw_order_id".into(), json!(key));
        if let Some(priced) = &p.priced {
            r.provider_refs.insert("fee_model".into(), json!(priced.fee_model));
            r.provider_refs.insert("amount_is".into(), json!(priced.amount_is));
            r.provider_refs.insert("withdrawal_fee".into(), json!(priced.fee));
            r.provider_refs.insert("amount_applied".into(), json!(priced.applied));
            r.provider_refs.insert("debit".into(), json!(priced.debit));
            r.provider_refs.insert("expected_arrival".into(), json!(priced.arrival));
        }
        r.retry_after_seconds = Some(1.0);
        r
    }

    pub(super) async fn submit_withdrawal(
        &self,
        ctx: &ExecutionContext,
        s: &Submission<'_>,
    ) -> Result<SubmitOutcome, ExecutorError> {
        // What was prepared is what is sent.
        let payload: WithdrawPayload = serde_json::from_str(&s.prepared.payload)
            .map_err(|e| ExecutorError::Protocol(format!("the prepared withdrawal does not parse: {e}")))?;
        if payload.venue != self.config.venue {
            return Ok(self.failed(
                qtg_core::codes::CEX_VENUE_MISMATCH,
                format!("prepared for venue {:?}, this entry is {:?}", payload.venue, self.config.venue),
            ));
        }
        let key = s.idempotency_key;
        let node = node_id(ctx)?;
        match keys::record(&self.pool, key, &self.config.venue, node, ctx.attempt_no, s.submit_by)
            .await
            .map_err(Self::store)?
        {
            Recorded::Fresh => {}
            Recorded::Void(reason) => {
                return Ok(self.failed(
                    qtg_core::codes::CEX_KEY_VOID,
                    format!("the idempotency key is void ({}); nothing was sent", reason.unwrap_or_default()),
                ))
            }
            Recorded::Superseded { newest } => {
                return Ok(self.failed(
                    qtg_core::codes::CEX_KEY_SUPERSEDED,
                    format!("attempt {newest} of this node was already seen; nothing was sent"),
                ))
            }
            Recorded::Late => {
                return Ok(self.failed(
                    qtg_core::codes::CEX_SUBMIT_LATE,
                    "received after submit_by; the key is void and nothing was sent",
                ))
            }
            Recorded::AlreadySent(_) => {
                // Never sent twice: what the venue has under this key is the answer.
                let found =
                    self.venue.withdrawals_by_client_id(&payload.coin, key).await.map_err(|e| self.unavailable(e))?;
                return Ok(match found.as_slice() {
                    [w] => self.booked(&w.id, key, &payload),
                    _ => ExecutionResult {
                        error_code: Some(qtg_core::codes::CEX_KEY_ALREADY_SENT.into()),
                        error_detail: Some(
                            "this key was sent before and the venue does not show it (yet); recovery decides".into(),
                        ),
                        ..self.result(AfterSubmit::Unknown)
                    },
                });
            }
        }
        let call = tokio::spawn(Self::send(
            self.venue.clone(),
            self.pool.clone(),
            payload.clone(),
            key.to_string(),
            s.submit_by,
            self.config.max_recv_window_ms(),
            (node, ctx.attempt_no),
        ));
        let sent = call
            .await
            .map_err(|e| ExecutorError::Unavailable(format!("the withdraw task: {e}")))?
            .map_err(Self::store)?;
        Ok(match sent {
            Sent::Booked { id, signed_at, recv_window_ms } => {
                let mut r = self.booked(&id, key, &payload);
                r.provider_refs.insert("venue_signed_at".into(), json!(signed_at.to_rfc3339()));
                r.provider_refs.insert("recv_window_ms".into(), json!(recv_window_ms));
                r
            }
            Sent::TooLate { venue_time } => self.failed(
                qtg_core::codes::CEX_SUBMIT_LATE,
                format!(
                    "the venue's time {venue_time} is within 1 s of submit_by {}; nothing was sent, the key is void",
                    s.submit_by
                ),
            ),
            Sent::Voided => self
                .failed(qtg_core::codes::CEX_KEY_VOID, "the key was voided before the request left; nothing was sent"),
            Sent::NoTime(e) => self
                .failed(qtg_core::codes::CEX_VENUE_TIME_UNAVAILABLE, format!("{e}; nothing was sent, the key is void")),
            Sent::Refused(e) => {
                let code = match e {
                    VenueError::Auth { .. } => qtg_core::codes::CEX_AUTH_FAILED,
                    VenueError::RateLimited { .. } => qtg_core::codes::CEX_RATE_LIMITED,
                    VenueError::Unreachable(_) => qtg_core::codes::CEX_VENUE_UNREACHABLE,
                    _ => qtg_core::codes::CEX_WITHDRAWAL_REFUSED,
                };
                self.failed(code, e.to_string())
            }
            Sent::Unknown(e) => {
                tracing::warn!(
                    venue = %self.config.venue, idempotency_key = %key, error = %e,
                    "withdraw request without an answer; recovery reconciles it"
                );
                ExecutionResult {
                    error_code: Some(match e {
                        VenueError::Server { .. } => qtg_core::codes::CEX_VENUE_ERROR.into(),
                        _ => qtg_core::codes::CEX_NO_ANSWER.into(),
                    }),
                    error_detail: Some(e.to_string()),
                    ..self.result(AfterSubmit::Unknown)
                }
            }
        })
    }

    /// Preflight of a withdrawal: whitelisted address, asset and network open for
    /// withdrawals, the fee known and within the cap, amount within the venue's limits,
    /// balance for what the withdrawal debits under the venue's fee model.
    pub(super) async fn preflight_withdrawal(
        &self,
        ctx: &ExecutionContext,
    ) -> Result<Option<qtg_core::Refusal>, ExecutorError> {
        let checked = match self.quote(ctx).await {
            Ok(Ok((p, net))) => self.check_withdrawal(&p, &net).await,
            Ok(Err(refusal)) => Ok(Some(refusal)),
            Err(e) => Err(e),
        };
        match checked {
            Ok(None) => Ok(None),
            Ok(Some((code, detail))) => Ok(Some(self.failed(code, detail))),
            Err(e @ VenueError::Auth { .. }) => Ok(Some(self.failed(qtg_core::codes::CEX_AUTH_FAILED, e.to_string()))),
            Err(e) => Err(self.unavailable(e)),
        }
    }

    /// The withdrawal as the intent asks for it, on the network it uses, priced at the fee
    /// the venue states now (what prepare fixes, approvers see and submit sends).
    pub(super) async fn quote(
        &self,
        ctx: &ExecutionContext,
    ) -> Result<Result<(WithdrawPayload, crate::venue::NetworkInfo), Reason>, VenueError> {
        let p = match WithdrawPayload::of(ctx, &self.config) {
            Ok(p) => p,
            Err(why) => return Ok(Err((qtg_core::codes::CEX_INTENT_INVALID, why))),
        };
        let amount_is = match AmountIs::of_intent(&ctx.intent) {
            Ok(a) => a,
            Err(why) => return Ok(Err((qtg_core::codes::CEX_INTENT_INVALID, why))),
        };
        let networks = self.venue.networks(&p.coin).await?;
        if networks.is_empty() {
            return Ok(Err((
                qtg_core::codes::CEX_ASSET_UNAVAILABLE,
                format!("{} does not list asset {}", p.venue, p.coin),
            )));
        }
        let net = match &p.network {
            Some(n) => networks.iter().find(|x| &x.network == n),
            None if networks.len() == 1 => networks.first(),
            None => {
                let names: Vec<_> = networks.iter().map(|n| n.network.as_str()).collect();
                return Ok(Err((
                    qtg_core::codes::CEX_NETWORK_REQUIRED,
                    format!("{} moves on {names:?}: name the network", p.coin),
                )));
            }
        };
        let Some(net) = net.filter(|n| n.withdraw_enable).cloned() else {
            return Ok(Err((
                qtg_core::codes::CEX_NETWORK_UNAVAILABLE,
                format!(
                    "{} on {} is not open for withdrawals at {}",
                    p.coin,
                    p.network.as_deref().unwrap_or("?"),
                    p.venue
                ),
            )));
        };
        let model = self.config.fee_model(&p.coin, Some(&net.network));
        let mut p = match p.priced(&net, model, amount_is, &ctx.risk_controls) {
            Ok(p) => p,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if self.venue.pays_by_key() {
            // The venue pays a saved withdrawal key, not an address: the key that holds exactly
            // this address (and memo) for the asset and network.
            let saved = self.venue.whitelist().await?;
            let found = saved.iter().find(|w| {
                w.address.eq_ignore_ascii_case(&p.address)
                    && w.address_tag.as_deref().filter(|t| !t.is_empty()) == p.address_tag.as_deref()
                    && w.coin.as_deref().is_none_or(|c| c.eq_ignore_ascii_case(&p.coin))
                    && w.network.as_deref().is_none_or(|n| n == net.network)
            });
            match found.and_then(|w| w.key.clone()) {
                Some(key) => p.key = Some(key),
                None => {
                    return Ok(Err((
                        qtg_core::codes::CEX_ADDRESS_NOT_WHITELISTED,
                        format!("{} has no withdrawal key for {} {} on {}", p.venue, p.coin, p.address, net.network),
                    )))
                }
            }
        }
        Ok(Ok((p, net)))
    }

    pub(super) async fn check_withdrawal(
        &self,
        p: &WithdrawPayload,
        net: &crate::venue::NetworkInfo,
    ) -> Result<Option<Reason>, VenueError> {
        let whitelist = self.venue.whitelist().await?;
        let listed = whitelist.iter().any(|w| {
            w.address.eq_ignore_ascii_case(&p.address)
                && w.address_tag.as_deref().filter(|t| !t.is_empty()) == p.address_tag.as_deref()
                && w.coin.as_deref().is_none_or(|c| c.is_empty() || c.eq_ignore_ascii_case(&p.coin))
                && w.network.as_deref().is_none_or(|n| n.is_empty() || p.network.as_deref().is_none_or(|m| m == n))
        });
        if !listed {
            return Ok(Some((
                qtg_core::codes::CEX_ADDRESS_NOT_WHITELISTED,
                format!("{} is not on the withdrawal whitelist of {}", p.address, p.venue),
            )));
        }
        if let Some(refusal) = format_refusal(net, p) {
            return Ok(Some(refusal));
        }
        let amount = Amount::parse_any(&p.amount).unwrap_or(Amount::ZERO);
        let bound = |v: &Option<String>| v.as_deref().and_then(Amount::parse_any).filter(|a| !a.is_zero());
        if bound(&net.withdraw_min).is_some_and(|min| amount < min)
            || bound(&net.withdraw_max).is_some_and(|max| amount > max)
        {
            return Ok(Some((
                qtg_core::codes::CEX_AMOUNT_OUT_OF_RANGE,
                format!(
                    "{} {} is outside the venue's limits [{}, {}]",
                    p.amount,
                    p.coin,
                    net.withdraw_min.as_deref().unwrap_or("-"),
                    net.withdraw_max.as_deref().unwrap_or("-")
                ),
            )));
        }
        let Some(priced) = &p.priced else {
            return Ok(Some((qtg_core::codes::CEX_INTENT_INVALID, "the withdrawal was not priced".into())));
        };
        let needed = Amount::parse_any(&priced.debit).unwrap_or(Amount::ZERO);
        let balances = self.venue.balances().await?;
        let free = balances
            .iter()
            .find(|b| b.asset.eq_ignore_ascii_case(&p.coin))
            .and_then(|b| Amount::parse_any(&b.free))
            .unwrap_or(Amount::ZERO);
        if free < needed {
            return Ok(Some((
                qtg_core::codes::CEX_INSUFFICIENT_BALANCE,
                format!(
                    "{} has {free} {} free; the withdrawal debits {needed} ({} applied for, fee {} {})",
                    p.venue,
                    p.coin,
                    priced.applied,
                    priced.fee,
                    priced.fee_model.as_str()
                ),
            )));
        }
        Ok(None)
    }
}
