//! notification_dispatcher: tells people what waits for them. The `notifications` outbox is
//! written in the transaction of each event (database triggers, migration 0032) or, for
//! conditions that are a matter of time (a node UNKNOWN past its grace, a stale worker), by
//! this worker's scan, once per event (`dedupe_key`). Each tick then:
//! 1. scans those conditions;
//! 2. routes new notifications to the channels whose rules match (one delivery per
//!    notification and channel, due now, after quiet hours or at a digest boundary);
//! 3. leases channels with something due (one message in flight per channel across every
//!    replica, within the channel's rate per minute) and sends each on a task of its own,
//!    outside any transaction, bounded by the send deadline — what is due for a chat or mail
//!    channel at once goes as one message (a digest); a webhook gets one POST per notification;
//! 4. records each outcome by the lease (sent; else retried with backoff, dead-lettered after
//!    `MG_NOTIFY_MAX_ATTEMPTS`), audited in the same statement.
//!
//! A channel that is slow or down holds its own lease and one slot for at most the deadline;
//! the others are leased and sent meanwhile. Channel secrets (a chat webhook's URL, a signing
//! secret, an SMTP password) are read only to send and never logged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use qtg_core::policy::{ApproverGroup, Policy};
use qtg_core::text::same_principal;
use qtg_store::notify::{self, Leased, Taken};
use qtg_wire_auth::standard::{Scheme, WebhookSecret};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::callbacks::{post_guarded, Failure};
use crate::movements::{finish, OpError};
use crate::{Engine, Result};

/// Notifications routed per tick at most.
const ROUTE_BATCH: i64 = 200;
/// Deliveries of a chat or mail channel sent as one message at most.
const DIGEST_MAX: i64 = 25;
/// A heartbeat older than this is a worker gone, no longer stale (as `GET /v3/workers`).
const GONE: Duration = Duration::from_secs(3600);

/// The event kinds a route may name.
pub const KINDS: &[&str] = &[
    "approval_needed",
    "movement_manual_intervention",
    "movement_waiting_manual_action",
    "node_unknown",
    "capital_transfer_attention",
    "drift",
    "callback_dlq",
    "worker_stale",
    "executor_paused",
    "venue_withdrawal_unexplained",
];

#[derive(Clone)]
pub struct NotifySettings {
    /// `MG_NOTIFY_MAX_ATTEMPTS` (20): attempts of a delivery before it is dead-lettered (with
    /// the backoff doubling to 10 minutes, about two hours of a channel's outage).
    pub max_attempts: i32,
    /// `MG_NOTIFY_TIMEOUT_SECONDS` (10): one message's deadline (connect to answer).
    pub timeout: Duration,
    /// `MG_NOTIFY_UNKNOWN_GRACE_SECONDS` (300): a node UNKNOWN longer than this is told.
    pub unknown_grace: Duration,
    /// `MG_WORKER_STALE_SECONDS`: a heartbeat older than this is a stale worker.
    pub worker_stale: Duration,
    /// `MG_NOTIFY_RETENTION_SECONDS` (30 days): notifications whose deliveries are all final
    /// are deleted after this.
    pub retention: Duration,
    /// `MG_NOTIFY_LINK_BASE_URL`: the console's base URL, for links in messages.
    pub link_base: Option<String>,
    /// `MG_NOTIFY_MAX_IN_FLIGHT` (8): messages in flight at once per process.
    pub slots: Arc<Semaphore>,
    pub capacity: u32,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings::new(8)
    }
}

impl NotifySettings {
    pub fn new(max_in_flight: u32) -> NotifySettings {
        let capacity = max_in_flight.max(1);
        NotifySettings {
            max_attempts: 20,
            timeout: Duration::from_secs(10),
            unknown_grace: Duration::from_secs(300),
            worker_stale: Duration::from_secs(30),
            retention: Duration::from_secs(30 * 86_400),
            link_base: None,
            slots: Arc::new(Semaphore::new(capacity as usize)),
            capacity,
        }
    }

