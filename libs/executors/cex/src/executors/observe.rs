//! `withdrawal_observe` and `deposit_observe`: a withdrawal followed to its txid, and the
//! deposit it must bring on the destination account.

use super::*;

impl CexExecutor {
    /// A withdrawal by the venue's id, as observe answers it. `action`: the action node only
    /// waits for the venue to hold it; the observe node waits for it to be sent on chain.
    pub(super) async fn follow(
        &self,
        ctx: &ExecutionContext,
        id: &str,
        action: bool,
    ) -> Result<ObserveOutcome, ExecutorError> {
        let Some(w) = self.venue.withdrawal_by_id(id).await.map_err(|e| self.unavailable(e))? else {
            // The venue gave this id; its history may lag.
            let mut r = self.result(AfterObserve::Observing);
            r.provider_state = Some("not_in_history_yet".into());
            r.retry_after_seconds = Some(WITHDRAWAL_POLL_SECONDS);
            return Ok(r);
        };
        let phase = withdrawal_phase(w.status);
        let mut r = match phase {
            WithdrawalPhase::Unmapped => return Ok(self.unknown_status("withdrawal", w.status, id)),
            WithdrawalPhase::Ended(code) => self.failed(
                code,
                format!(
                    "the venue ended withdrawal {id} with status {}{}",
                    w.status,
                    w.info.as_deref().map(|i| format!(": {i}")).unwrap_or_default()
                ),
            ),
            WithdrawalPhase::Pending if !action => {
                let mut r = self.result(AfterObserve::Observing);
                r.retry_after_seconds = Some(WITHDRAWAL_POLL_SECONDS);
                r
            }
            WithdrawalPhase::Completed if !action && w.tx_id.as_deref().is_none_or(str::is_empty) => {
                let mut r = self.result(AfterObserve::Observing);
                r.provider_state = Some("completed_without_txid".into());
                r.retry_after_seconds = Some(WITHDRAWAL_POLL_SECONDS);
                r
            }
            _ => {
                let mut r = self.result(AfterObserve::Completed);
                if let Some(tx) = w.tx_id.clone().filter(|t| !t.is_empty()) {
                    r.provider_refs.insert("txid".into(), json!(tx));
                }
                if !action {
                    self.arrival_refs(ctx, &w, &mut r);
                }
                r.generated_artifacts
                    .push(json!({"kind": "cex_withdrawal", "venue": self.config.venue, "withdrawal": w}));
                r
            }
        };
        r.provider_state.get_or_insert_with(|| format!("status_{}", w.status));
        r.provider_refs.insert("exchange_withdrawal_id".into(), json!(id));
        r.provider_refs.insert("withdrawal_status".into(), json!(w.status));
        if !action {
            r.provider_ref_id = Some(id.to_string());
        }
        Ok(r)
    }

    /// What the deposit must bring, for the deposit observe after this node: the arrival
    /// priced at prepare (carried from the action node), and what the venue's own record of the
    /// withdrawal — the amount it booked, the fee it charged — says arrives under the fee model.
    /// When the two differ (the venue's fee changed after prepare) the deposit check fails on the
    /// priced amount and a person sees both: never a silent tolerance.
    pub(super) fn arrival_refs(&self, ctx: &ExecutionContext, w: &crate::venue::Withdrawal, r: &mut ObserveOutcome) {
        let carried_model = ctx.provider_context.get("fee_model").cloned().and_then(|v| serde_json::from_value(v).ok());
        let model = carried_model.unwrap_or_else(|| self.config.fee_model(&w.coin, w.network.as_deref()));
        let charged = w.fee.as_deref().and_then(Amount::parse_any);
        let venue_arrival = Amount::parse_any(&w.amount)
            .zip(charged.clone())
            .and_then(|(amount, fee)| fees::arrival(model, &amount, &fee));
        let priced = carried(ctx, "expected_arrival", "expected_arrival");
        let expected = priced.or_else(|| venue_arrival.as_ref().map(ToString::to_string));
        r.provider_refs.insert("fee_model".into(), json!(model));
        r.provider_refs.insert("withdrawal_amount".into(), json!(w.amount));
        if let Some(fee) = charged {
            r.provider_refs.insert("withdrawal_fee_charged".into(), json!(fee.to_string()));
        }
        if let Some(a) = venue_arrival {
            r.provider_refs.insert("venue_arrival".into(), json!(a.to_string()));
        }
        if let Some(e) = expected {
            r.provider_refs.insert("expected_arrival".into(), json!(e));
        }
    }

