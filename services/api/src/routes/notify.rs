//! Telling people (admin): notification channels — Slack- or Teams-compatible incoming
//! webhooks, signed generic webhooks, e-mail over SMTP — and the routes that send events to
//! them; operators read what was notified and how each delivery went. A channel's secret (a
//! chat webhook's URL, a signing secret, an SMTP password) is shown at most once, when qtg
//! generated it, and never again.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qtg_engine::callbacks::{Scheme, WebhookSecret};
use qtg_store::notify::{Channel, NewChannel, NewRoute, NotificationView, Route};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{
    parse_time_cursor, plain, required_reason, time_cursor, Admin, Body, ChannelId, ListQuery, NotificationId,
    Operator, Page, PageQuery, Params, RouteId, TimePageQuery,
};
use crate::AppState;

/// SMTP settings of an e-mail channel.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SmtpBody {
    /// The relay's host name or address
    #[schema(min_length = 1, max_length = 253)]
    host: String,
    /// 587 when absent (465 with tls: tls)
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default)]
    port: Option<u16>,
    /// `starttls` (the default: STARTTLS required), `tls` (implicit TLS) or `none` (only without
    /// credentials)
    #[serde(default)]
    tls: Option<String>,
    /// The sender, e.g. `qtg <qtg@example.com>`
    #[schema(min_length = 3, max_length = 320)]
    from: String,
    /// Recipients (1-50)
    #[schema(min_items = 1, max_items = 50)]
    to: Vec<String>,
    /// AUTH user name; needs password
    #[serde(default)]
    #[schema(max_length = 256)]
    username: Option<String>,
    /// AUTH password (never shown again)
    #[serde(default)]
    #[schema(max_length = 1024)]
    password: Option<String>,
    /// A PEM root certificate to trust besides the system's (a private relay)
    #[serde(default)]
    #[schema(max_length = 20000)]
    ca_pem: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateChannelBody {
    #[schema(min_length = 1, max_length = 128)]
    name: String,
    /// `slack`, `teams`, `webhook` or `email`
    kind: String,
    /// slack / teams: the incoming webhook's URL (a credential: never shown again); webhook:
    /// where to POST (shown with credentials masked)
    #[serde(default)]
    #[schema(max_length = 2048)]
    url: Option<String>,
    /// webhook: `v3` (the default) or `standard_webhooks`
    #[serde(default)]
    signature: Option<String>,
    /// webhook: the signing secret (v3: 16-256 characters; standard_webhooks: whsec_ secrets,
    /// several during a rotation). Generated when absent, and then shown once
    #[serde(default)]
    #[schema(max_length = 1024)]
    secret: Option<String>,
    /// email
    #[serde(default)]
    smtp: Option<SmtpBody>,
    /// Messages a minute at most (1-6000, default 30); what waits goes later, as a digest
    #[serde(default)]
    #[schema(minimum = 1, maximum = 6000)]
    rate_per_minute: Option<i32>,
}