    /// A channel's lease: the send's deadline and as much again, plus margin.
    fn lease_seconds(&self) -> f64 {
        2.0 * self.timeout.as_secs_f64() + 5.0
    }
}

impl std::fmt::Debug for NotifySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifySettings")
            .field("max_attempts", &self.max_attempts)
            .field("timeout", &self.timeout)
            .field("unknown_grace", &self.unknown_grace)
            .field("retention", &self.retention)
            .field("link_base", &self.link_base)
            .field("max_in_flight", &self.capacity)
            .finish()
    }
}

impl Engine {
    /// One tick: scan, route, lease the channels with something due (as many as there are
    /// free send slots) and send each on its own task. Answers the notifications routed plus
    /// the messages started.
    pub async fn notify_tick(&self) -> Result<usize> {
        let s = &self.settings.notify;
        let mut conn = self.pool.acquire().await?;
        let scanned = notify::scan_conditions(
            &mut conn,
            s.unknown_grace.as_secs_f64(),
            s.worker_stale.as_secs_f64(),
            GONE.as_secs_f64(),
        )
        .await?;
        if scanned > 0 {
            tracing::info!(
                notifications = scanned,
                "conditions to tell people found (UNKNOWN past grace, stale workers)"
            );
        }
        let deleted = notify::delete_older_than(&mut conn, s.retention.as_secs_f64()).await?;
        if deleted > 0 {
            tracing::info!(deleted, "notifications past the retention deleted");
        }
        let (evaluated, candidates) = notify::approver_candidates(&mut conn, ROUTE_BATCH).await?;
        let eligible = if candidates.is_empty() {
            Vec::new()
        } else {
            let keys = notify::active_principals(&mut conn).await?;
            let mut policies: BTreeMap<i32, Option<Policy>> = BTreeMap::new();
            let mut eligible = Vec::new();
            for c in &candidates {
                let policy = match c.policy_version {
                    None => None,
                    Some(v) => {
                        if let std::collections::btree_map::Entry::Vacant(e) = policies.entry(v) {
                            let doc = qtg_store::policy::get_version(&mut conn, v, false).await?;
                            e.insert(doc.and_then(|d| Policy::from_json(&d.document).ok()));
                        }
                        policies.get(&v).and_then(Option::as_ref)
                    }
                };
                if may_approve(c, policy, &keys) {
                    eligible.push((c.notification_id, c.route_id));
                }
            }
            eligible
        };
        let (routed, deliveries) = notify::route(&mut conn, ROUTE_BATCH, s.max_attempts, &evaluated, &eligible).await?;
        if routed > 0 {
            tracing::info!(notifications = routed, deliveries, "notifications routed");
        }
        let mut permits = Vec::new();
        while let Ok(p) = s.slots.clone().try_acquire_owned() {
            permits.push(p);
            if permits.len() >= s.capacity as usize {
                break;
            }
        }
        if permits.is_empty() {
            return Ok(routed as usize);
        }
        let leased = notify::lease_channels(&mut conn, permits.len() as i64, s.lease_seconds()).await?;
        drop(conn);
        let started = leased.len();
        for (channel, permit) in leased.into_iter().zip(permits) {
            let engine = self.clone();
            tokio::spawn(async move {
                engine.send_channel(channel).await;
                drop(permit);
            });
        }
        Ok(routed as usize + started)
    }

    /// Waits for the messages in flight to record their outcome (at shutdown).
    pub async fn finish_notifications(&self) {
        let s = &self.settings.notify;
        let _all = s.slots.acquire_many(s.capacity).await;
    }

