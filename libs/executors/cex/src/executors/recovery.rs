//! Recovery of a withdrawal attempt (the runbook's C1/C2/C3): by the venue's id, by client id,
//! by the fence and then amount, address and memo — absence concluded only once the key can no
//! longer reach the venue.

use super::*;

/// Where an attempt's key stands against the venue ([`CexExecutor::fence`]).
pub(super) enum Fence {
    /// Never sent, and voided: it never will be.
    NeverSent,
    /// It may still reach the venue (or its effect not yet show in the history) until then.
    Pending(DateTime<Utc>),
    /// Past this time the venue's history shows whatever the key did.
    Closed(DateTime<Utc>),
}

/// Where the nonce fence of a sent key stands.
pub(super) enum NonceFence {
    /// Fenced before a request was signed with the key: nothing can have left.
    NeverSigned,
    /// A call above the request's nonce was accepted at this (venue) time.
    Fenced(DateTime<Utc>),
}

impl CexExecutor {
    /// Recovery of a withdrawal attempt (runbook C1/C2/C3): by the venue's id if one was
    /// recorded; otherwise only with both submit markers, by client id, then by amount,
    /// address and memo inside the lookback window; absence is conclusive only once the key
    /// can no longer reach the venue.
    pub(super) async fn recover_withdrawal(
        &self,
        ctx: &ExecutionContext,
        key: &str,
    ) -> Result<SubmitOutcome, ExecutorError> {
        if let Some(id) = recorded_withdrawal_id(ctx) {
            return Ok(self.follow(ctx, &id, true).await?.widen());
        }
        let refs = &ctx.provider_refs;
        let pending = refs.get(SUBMIT_ATTEMPT_PENDING).is_some_and(|v| v == &Value::Bool(true));
        let started = refs
            .get(SUBMIT_ATTEMPT_STARTED_AT)
            .and_then(Value::as_str)
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc));
        let (true, Some(started_at)) = (pending, started) else {
            // C3a: without both markers the matcher is never entered.
            tracing::warn!(
                node_id = %ctx.request_node_id, idempotency_key = key,
                "legacy UNKNOWN gate: submit markers missing; the matcher is not entered"
            );
            let mut r = self.result(AfterSubmit::Unknown);
            r.provider_refs.insert(LEGACY_RECONCILIATION_GATED.into(), json!(true));
            r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("reconciliation_markers_missing"));
            r.error_code = Some(qtg_core::codes::RECONCILIATION_GATED.into());
            r.error_detail = Some(
                "the submit markers are missing: recovery cannot tell what was sent; a person decides (runbook C3a)"
                    .into(),
            );
            return Ok(r);
        };
        let payload = WithdrawPayload::of(ctx, &self.config)
            .map_err(|e| ExecutorError::Protocol(format!("the node's intent: {e}")))?;
        match self.reconcile(ctx, key, payload, started_at).await {
            Err(e @ VenueError::Auth { .. }) => {
                // C3b: stuck on purpose; the key stays as it is (never voided on an auth failure).
                tracing::error!(
                    node_id = %ctx.request_node_id, idempotency_key = key, error = %e,
                    code = qtg_core::codes::RECONCILIATION_AUTH_FAILED,
                    "reconciliation: the venue refused the credentials"
                );
                let mut r = self.result(AfterSubmit::Unknown);
                r.provider_refs.insert(LEGACY_RECONCILIATION_GATED.into(), json!(true));
                r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("reconciliation_auth_failed"));
                r.error_code = Some(qtg_core::codes::RECONCILIATION_AUTH_FAILED.into());
                r.error_detail = Some(format!(
                    "{e}; fix the credentials (qtgctl venues drill), then a person decides (runbook C3b)"
                ));
                Ok(r)
            }
            Err(e) => Err(self.unavailable(e)),
            Ok(r) => Ok(r),
        }
    }

    pub(super) async fn reconcile(
        &self,
        ctx: &ExecutionContext,
        key: &str,
        intended: WithdrawPayload,
        started_at: DateTime<Utc>,
    ) -> Result<SubmitOutcome, VenueError> {
        // The venue's time before its history: absence is judged by a history read after it.
        let now = self.venue.server_time().await?;
        // What may have reached the venue is what the history is matched against: the request
        // as the key store recorded it when the key was marked sent (its amount may be grossed
        // up by the fee); the intent's payload only if the key never got that far.
        let sent = keys::get(&self.pool, key)
            .await
            .map_err(|e| VenueError::NoAnswer(format!("the cex key store: {e}")))?
            .and_then(|k| k.request)
            .and_then(|v| serde_json::from_value::<WithdrawPayload>(v).ok());
        let p = &sent.unwrap_or(intended);
        let by_id = self.venue.withdrawals_by_client_id(&p.coin, key).await?;
        if let [w] = by_id.as_slice() {
            tracing::info!(idempotency_key = key, withdrawal_id = %w.id, "reconciled by client id");
            let mut r = self.booked(&w.id, key, p);
            r.provider_refs
                .insert(RECONCILIATION.into(), json!({"outcome": "matched", "by": "client_id", "withdrawal_id": w.id}));
            return Ok(r);
        }
        let from = started_at - chrono::Duration::seconds(60);
        let until = started_at + self.config.lookback();
        // On a venue that keeps our client id on every withdrawal, one without it is never ours
        // to claim: a lone lookalike goes to a person like several do.
        let claimable = !self.config.client_ids();
        let mut evidence = json!({
            "window_from": from.to_rfc3339(), "window_to": until.to_rfc3339(), "venue_time": now.to_rfc3339(),
            "client_id": key, "amount": p.amount, "address": p.address, "address_tag": p.address_tag,
            "matching": (if claimable { "amount_address" } else { "client_id_only" }),
        });
        // Without a client id, a withdrawal of the same shape is ours only once ours can no
        // longer arrive: the fence is decided first (and the history read after it, up to now —
        // a request that executed late is in it), never a lookalike claimed while ours is in
        // flight.
        if claimable && by_id.is_empty() {
            match self.fence(ctx, key, now, &mut evidence).await? {
                Fence::NeverSent => return Ok(self.never_sent(key, evidence)),
                Fence::Pending(at) => {
                    evidence["outcome"] = json!("fencing");
                    evidence["fence_at"] = json!(at.to_rfc3339());
                    let mut r = self.result(AfterSubmit::Unknown);
                    r.error_code = Some(qtg_core::codes::RECONCILIATION_FENCING.into());
                    r.error_detail = Some(format!(
                        "the request may still reach the venue until {at}; its history is matched only then"
                    ));
                    r.retry_after_seconds = Some(((at - now).num_milliseconds() as f64 / 1000.0).clamp(1.0, 60.0));
                    r.provider_refs.insert(RECONCILIATION.into(), evidence);
                    return Ok(r);
                }
                Fence::Closed(at) => evidence["fence_at"] = json!(at.to_rfc3339()),
            }
        }
        let history = if by_id.is_empty() {
            let to = if claimable { now } else { now.min(until) };
            self.venue.withdrawals(&p.coin, from, to.max(from)).await?
        } else {
            by_id
        };
        let found: Vec<Candidate> = candidates(&history, &p.target(key)).into_iter().map(Candidate::from).collect();
        evidence["history_rows"] = json!(history.len());
        evidence["candidates"] = json!(found);
        // Past the fence nothing more of ours can appear: decided now.
        let lookback_closed = now > until || claimable;
        match found.as_slice() {
            [] if claimable => {
                let store = |e: qtg_store::StoreError| VenueError::NoAnswer(format!("the cex key store: {e}"));
                keys::void_sent(&self.pool, key, "recovery: absent at the venue once the request was fenced")
                    .await
                    .map_err(store)?;
                tracing::info!(
                    idempotency_key = key, venue_time = %now,
                    "no withdrawal once the request was fenced: voided, FAILED"
                );
                evidence["outcome"] = json!("absent_fenced");
                let mut r = self.failed(
                    qtg_core::codes::CEX_WITHDRAWAL_NOT_FOUND,
                    format!(
                        "the venue has no withdrawal for {key} and the request can no longer reach it; the key is void"
                    ),
                );
                r.provider_refs.insert(RECONCILIATION.into(), evidence);
                Ok(r)
            }
            [one] if claimable => {
                tracing::info!(
                    idempotency_key = key, withdrawal_id = %one.id,
                    "reconciled by amount/address/memo inside the lookback window"
                );
                evidence["outcome"] = json!("matched");
                evidence["by"] = json!("amount_address");
                let mut r = self.booked(&one.id, key, p);
                r.provider_refs.insert(RECONCILIATION.into(), evidence);
                Ok(r)
            }
            [] => self.no_match(ctx, key, evidence, now, lookback_closed).await,
            many => {
                tracing::warn!(
                    idempotency_key = key,
                    candidates = many.len(),
                    lookback_closed,
                    code = qtg_core::codes::RECONCILIATION_AMBIGUOUS,
                    "reconciliation: more than one venue withdrawal matches the attempt"
                );
                evidence["outcome"] = json!("ambiguous");
                let mut r = self.result(AfterSubmit::Unknown);
                r.error_code = Some(qtg_core::codes::RECONCILIATION_AMBIGUOUS.into());
                r.error_detail = Some(format!(
                    "{} withdrawal(s) match amount {} to {} inside the lookback window; none carries \
                     client id {key}{}{}",
                    many.len(),
                    p.amount,
                    p.address,
                    if claimable {
                        ""
                    } else {
                        " (this venue keeps client ids: a withdrawal without ours is not claimed; it may be someone \
                         else's, or ours with its id lost)"
                    },
                    if lookback_closed { "; the window is closed: a person decides (runbook C2)" } else { "" }
                ));
                if lookback_closed {
                    r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("reconciliation_ambiguous"));
                } else {
                    r.retry_after_seconds = Some(((until - now).num_seconds() as f64).clamp(1.0, 60.0));
                }
                r.provider_refs.insert(RECONCILIATION.into(), evidence);
                Ok(r)
            }
        }
    }

    /// Where the key of an attempt stands against the venue: never sent (voided now, so it
    /// never will be), still able to reach the venue until a time, or past that (the history
    /// read after it shows everything the key can have done). A venue with a deadline: the
    /// key's `submit_by` + the skew margin + the history lag; a venue fenced by nonce: the
    /// nonce fence + the history lag.
    pub(super) async fn fence(
        &self,
        ctx: &ExecutionContext,
        key: &str,
        now: DateTime<Utc>,
        evidence: &mut Value,
    ) -> Result<Fence, VenueError> {
        let store = |e: qtg_store::StoreError| VenueError::NoAnswer(format!("the cex key store: {e}"));
        let node = ctx.request_node_id.parse::<Uuid>().map_err(|_| VenueError::Protocol("request_node_id".into()))?;
        let reason = "recovery: the key was never sent";
        let Some(sent) = keys::void_unsent(&self.pool, key, &self.config.venue, node, ctx.attempt_no, reason)
            .await
            .map_err(store)?
        else {
            return Ok(Fence::NeverSent);
        };
        let lag = self.config.history_lag();
        let at = match self.venue.fencing() {
            Fencing::RecvWindow => match sent.submit_by {
                Some(by) => by + self.skew + lag,
                None => return Ok(Fence::Pending(now + chrono::Duration::seconds(30))),
            },
            Fencing::Nonce => match self.nonce_fence(key, now, evidence).await? {
                NonceFence::NeverSigned => {
                    keys::void_sent(&self.pool, key, "recovery: fenced before a request was signed with it")
                        .await
                        .map_err(store)?;
                    return Ok(Fence::NeverSent);
                }
                NonceFence::Fenced(fenced_at) => fenced_at + lag,
            },
        };
        Ok(if now > at { Fence::Closed(at) } else { Fence::Pending(at) })
    }

    /// The nonce fence of a sent key (a venue without a deadline on its requests): asked for
    /// in the key store (nothing is signed with the key after that), then — when a request was
    /// signed with nonce N — one call accepted with a nonce above N, after which the venue
    /// refuses that request whenever it arrives; `fenced_at` is the venue's time read after that
    /// call was accepted.
    pub(super) async fn nonce_fence(
        &self,
        key: &str,
        now: DateTime<Utc>,
        evidence: &mut Value,
    ) -> Result<NonceFence, VenueError> {
        let store = |e: qtg_store::StoreError| VenueError::NoAnswer(format!("the cex key store: {e}"));
        let Some(k) = keys::request_fence(&self.pool, key).await.map_err(store)? else {
            // No longer `sent`: voided meanwhile, nothing more can be signed or sent with it.
            return Ok(NonceFence::Fenced(now));
        };
        let Some(nonce) = k.nonce else {
            return Ok(NonceFence::NeverSigned);
        };
        evidence["nonce"] = json!(nonce);
        if let Some(at) = k.fenced_at {
            evidence["fenced_at"] = json!(at.to_rfc3339());
            return Ok(NonceFence::Fenced(at));
        }
        let above = self.venue.raise_nonce(u64::try_from(nonce).unwrap_or(0)).await?;
        let now = self.venue.server_time().await?;
        keys::note_fenced(&self.pool, key, now).await.map_err(store)?;
        tracing::info!(
            idempotency_key = key,
            nonce,
            fence_nonce = above,
            "nonce fence: a call above the request's nonce was accepted; the request can no longer act"
        );
        evidence["fenced_at"] = json!(now.to_rfc3339());
        evidence["fence_nonce"] = json!(above);
        Ok(NonceFence::Fenced(now))
    }

    /// No withdrawal matches. Conclusive (FAILED, key voided) when the key never left, or
    /// once the venue's time is past its `submit_by` + skew + the history lag; until then —
    /// and past the lookback window without that proof — the runbook's C2 path.
    pub(super) async fn no_match(
        &self,
        ctx: &ExecutionContext,
        key: &str,
        mut evidence: Value,
        now: DateTime<Utc>,
        lookback_closed: bool,
    ) -> Result<SubmitOutcome, VenueError> {
        let store = |e: qtg_store::StoreError| VenueError::NoAnswer(format!("the cex key store: {e}"));
        let fence_at = match self.fence(ctx, key, now, &mut evidence).await? {
            Fence::NeverSent => return Ok(self.never_sent(key, evidence)),
            Fence::Pending(at) => at,
            Fence::Closed(at) => {
                if keys::void_sent(&self.pool, key, "recovery: absent at the venue after its deadline")
                    .await
                    .map_err(store)?
                {
                    tracing::info!(
                        idempotency_key = key, venue_time = %now,
                        "no withdrawal and the key's deadline has passed at the venue: voided, FAILED"
                    );
                    evidence["fence_at"] = json!(at.to_rfc3339());
                    evidence["outcome"] = json!("absent_fenced");
                    let mut r = self.failed(
                        qtg_core::codes::CEX_WITHDRAWAL_NOT_FOUND,
                        format!(
                            "the venue has no withdrawal for {key} and its time {now} is past the request's \
                             deadline; the key is void"
                        ),
                    );
                    r.provider_refs.insert(RECONCILIATION.into(), evidence);
                    return Ok(r);
                }
                at
            }
        };
        evidence["fence_at"] = json!(fence_at.to_rfc3339());
        evidence["outcome"] = json!("no_match");
        let mut r = self.result(AfterSubmit::Unknown);
        r.error_code = Some(qtg_core::codes::RECONCILIATION_NO_MATCH.into());
        if lookback_closed {
            r.provider_refs.insert(MANUAL_REVIEW_REQUIRED.into(), json!("reconciliation_no_match"));
            r.error_detail =
                Some("no withdrawal matches and the lookback window is closed; a person decides (runbook C2)".into());
        } else {
            let wait = (fence_at - now).num_milliseconds() as f64 / 1000.0;
            r.retry_after_seconds = Some(wait.clamp(1.0, 60.0));
            r.error_detail =
                Some("0 matches: the request may still reach the venue until its deadline; recovery asks again".into());
        }
        r.provider_refs.insert(RECONCILIATION.into(), evidence);
        Ok(r)
    }

    /// The attempt's key never left (it is void now): FAILED, nothing moved for it — a
    /// withdrawal of the same shape at the venue is someone else's.
    fn never_sent(&self, key: &str, mut evidence: Value) -> SubmitOutcome {
        tracing::info!(idempotency_key = key, "the key never left: voided, FAILED");
        evidence["outcome"] = json!("absent_never_sent");
        let mut r = self.failed(
            qtg_core::codes::CEX_WITHDRAWAL_NOT_SENT,
            "the venue has no withdrawal of this key and it was never sent (a withdrawal of the same shape is \
             someone else's); the key is void",
        );
        r.provider_refs.insert(RECONCILIATION.into(), evidence);
        r
    }
}