/// A channel, and its secret when qtg generated it (shown this once).
#[derive(Serialize, utoipa::ToSchema)]
pub struct ChannelCreated {
    #[serde(flatten)]
    channel: Channel,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

/// What a channel is made of: its kind, what may be shown, its secret, and a generated secret
/// to show once.
struct Parsed {
    config: Value,
    secret: Option<String>,
    generated: bool,
}

impl CreateChannelBody {
    fn parse(&self, s: &AppState) -> Result<Parsed, ApiError> {
        plain("name", &self.name, 128)?;
        let cb = &s.engine.settings.callbacks;
        let url = |what: &str| -> Result<String, ApiError> {
            let u = self.url.as_deref().ok_or_else(|| ApiError::validation(format!("a {what} channel needs url")))?;
            qtg_engine::callbacks::check_url_syntax(u, cb.allow_private, &cb.allowed_hosts)
                .map_err(|e| ApiError::validation(format!("url: {e}")))?;
            Ok(u.to_string())
        };
        let none_of = |fields: &[(&str, bool)]| match fields.iter().find(|f| f.1) {
            Some((name, _)) => Err(ApiError::validation(format!("{name} is not for a {} channel", self.kind))),
            None => Ok(()),
        };
        match self.kind.as_str() {
            "slack" | "teams" => {
                none_of(&[
                    ("signature", self.signature.is_some()),
                    ("secret", self.secret.is_some()),
                    ("smtp", self.smtp.is_some()),
                ])?;
                let u = url("chat")?;
                let host = qtg_core::urls::Parts::of(&u).map(|p| p.host().to_string()).unwrap_or_default();
                // The URL's path is the credential: only its host is ever shown.
                Ok(Parsed { config: json!({"url_host": host}), secret: Some(u), generated: false })
            }
            "webhook" => {
                none_of(&[("smtp", self.smtp.is_some())])?;
                let u = url("webhook")?;
                let scheme = Scheme::parse(self.signature.as_deref().unwrap_or("v3"))
                    .map_err(|e| ApiError::validation(format!("signature: {e}")))?;
                let (secret, generated) = match (&self.secret, scheme) {
                    (Some(sec), Scheme::V3) => {
                        if !(16..=256).contains(&sec.chars().count()) {
                            return Err(ApiError::validation("secret must be 16-256 characters"));
                        }
                        (sec.clone(), false)
                    }
                    (Some(sec), Scheme::StandardWebhooks) => {
                        WebhookSecret::parse_list(sec).map_err(|e| ApiError::validation(format!("secret: {e}")))?;
                        (sec.clone(), false)
                    }
                    (None, Scheme::V3) => (format!("qtgnotify_{}", Uuid::new_v4().simple()), true),
                    (None, Scheme::StandardWebhooks) => (WebhookSecret::generate(), true),
                };
                // Sent to as given; shown with its credentials masked (`Channel::masked`).
                Ok(Parsed { config: json!({"url": u, "signature": scheme.as_str()}), secret: Some(secret), generated })
            }
            "email" => {
                none_of(&[
                    ("url", self.url.is_some()),
                    ("signature", self.signature.is_some()),
                    ("secret", self.secret.is_some()),
                ])?;
                let smtp = self.smtp.as_ref().ok_or_else(|| ApiError::validation("an email channel needs smtp"))?;
                smtp.parse().map(|(config, password)| Parsed { config, secret: password, generated: false })
            }
            other => Err(ApiError::validation(format!("kind must be slack, teams, webhook or email, not {other:?}"))),
        }
    }
}

impl SmtpBody {
    fn parse(&self) -> Result<(Value, Option<String>), ApiError> {
        plain("smtp.host", &self.host, 253)?;
        if self.host.contains(|c: char| c.is_whitespace() || c == '/' || c == '@') {
            return Err(ApiError::validation("smtp.host must be a host name or address"));
        }
        let tls = self.tls.as_deref().unwrap_or("starttls");
        if !matches!(tls, "starttls" | "tls" | "none") {
            return Err(ApiError::validation("smtp.tls must be starttls, tls or none"));
        }
        let address = |field: &str, v: &str| -> Result<(), ApiError> {
            plain(field, v, 320)?;
            if !v.contains('@') {
                return Err(ApiError::validation(format!("{field} must be an e-mail address")));
            }
            Ok(())
        };
        address("smtp.from", &self.from)?;
        if self.to.is_empty() || self.to.len() > 50 {
            return Err(ApiError::validation("smtp.to must name 1 to 50 recipients"));
        }
        for to in &self.to {
            address("smtp.to", to)?;
        }
        match (&self.username, &self.password) {
            (Some(_), None) | (None, Some(_)) => {
                return Err(ApiError::validation("smtp.username and smtp.password go together"));
            }
            (Some(_), Some(_)) if tls == "none" => {
                return Err(ApiError::validation("credentials are never sent without TLS: use starttls or tls"));
            }
            _ => {}
        }
        if let Some(u) = &self.username {
            plain("smtp.username", u, 256)?;
        }
        if let Some(pem) = &self.ca_pem {
            if !pem.contains("-----BEGIN CERTIFICATE-----") || pem.len() > 20_000 {
                return Err(ApiError::validation("smtp.ca_pem must be a PEM certificate"));
            }
        }
        let mut config = Map::new();
        config.insert("host".into(), json!(self.host));
        config.insert("port".into(), json!(self.port.unwrap_or(if tls == "tls" { 465 } else { 587 })));
        config.insert("tls".into(), json!(tls));
        config.insert("from".into(), json!(self.from));
        config.insert("to".into(), json!(self.to));
        if let Some(u) = &self.username {
            config.insert("username".into(), json!(u));
        }
        if let Some(pem) = &self.ca_pem {
            config.insert("ca_pem".into(), json!(pem));
        }
        Ok((Value::Object(config), self.password.clone()))
    }
}

#[utoipa::path(
    post,
    path = "/v3/notification-channels",
    summary = "Create a notification channel (slack, teams, webhook or email); its secret is never shown again \
               (a generated webhook secret is shown in this answer only)",
    description = "Role: admin.",
    request_body = CreateChannelBody,
    responses((status = 201, description = "the channel", body = ChannelCreated)),
)]
pub async fn create_channel(
    State(s): State<AppState>,
    Admin(who): Admin,
    body: Body<CreateChannelBody>,
) -> Result<(StatusCode, Json<ChannelCreated>), ApiError> {
    let b = body.value;
    let p = b.parse(&s)?;
    let rate = b.rate_per_minute.unwrap_or(30);
    if !(1..=6000).contains(&rate) {
        return Err(ApiError::validation("rate_per_minute must be between 1 and 6000"));
    }
    let channel = s
        .engine
        .create_channel(
            &who.name,
            &NewChannel {
                id: Uuid::new_v4(),
                name: &b.name,
                kind: &b.kind,
                config: &p.config,
                secret: p.secret.as_deref(),
                rate_per_minute: rate,
                created_by: &who.name,
            },
        )
        .await?;
    let secret = if p.generated { p.secret } else { None };
    Ok((StatusCode::CREATED, Json(ChannelCreated { channel: channel.masked(), secret })))
}