    /// Takes what is due for a leased channel, sends it as one message (a webhook: one POST per
    /// notification) and records the outcome by the lease.
    async fn send_channel(&self, channel: Leased) {
        let s = &self.settings.notify;
        let limit = if channel.kind == "webhook" { 1 } else { DIGEST_MAX };
        let taken = async {
            let mut conn = self.pool.acquire().await?;
            notify::take(&mut conn, channel.channel_id, channel.token, limit, s.lease_seconds()).await
        }
        .await;
        let taken = match taken {
            Ok(t) if t.is_empty() => {
                let _ = self.release_channel(&channel).await;
                return;
            }
            Ok(t) => t,
            Err(e) => {
                tracing::error!(channel = %channel.name, error = %e, "could not take the channel's deliveries");
                let _ = self.release_channel(&channel).await;
                return;
            }
        };
        let outcome = match tokio::time::timeout(s.timeout, self.send_message(&channel, &taken)).await {
            Ok(r) => r,
            Err(_) => Err(Failure::new(format!("no answer within {:?}", s.timeout))),
        };
        let ids: Vec<Uuid> = taken.iter().map(|t| t.id).collect();
        let notifications: Vec<String> = taken.iter().map(|t| t.notification_id.to_string()).collect();
        let (error, retry_after) = match &outcome {
            Ok(()) => (None, None),
            Err(f) => (Some(f.error.as_str()), f.retry_after),
        };
        let recorded = async {
            let mut conn = self.pool.acquire().await?;
            notify::record(&mut conn, channel.channel_id, channel.token, &ids, error, retry_after).await
        }
        .await;
        match recorded {
            Ok(rows) => {
                let dlq = rows.iter().filter(|r| r.1 == "dlq").count();
                for (_, status) in &rows {
                    qtg_telemetry::sink().notification_delivery(match status.as_str() {
                        "sent" => "delivered",
                        "dlq" => "dlq",
                        _ => "retry",
                    });
                }
                match &outcome {
                    Ok(()) => tracing::info!(
                        channel = %channel.name, kind = %channel.kind, notifications = ?notifications,
                        messages = 1, "notification delivered"
                    ),
                    Err(f) => tracing::warn!(
                        channel = %channel.name, kind = %channel.kind, notifications = ?notifications,
                        dead_lettered = dlq,
                        error = %f.error, "notification delivery failed; retried with backoff"
                    ),
                }
            }
            Err(e) => tracing::error!(
                channel = %channel.name, error = %e,
                "could not record a notification's outcome; it is sent again after the lease"
            ),
        }
    }