    /// The deposit on this (destination) account that the withdrawal's txid, amount and
    /// address name.
    pub(super) async fn find_deposit(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        let Some(txid) = carried(ctx, "txid", "txid") else {
            return Ok(self
                .failed(qtg_core::codes::CEX_TXID_MISSING, "no txid in the node's config or its predecessors' refs"));
        };
        let coin = match carried(ctx, "asset", "asset")
            .or_else(|| ctx.intent.get("asset").and_then(Value::as_str).map(str::to_string))
        {
            Some(c) => c,
            None => return Ok(self.failed(qtg_core::codes::CEX_INTENT_INVALID, "the intent has no asset")),
        };
        // What must arrive: the node's own `amount`, else what the withdrawal before it priced
        // (amount − fee where the venue deducts it), else the intent's amount.
        let amount = carried(ctx, "amount", "expected_arrival")
            .or_else(|| carried(ctx, "amount", "amount"))
            .or_else(|| ctx.intent.get("amount").and_then(Value::as_str).map(str::to_string));
        let address = carried(ctx, "address", "address")
            .or_else(|| ctx.intent.get("destination").and_then(Value::as_str).map(str::to_string));
        let now = self.venue.server_time().await.map_err(|e| self.unavailable(e))?;
        let deposits = self
            .venue
            .deposits(&coin, now - self.config.deposit_lookback(), now)
            .await
            .map_err(|e| self.unavailable(e))?;
        let Some(d) = deposits.iter().find(|d| d.tx_id.as_deref().is_some_and(|t| t.eq_ignore_ascii_case(&txid)))
        else {
            let mut r = self.result(AfterObserve::Observing);
            r.provider_state = Some("not_arrived".into());
            r.retry_after_seconds = Some(DEPOSIT_POLL_SECONDS);
            return Ok(r);
        };
        let mismatch = match (&amount, &address) {
            (Some(a), _) if Amount::parse_any(a) != Amount::parse_any(&d.amount) => {
                let fees =
                    match (ctx.provider_context.get("withdrawal_fee_charged"), ctx.provider_context.get("fee_model")) {
                        (Some(fee), Some(model)) => format!(
                            " (the sending venue charged a fee of {} under fee model {}; its record says {} arrives)",
                            fee.as_str().unwrap_or("?"),
                            model.as_str().unwrap_or("?"),
                            ctx.provider_context.get("venue_arrival").and_then(Value::as_str).unwrap_or("?")
                        ),
                        _ => String::new(),
                    };
                Some(format!("amount {} ≠ expected {a}{fees}", d.amount))
            }
            (_, Some(addr)) if !addr.eq_ignore_ascii_case(&d.address) => {
                Some(format!("address {} ≠ expected {addr}", d.address))
            }
            _ => None,
        };
        if let Some(why) = mismatch {
            // What the sending venue's own record says arrives did arrive: the money moved, at
            // another fee than was priced. Not a failure (a retry would pay again): a person
            // decides.
            let venue_arrival = ctx.provider_context.get("venue_arrival").and_then(Value::as_str);
            let same_address = address.as_deref().is_none_or(|a| a.eq_ignore_ascii_case(&d.address));
            if same_address && venue_arrival.and_then(Amount::parse_any) == Amount::parse_any(&d.amount) {
                let mut r = self.result(AfterObserve::Unknown);
                r.error_code = Some(qtg_core::codes::CEX_DEPOSIT_FEE_CHANGED.into());
                r.error_detail = Some(format!(
                    "deposit {} with txid {txid}: {why} — the amount the venue's record of the withdrawal says \
                     arrives; the money moved, at another fee than was priced: a person decides",
                    d.id
                ));
                r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("deposit_fee_changed"));
                r.provider_refs.insert("deposit_id".into(), json!(d.id));
                r.provider_refs.insert("deposit_amount".into(), json!(d.amount));
                return Ok(r);
            }
            return Ok(
                self.failed(qtg_core::codes::CEX_DEPOSIT_MISMATCH, format!("deposit {} with txid {txid}: {why}", d.id))
            );
        }
        let mut r = match deposit_phase(d.status) {
            DepositPhase::Unmapped => return Ok(self.unknown_status("deposit", d.status, &d.id)),
            DepositPhase::Ended(code) => {
                self.failed(code, format!("the venue reports deposit {} with status {}", d.id, d.status))
            }
            DepositPhase::Pending => {
                let mut r = self.result(AfterObserve::Observing);
                r.retry_after_seconds = Some(DEPOSIT_POLL_SECONDS);
                r
            }
            DepositPhase::Credited => {
                let mut r = self.result(AfterObserve::Completed);
                r.generated_artifacts.push(json!({"kind": "cex_deposit", "venue": self.config.venue, "deposit": d}));
                r
            }
        };
        r.provider_ref_id = Some(d.id.clone());
        r.provider_state = Some(format!("status_{}", d.status));
        r.provider_refs.insert("deposit_id".into(), json!(d.id));
        r.provider_refs.insert("deposit_amount".into(), json!(d.amount));
        r.provider_refs.insert("deposit_status".into(), json!(d.status));
        Ok(r)
    }

    /// What an observe node follows, named in the prepared payload.
    pub(super) fn observe_payload(&self, ctx: &ExecutionContext) -> Result<Map<String, Value>, String> {
        let mut p = Map::new();
        p.insert("venue".into(), json!(self.config.venue));
        match self.role {
            Role::WithdrawalObserve => {
                let id = carried(ctx, "withdrawal_id", "exchange_withdrawal_id")
                    .ok_or("no withdrawal id: give config.withdrawal_id or follow a withdrawal_action node")?;
                p.insert("withdrawal_id".into(), json!(id));
            }
            _ => {
                let txid = carried(ctx, "txid", "txid")
                    .ok_or("no txid: give config.txid or follow a withdrawal_observe node")?;
                p.insert("txid".into(), json!(txid));
            }
        }
        Ok(p)
    }

    pub(super) async fn observe_once(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        match self.role {
            Role::WithdrawalAction | Role::WithdrawalObserve => {
                let action = self.role == Role::WithdrawalAction;
                let id = if action {
                    recorded_withdrawal_id(ctx)
                } else {
                    recorded_withdrawal_id(ctx).or_else(|| carried(ctx, "withdrawal_id", "exchange_withdrawal_id"))
                };
                match id {
                    Some(id) => self.follow(ctx, &id, action).await,
                    None => Ok(ExecutionResult {
                        error_code: Some(qtg_core::codes::CEX_WITHDRAWAL_ID_MISSING.into()),
                        error_detail: Some("the node recorded no venue withdrawal id".into()),
                        ..self.result(AfterObserve::Unknown)
                    }),
                }
            }
            Role::DepositObserve => self.find_deposit(ctx).await,
        }
    }
}