#[utoipa::path(
    get,
    path = "/v3/notification-channels",
    summary = "Notification channels (never their secrets)",
    description = "Role: operator.",
    params(PageQuery),
    responses((status = 200, description = "channels", body = Page<Channel>)),
)]
pub async fn list_channels(
    State(s): State<AppState>,
    _: Operator,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<Channel>>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::notify::channels(&mut conn).await?.into_iter().map(Channel::masked).collect();
    Page::of_roster(items, |c: &Channel| c.name.clone(), q)
}

#[utoipa::path(
    delete,
    path = "/v3/notification-channels/{id}",
    summary = "Delete a notification channel, its routes and its deliveries",
    description = "Role: admin.",
    params(("id" = uuid::Uuid, Path, description = "the channel id")),
    responses((status = 200, description = "the deleted channel", body = Channel)),
)]
pub async fn delete_channel(
    State(s): State<AppState>,
    Admin(who): Admin,
    ChannelId(id): ChannelId,
) -> Result<Json<Channel>, ApiError> {
    Ok(Json(s.engine.delete_channel(&who.name, id).await?.masked()))
}

/// Quiet hours, UTC.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuietHours {
    /// `HH:MM` UTC
    #[schema(pattern = "^[0-2][0-9]:[0-5][0-9]$")]
    start: String,
    /// `HH:MM` UTC (may be before start: the window wraps midnight)
    #[schema(pattern = "^[0-2][0-9]:[0-5][0-9]$")]
    end: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRouteBody {
    channel_id: Uuid,
    /// Event kinds (none: every kind): approval_needed, movement_manual_intervention,
    /// movement_waiting_manual_action, node_unknown, capital_transfer_attention, drift,
    /// callback_dlq, worker_stale, executor_paused, venue_withdrawal_unexplained
    #[serde(default)]
    event_kinds: Vec<String>,
    /// Template keys (none: every template, and events of no template)
    #[serde(default)]
    templates: Vec<String>,
    /// `info` (the default), `warning` or `critical`
    #[serde(default)]
    min_severity: Option<String>,
    /// approval_needed goes through this route only when this principal may give the approval
    #[serde(default)]
    #[schema(max_length = 128)]
    approver: Option<String>,
    /// approval_needed goes through this route only when a holder of this role (approver,
    /// operator or admin) may give the approval; not with approver
    #[serde(default)]
    approver_role: Option<String>,
    /// Below critical, deliveries wait for the end of these hours
    #[serde(default)]
    quiet_hours: Option<QuietHours>,
    /// Deliveries wait for the next multiple of this many minutes (UTC) and go as one message
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1440)]
    digest_minutes: Option<i32>,
}

fn minute_of_day(field: &str, v: &str) -> Result<i32, ApiError> {
    qtg_core::policy::minutes(v)
        .map(i32::from)
        .ok_or_else(|| ApiError::validation(format!("{field} must be HH:MM (UTC)")))
}

#[utoipa::path(
    post,
    path = "/v3/notification-routes",
    summary = "Route events (kind, template, severity; approval_needed to who may approve) to a channel, with \
               optional quiet hours and digest",
    description = "Role: admin.",
    request_body = CreateRouteBody,
    responses((status = 201, description = "the route", body = Route)),
)]
pub async fn create_route(
    State(s): State<AppState>,
    Admin(who): Admin,
    body: Body<CreateRouteBody>,
) -> Result<(StatusCode, Json<Route>), ApiError> {
    let b = body.value;
    for k in &b.event_kinds {
        if !qtg_engine::notify::KINDS.contains(&k.as_str()) {
            return Err(ApiError::validation(format!(
                "event_kinds: {k:?} is not one of {}",
                qtg_engine::notify::KINDS.join(", ")
            )));
        }
    }
    for t in &b.templates {
        plain("templates", t, 128)?;
    }
    let severity = b.min_severity.as_deref().unwrap_or("info");
    if !matches!(severity, "info" | "warning" | "critical") {
        return Err(ApiError::validation("min_severity must be info, warning or critical"));
    }
    if let Some(a) = &b.approver {
        plain("approver", a, 128)?;
    }
    match (&b.approver, b.approver_role.as_deref()) {
        (Some(_), Some(_)) => {
            return Err(ApiError::validation("a route names an approver or an approver_role, not both"))
        }
        (_, Some(r)) if !matches!(r, "approver" | "operator" | "admin") => {
            return Err(ApiError::validation("approver_role must be approver, operator or admin"));
        }
        _ => {}
    }
    let quiet = match &b.quiet_hours {
        None => None,
        Some(q) => {
            let (start, end) =
                (minute_of_day("quiet_hours.start", &q.start)?, minute_of_day("quiet_hours.end", &q.end)?);
            if start == end {
                return Err(ApiError::validation("quiet_hours.start and end must differ"));
            }
            Some((start, end))
        }
    };
    if b.digest_minutes.is_some_and(|d| !(1..=1440).contains(&d)) {
        return Err(ApiError::validation("digest_minutes must be between 1 and 1440"));
    }
    let route = s
        .engine
        .create_route(
            &who.name,
            &NewRoute {
                id: Uuid::new_v4(),
                channel_id: b.channel_id,
                event_kinds: &b.event_kinds,
                templates: &b.templates,
                min_severity: severity,
                approver: b.approver.as_deref(),
                approver_role: b.approver_role.as_deref(),
                quiet,
                digest_minutes: b.digest_minutes,
                created_by: &who.name,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, Json(route)))
}