    async fn release_channel(&self, channel: &Leased) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        notify::release(&mut conn, channel.channel_id, channel.token).await
    }

    async fn send_message(&self, channel: &Leased, taken: &[Taken]) -> std::result::Result<(), Failure> {
        let s = &self.settings.notify;
        match channel.kind.as_str() {
            "slack" | "teams" => {
                let url = channel.secret.as_deref().ok_or_else(|| Failure::new("the channel has no webhook URL"))?;
                let body = json!({"text": chat_text(taken, s.link_base.as_deref(), channel.kind == "slack")});
                self.post(url, serde_json::to_vec(&body).unwrap_or_default(), Vec::new()).await
            }
            "webhook" => {
                let url = channel.config.get("url").and_then(Value::as_str).ok_or_else(|| Failure::new("no url"))?;
                let t = taken.first().ok_or_else(|| Failure::new("nothing to send"))?;
                let body = serde_json::to_vec(&webhook_body(t)).unwrap_or_default();
                let secret = channel.secret.as_deref().ok_or_else(|| Failure::new("the channel has no secret"))?;
                let now = chrono::Utc::now().timestamp();
                let id = t.notification_id.to_string();
                let scheme = channel.config.get("signature").and_then(Value::as_str).unwrap_or("v3");
                let headers = match Scheme::parse(scheme).map_err(Failure::new)? {
                    // The notification's id is its nonce: the same on every attempt (receivers dedupe).
                    Scheme::V3 => qtg_wire_auth::signature_headers(secret.as_bytes(), &now.to_string(), &id, &body),
                    Scheme::StandardWebhooks => {
                        let secrets = WebhookSecret::parse_list(secret).map_err(Failure::new)?;
                        qtg_wire_auth::standard::headers(&secrets, &id, now, &body)
                    }
                };
                self.post(url, body, headers).await
            }
            "email" => send_mail(channel, taken, s).await,
            other => Err(Failure::new(format!("unknown channel kind {other:?}"))),
        }
    }

    /// POSTs JSON to `url` through the callbacks' destination guard (`MG_CALLBACK_ALLOW_PRIVATE`,
    /// `MG_CALLBACK_ALLOWED_HOSTS`). The URL is never logged nor recorded (it may be a
    /// credential).
    async fn post(
        &self,
        url: &str,
        body: Vec<u8>,
        headers: Vec<(&'static str, String)>,
    ) -> std::result::Result<(), Failure> {
        post_guarded(&self.settings.callbacks, url, self.settings.notify.timeout, headers, body).await
    }

    // ---- administration (admin role, audited in the same transaction) --------------------------

    /// Creates a channel. Its secret is stored and never shown again.
    pub async fn create_channel(&self, actor: &str, c: &notify::NewChannel<'_>) -> Result<notify::Channel, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let channel = notify::create_channel(&mut tx, c)
                .await?
                .ok_or_else(|| OpError::Conflict(format!("a notification channel named {:?} exists", c.name)))?;
            let config = channel.clone().masked().config;
            qtg_store::audit::AuditRecord::new(
                actor,
                "notification.channel.create",
                "notification_channel",
                channel.id,
            )
            .data(json!({"name": channel.name, "kind": channel.kind, "config": config,
                             "secret_set": channel.secret_set, "rate_per_minute": channel.rate_per_minute}))
            .record(&mut tx)
            .await?;
            tracing::info!(channel = %channel.name, kind = %channel.kind, actor, "notification channel created");
            Ok(channel)
        }
        .await;
        finish(tx, res).await
    }

    pub async fn delete_channel(&self, actor: &str, id: Uuid) -> Result<notify::Channel, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let channel =
                notify::delete_channel(&mut tx, id).await?.ok_or(OpError::NotFound("notification channel"))?;
            qtg_store::audit::AuditRecord::new(actor, "notification.channel.delete", "notification_channel", id)
                .data(json!({"name": channel.name, "kind": channel.kind}))
                .record(&mut tx)
                .await?;
            tracing::info!(channel = %channel.name, actor, "notification channel deleted");
            Ok(channel)
        }
        .await;
        finish(tx, res).await
    }

    /// Sends a notification's dead-lettered deliveries again (operator), audited with `reason`.
    /// Answers the channels; `Conflict` when none of its deliveries is dead-lettered.
    pub async fn redeliver_notification(&self, actor: &str, id: Uuid, reason: &str) -> Result<Vec<Uuid>, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let channels = notify::redeliver(&mut tx, id).await?.ok_or(OpError::NotFound("notification"))?;
            if channels.is_empty() {
                return Err(OpError::Conflict("none of this notification's deliveries is dead-lettered".into()));
            }
            qtg_store::audit::AuditRecord::new(actor, "notification.redeliver", "notification", id)
                .data(json!({"channels": channels, "reason": reason}))
                .record(&mut tx)
                .await?;
            tracing::info!(
                notification = %id, channels = channels.len(), actor,
                "dead-lettered notification sent again"
            );
            Ok(channels)
        }
        .await;
        finish(tx, res).await
    }

    pub async fn create_route(&self, actor: &str, r: &notify::NewRoute<'_>) -> Result<notify::Route, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let route = notify::create_route(&mut tx, r).await?.ok_or(OpError::NotFound("notification channel"))?;
            qtg_store::audit::AuditRecord::new(
                actor,
                "notification.route.create",
                "notification_channel",
                r.channel_id,
            )
            .data(serde_json::to_value(&route).unwrap_or(Value::Null))
            .record(&mut tx)
            .await?;
            Ok(route)
        }
        .await;
        finish(tx, res).await
    }

    pub async fn delete_route(&self, actor: &str, id: Uuid) -> Result<notify::Route, OpError> {
        let mut tx = self.pool.begin().await?;
        let res = async {
            let route = notify::delete_route(&mut tx, id).await?.ok_or(OpError::NotFound("notification route"))?;
            qtg_store::audit::AuditRecord::new(
                actor,
                "notification.route.delete",
                "notification_channel",
                route.channel_id,
            )
            .data(json!({"route_id": id}))
            .record(&mut tx)
            .await?;
            Ok(route)
        }
        .await;
        finish(tx, res).await
    }
}