#[utoipa::path(
    get,
    path = "/v3/notification-routes",
    summary = "Notification routes",
    description = "Role: operator.",
    params(PageQuery),
    responses((status = 200, description = "routes", body = Page<Route>)),
)]
pub async fn list_routes(
    State(s): State<AppState>,
    _: Operator,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<Route>>, ApiError> {
    let mut conn = s.pool.acquire().await?;
    let items = qtg_store::notify::routes(&mut conn).await?;
    Page::of_roster(items, |r: &Route| time_cursor(r.created_at, r.id), q)
}

#[utoipa::path(
    delete,
    path = "/v3/notification-routes/{id}",
    summary = "Delete a notification route",
    description = "Role: admin.",
    params(("id" = uuid::Uuid, Path, description = "the route id")),
    responses((status = 200, description = "the deleted route", body = Route)),
)]
pub async fn delete_route(
    State(s): State<AppState>,
    Admin(who): Admin,
    RouteId(id): RouteId,
) -> Result<Json<Route>, ApiError> {
    Ok(Json(s.engine.delete_route(&who.name, id).await?))
}

#[utoipa::path(
    get,
    path = "/v3/notifications",
    summary = "What was notified, newest first, each with its deliveries (channel, status, attempts, last error)",
    description = "Role: operator. Query: kind.",
    params(TimePageQuery, ("kind" = Option<String>, Query, description = "one event kind")),
    responses((status = 200, description = "notifications", body = Page<NotificationView>)),
)]
pub async fn list_notifications(
    State(s): State<AppState>,
    _: Operator,
    Params(q): Params<ListQuery>,
) -> Result<Json<Page<NotificationView>>, ApiError> {
    let q = q.allow(&["kind"])?;
    let kind = q.kind.as_deref().filter(|k| !k.is_empty());
    if kind.is_some_and(|k| !qtg_engine::notify::KINDS.contains(&k)) {
        return Err(ApiError::validation("kind must be one of the event kinds"));
    }
    let limit = q.limit()?;
    let after = q.cursor.as_deref().map(parse_time_cursor).transpose()?;
    let mut conn = s.pool.acquire().await?;
    let rows = qtg_store::notify::list(&mut conn, kind, after, limit + 1).await?;
    Ok(Page::from_rows(rows, limit, |n| time_cursor(n.created_at, n.id)))
}

/// Why a dead-lettered notification is sent again.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedeliverBody {
    /// 1-2000 characters, recorded in the audit trail
    #[schema(min_length = 1, max_length = 2000)]
    reason: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Redelivered {
    /// The channels whose dead-lettered delivery goes again
    channels: Vec<Uuid>,
}

#[utoipa::path(
    post,
    path = "/v3/notifications/{id}/actions/redeliver",
    summary = "Send a notification's dead-lettered deliveries again (attempts from zero); 409 when none is \
               dead-lettered",
    description = "Role: operator.",
    request_body = RedeliverBody,
    params(("id" = uuid::Uuid, Path, description = "the notification id")),
    responses((status = 200, description = "the channels sent to again", body = Redelivered)),
)]
pub async fn redeliver_notification(
    State(s): State<AppState>,
    Operator(who): Operator,
    NotificationId(id): NotificationId,
    body: Body<RedeliverBody>,
) -> Result<Json<Redelivered>, ApiError> {
    let reason = required_reason(&body.value.reason)?;
    let channels = s.engine.redeliver_notification(&who.name, id, reason).await?;
    Ok(Json(Redelivered { channels }))
}