/// Whether the route's approver may give the approval the notification asks for, as the
/// approval itself would judge it. A principal: not the movement's creator, not one who
/// approved already, an active key of approver rank or above, and — when a policy decided the
/// movement — a seat in one of its approver groups (named, through a named group of the policy,
/// or by role or above). A role (of approver rank or above): no policy decided it, or one of
/// its groups seats that role.
fn may_approve(c: &notify::ApproverCandidate, policy: Option<&Policy>, keys: &[(String, Vec<String>)]) -> bool {
    use qtg_core::policy::rank;
    let Some(created_by) = &c.created_by else { return false };
    let groups: Vec<ApproverGroup> =
        c.policy_groups.clone().and_then(|g| serde_json::from_value(g).ok()).unwrap_or_default();
    let seats = |principal: &str, role: &str| match policy {
        Some(p) => groups.iter().any(|g| p.is_member(g, principal, role)),
        // The version is unreadable: only a group naming the principal or its role seats them.
        None => groups.iter().any(|g| {
            g.principals.iter().any(|p| same_principal(p, principal))
                || g.role.as_deref().and_then(rank).is_some_and(|need| rank(role).is_some_and(|has| has >= need))
        }),
    };
    let (principal, role) = match (&c.approver, &c.approver_role) {
        (Some(p), _) => {
            if same_principal(p, created_by) || c.approved_by.iter().any(|a| same_principal(a, p)) {
                return false;
            }
            let role = keys
                .iter()
                .filter(|(k, _)| same_principal(k, p))
                .flat_map(|(_, roles)| roles.iter())
                .max_by_key(|r| rank(r))
                .map(String::as_str);
            (p.as_str(), role)
        }
        // No principal: a role is seated only by a group naming that role (or none at all).
        (None, Some(r)) => ("", Some(r.as_str())),
        (None, None) => return false,
    };
    let Some(role) = role.filter(|r| rank(r) >= rank("approver")) else { return false };
    groups.is_empty() || seats(principal, role)
}

/// The console's link to what a notification is about, when a base URL is set.
fn link(t: &Taken, base: Option<&str>) -> Option<String> {
    let base = base?.trim_end_matches('/');
    match (t.movement_id, t.kind.as_str()) {
        (Some(id), _) => Some(format!("{base}/console#/movements/{id}")),
        (None, "drift") => Some(format!("{base}/console#/drift")),
        (None, "worker_stale") => Some(format!("{base}/console#/workers")),
        (None, _) => Some(format!("{base}/console#/attention")),
    }
}

/// A chat message: one notification, or a digest of several. Slack's link syntax
/// (`<url|text>`) for Slack, Markdown for Teams.
fn chat_text(taken: &[Taken], base: Option<&str>, slack: bool) -> String {
    let line = |t: &Taken| {
        let head = format!("[{}] {}", t.severity.to_uppercase(), t.subject);
        match link(t, base) {
            Some(url) if slack => format!("{head} <{url}|open>"),
            Some(url) => format!("{head} [open]({url})"),
            None => head,
        }
    };
    match taken {
        [one] => format!("qtg: {}", line(one)),
        many => {
            let mut text = format!("qtg: {} notifications", many.len());
            for t in many {
                text.push_str("\n• ");
                text.push_str(&line(t));
            }
            text
        }
    }
}

/// A generic webhook's JSON body.
fn webhook_body(t: &Taken) -> Value {
    json!({
        "type": "qtg.notification",
        "id": t.notification_id,
        "kind": t.kind,
        "severity": t.severity,
        "subject": t.subject,
        "movement_id": t.movement_id,
        "template_key": t.template_key,
        "data": t.data,
        "created_at": t.created_at,
        "attempt": t.attempts,
    })
}

/// A mail's subject and plain-text body.
fn mail_text(taken: &[Taken], base: Option<&str>) -> (String, String) {
    let block = |t: &Taken| {
        let mut b = format!(
            "{}\nSeverity: {}\nKind: {}\nAt: {} UTC\n",
            t.subject,
            t.severity,
            t.kind,
            t.created_at.format("%Y-%m-%d %H:%M:%S")
        );
        if let Some(id) = t.movement_id {
            b.push_str(&format!("Movement: {id}\n"));
        }
        if let Some(url) = link(t, base) {
            b.push_str(&format!("Open: {url}\n"));
        }
        b.push_str(&format!("Details: {}\n", t.data));
        b
    };
    match taken {
        [one] => (format!("[qtg] {}", one.subject), block(one)),
        many => {
            (format!("[qtg] {} notifications", many.len()), many.iter().map(block).collect::<Vec<_>>().join("\n----\n"))
        }
    }
}

/// Sends one mail over SMTP: STARTTLS (required), implicit TLS or none, with AUTH when the
/// channel has a user name (never over a connection without TLS: refused when the channel is
/// made). `ca_pem` adds a trusted root for a private relay.
async fn send_mail(channel: &Leased, taken: &[Taken], s: &NotifySettings) -> std::result::Result<(), Failure> {
    use lettre::message::header::ContentType;
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

    let c = &channel.config;
    let text = |k: &str| c.get(k).and_then(Value::as_str);
    let host = text("host").ok_or_else(|| Failure::new("no SMTP host"))?.to_string();
    let implicit_tls = text("tls") == Some("tls");
    let port = c.get("port").and_then(Value::as_u64).unwrap_or(if implicit_tls { 465 } else { 587 }) as u16;
    qtg_executor::remote::install_tls_provider();
    let params = || {
        let mut b = TlsParameters::builder(host.clone());
        if let Some(pem) = text("ca_pem") {
            b = b.add_root_certificate(
                Certificate::from_pem(pem.as_bytes()).map_err(|e| Failure::new(format!("ca_pem: {e}")))?,
            );
        }
        b.build_rustls().map_err(|e| Failure::new(format!("TLS: {e}")))
    };
    let tls = match text("tls").unwrap_or("starttls") {
        "starttls" => Tls::Required(params()?),
        "tls" => Tls::Wrapper(params()?),
        "none" => Tls::None,
        other => return Err(Failure::new(format!("tls {other:?} is not starttls|tls|none"))),
    };
    let mut transport =
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&host).port(port).tls(tls).timeout(Some(s.timeout));
    if let Some(user) = text("username") {
        transport =
            transport.credentials(Credentials::new(user.to_string(), channel.secret.clone().unwrap_or_default()));
    }
    let (subject, body) = mail_text(taken, s.link_base.as_deref());
    let from = text("from").ok_or_else(|| Failure::new("no sender"))?;
    let mut message = Message::builder()
        .from(from.parse().map_err(|e| Failure::new(format!("from: {e}")))?)
        .subject(subject)
        .header(ContentType::TEXT_PLAIN);
    for to in c.get("to").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        message = message.to(to.parse().map_err(|e| Failure::new(format!("to: {e}")))?);
    }
    let message = message.body(body).map_err(|e| Failure::new(e.to_string()))?;
    transport.build().send(message).await.map_err(|e| Failure::new(format!("SMTP: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(kind: &str, subject: &str, movement: Option<Uuid>) -> Taken {
        Taken {
            id: Uuid::nil(),
            notification_id: Uuid::nil(),
            attempts: 1,
            kind: kind.into(),
            severity: "critical".into(),
            subject: subject.into(),
            movement_id: movement,
            template_key: None,
            data: json!({}),
            created_at: chrono::DateTime::from_timestamp(1_796_000_000, 0).unwrap(),
        }
    }

    /// The approver routes judge as the approval does: the creator, one who approved, a key
    /// below approver and a principal without a seat in the policy's groups are never told; a
    /// named group of the policy and a higher role seat them; a role route follows the groups.
    #[test]
    fn an_approver_route_tells_only_who_may_approve() {
        let policy = Policy::from_json(&json!({
            "groups": {"finance": ["erin"]},
            "rules": [{"name": "all", "action": {"type": "approve", "groups": [{"min": 1, "group": "finance"}]}}]
        }))
        .unwrap();
        let keys: Vec<(String, Vec<String>)> = [
            ("alice", "approver"),
            ("erin", "approver"),
            ("ops", "operator"),
            ("bot", "requester"),
            ("viewer", "viewer"),
        ]
        .iter()
        .map(|(p, r)| (p.to_string(), vec![r.to_string()]))
        .collect();
        let candidate = |approver: Option<&str>, role: Option<&str>, groups: Option<Value>, approved: &[&str]| {
            notify::ApproverCandidate {
                notification_id: Uuid::nil(),
                route_id: Uuid::nil(),
                approver: approver.map(str::to_string),
                approver_role: role.map(str::to_string),
                created_by: Some("bot".into()),
                policy_version: groups.as_ref().map(|_| 1),
                policy_groups: groups,
                approved_by: approved.iter().map(|a| a.to_string()).collect(),
            }
        };
        let no_policy = |p: &str| may_approve(&candidate(Some(p), None, None, &[]), None, &keys);
        assert!(no_policy("alice") && no_policy("ops") && no_policy("ALICE"));
        assert!(!no_policy("bot"), "the creator");
        assert!(!no_policy("viewer") && !no_policy("nobody"), "no approver key");
        assert!(!may_approve(&candidate(Some("alice"), None, None, &["alice"]), None, &keys), "approved already");
        let finance = json!([{"min": 1, "group": "finance"}]);
        let by_group =
            |p: &str| may_approve(&candidate(Some(p), None, Some(finance.clone()), &[]), Some(&policy), &keys);
        assert!(by_group("erin") && !by_group("alice"), "a seat through the policy's named group");
        let operators = json!([{"min": 1, "role": "operator"}]);
        let by_role = |p: Option<&str>, r: Option<&str>| {
            may_approve(&candidate(p, r, Some(operators.clone()), &[]), Some(&policy), &keys)
        };
        assert!(by_role(Some("ops"), None) && !by_role(Some("alice"), None), "operator or above");
        assert!(by_role(None, Some("admin")) && by_role(None, Some("operator")) && !by_role(None, Some("approver")));
        assert!(may_approve(&candidate(None, Some("approver"), None, &[]), None, &keys), "no policy: approvers");
    }

    #[test]
    fn one_message_or_a_digest_with_links() {
        let m = Uuid::from_u128(7);
        let one = [taken("approval_needed", "Approval needed: t 5 USDC", Some(m))];
        let text = chat_text(&one, Some("https://qtg.example/"), true);
        assert_eq!(
            text,
            format!("qtg: [CRITICAL] Approval needed: t 5 USDC <https://qtg.example/console#/movements/{m}|open>")
        );
        let two = [taken("drift", "Drift in evm:1", None), taken("worker_stale", "Worker x", None)];
        let text = chat_text(&two, None, false);
        assert!(text.starts_with("qtg: 2 notifications\n• [CRITICAL] Drift in evm:1\n• "), "{text}");
        let (subject, body) = mail_text(&two, Some("https://qtg.example"));
        assert_eq!(subject, "[qtg] 2 notifications");
        assert!(body.contains("Open: https://qtg.example/console#/drift") && body.contains("----"), "{body}");
    }
}
