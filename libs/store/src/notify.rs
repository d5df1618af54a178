//! notification_dispatcher's tables (migration 0032): channels and routes (admin), the
//! `notifications` outbox (written by triggers in the transaction of the event, or by the
//! scan of conditions that are a matter of time), one delivery per notification and channel,
//! and the channel lease that keeps one message of a channel in flight at a time.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::Result;

/// A channel as the API shows it: never its secret.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Channel {
    pub id: Uuid,
    pub name: String,
    /// `slack`, `teams`, `webhook` or `email`.
    pub kind: String,
    /// What may be shown (the secret is not in it).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config: Value,
    /// Whether a secret is held (it is never shown again).
    pub secret_set: bool,
    pub rate_per_minute: i32,
    pub enabled: bool,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

impl Channel {
    /// As shown anywhere (API, audit): a webhook's URL with its credentials masked.
    pub fn masked(mut self) -> Channel {
        if let Some(Value::String(u)) = self.config.get("url") {
            self.config["url"] = Value::String(qtg_core::urls::redact(u));
        }
        self
    }
}

/// A new channel.
pub struct NewChannel<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub kind: &'a str,
    pub config: &'a Value,
    pub secret: Option<&'a str>,
    pub rate_per_minute: i32,
    pub created_by: &'a str,
}

/// Inserts a channel; `None` when the name is taken.
pub async fn create_channel(conn: &mut PgConnection, c: &NewChannel<'_>) -> Result<Option<Channel>> {
    Ok(sqlx::query_as!(
        Channel,
        r#"INSERT INTO notification_channels (id, name, kind, config, secret, rate_per_minute, created_by)
           VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name) DO NOTHING
           RETURNING id, name, kind, config, secret IS NOT NULL AS "secret_set!", rate_per_minute, enabled,
                     created_by, created_at"#,
        c.id,
        c.name,
        c.kind,
        c.config,
        c.secret,
        c.rate_per_minute,
        c.created_by
    )
    .fetch_optional(&mut *conn)
    .await?)
}

pub async fn channels(conn: &mut PgConnection) -> Result<Vec<Channel>> {
    Ok(sqlx::query_as!(
        Channel,
        r#"SELECT id, name, kind, config, secret IS NOT NULL AS "secret_set!", rate_per_minute, enabled, created_by,
                  created_at
             FROM notification_channels ORDER BY name"#
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Deletes a channel with its routes and deliveries; `None` when there is none.
pub async fn delete_channel(conn: &mut PgConnection, id: Uuid) -> Result<Option<Channel>> {
    Ok(sqlx::query_as!(
        Channel,
        r#"DELETE FROM notification_channels WHERE id = $1
           RETURNING id, name, kind, config, secret IS NOT NULL AS "secret_set!", rate_per_minute, enabled,
                     created_by, created_at"#,
        id
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// A routing rule.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Route {
    pub id: Uuid,
    pub channel_id: Uuid,
    /// Empty: every kind.
    pub event_kinds: Vec<String>,
    /// Empty: every template (and events of no template).
    pub templates: Vec<String>,
    pub min_severity: String,
    /// `approval_needed` only when this principal may give the approval.
    pub approver: Option<String>,
    /// `approval_needed` only when a holder of this role may give it.
    pub approver_role: Option<String>,
    /// Quiet hours, minutes of the UTC day `[start, end)`.
    pub quiet_start: Option<i32>,
    pub quiet_end: Option<i32>,
    pub digest_minutes: Option<i32>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

pub struct NewRoute<'a> {
    pub id: Uuid,
    pub channel_id: Uuid,
    pub event_kinds: &'a [String],
    pub templates: &'a [String],
    pub min_severity: &'a str,
    pub approver: Option<&'a str>,
    pub approver_role: Option<&'a str>,
    pub quiet: Option<(i32, i32)>,
    pub digest_minutes: Option<i32>,
    pub created_by: &'a str,
}

/// Inserts a route; `None` when its channel does not exist.
pub async fn create_route(conn: &mut PgConnection, r: &NewRoute<'_>) -> Result<Option<Route>> {
    Ok(sqlx::query_as!(
        Route,
        "INSERT INTO notification_routes (id, channel_id, event_kinds, templates, min_severity, approver, quiet_start,
             quiet_end, digest_minutes, created_by, approver_role)
         SELECT $1, c.id, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM notification_channels c WHERE c.id = $2
         RETURNING id, channel_id, event_kinds, templates, min_severity, approver, approver_role, quiet_start,
                   quiet_end, digest_minutes, created_by, created_at",
        r.id,
        r.channel_id,
        r.event_kinds,
        r.templates,
        r.min_severity,
        r.approver,
        r.quiet.map(|q| q.0),
        r.quiet.map(|q| q.1),
        r.digest_minutes,
        r.created_by,
        r.approver_role
    )
    .fetch_optional(&mut *conn)
    .await?)
}

pub async fn routes(conn: &mut PgConnection) -> Result<Vec<Route>> {
    Ok(sqlx::query_as!(
        Route,
        "SELECT id, channel_id, event_kinds, templates, min_severity, approver, approver_role, quiet_start,
                quiet_end, digest_minutes, created_by, created_at
           FROM notification_routes ORDER BY created_at, id"
    )
    .fetch_all(&mut *conn)
    .await?)
}

pub async fn delete_route(conn: &mut PgConnection, id: Uuid) -> Result<Option<Route>> {
    Ok(sqlx::query_as!(
        Route,
        "DELETE FROM notification_routes WHERE id = $1
         RETURNING id, channel_id, event_kinds, templates, min_severity, approver, approver_role, quiet_start,
                   quiet_end, digest_minutes, created_by, created_at",
        id
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Writes (while a route exists) the notifications of conditions that are a matter of time —
/// a node UNKNOWN longer than `unknown_grace_seconds` (once per node and attempt), a worker
/// whose heartbeat is older than `stale_seconds` but not gone (`gone_seconds`; once per
/// instance and last beat). Returns how many were new.
pub async fn scan_conditions(
    conn: &mut PgConnection,
    unknown_grace_seconds: f64,
    stale_seconds: f64,
    gone_seconds: f64,
) -> Result<u64> {
    let unknown = sqlx::query!(
        "WITH found AS (
             SELECT n.id, n.request_id, n.node_key, n.attempt_no, n.lane, n.updated_at, m.template_key
               FROM movement_request_nodes n JOIN movement_requests m ON m.id = n.request_id
              WHERE n.node_state = 'UNKNOWN' AND n.updated_at < now() - make_interval(secs => $1)
                AND EXISTS (SELECT 1 FROM notification_routes)
                AND NOT EXISTS (SELECT 1 FROM notifications x
                                 WHERE x.dedupe_key = 'node_unknown:' || n.id || ':' || n.attempt_no)
              ORDER BY n.updated_at LIMIT 500)
         INSERT INTO notifications (dedupe_key, kind, severity, movement_id, template_key, subject, data)
         SELECT 'node_unknown:' || id || ':' || attempt_no, 'node_unknown', 'critical', request_id, template_key,
                left('Node ' || node_key || ' UNKNOWN for over ' || round($1::numeric) || ' s: ' || template_key
                     || ' movement ' || request_id, 500),
                jsonb_build_object('movement_id', request_id, 'node_key', node_key, 'attempt_no', attempt_no,
                                   'lane', lane, 'unknown_since', updated_at)
           FROM found
         ON CONFLICT (dedupe_key) DO NOTHING",
        unknown_grace_seconds
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();
    let stale = sqlx::query!(
        "INSERT INTO notifications (dedupe_key, kind, severity, subject, data)
         SELECT 'worker_stale:' || worker || ':' || network_class || ':' || instance_id || ':'
                    || extract(epoch FROM last_beat_at)::bigint,
                'worker_stale', 'warning',
                left('Worker ' || worker || ' (' || instance_id || ') has not beaten since '
                     || to_char(last_beat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC', 500),
                jsonb_build_object('worker', worker, 'network_class', network_class, 'instance_id', instance_id,
                                   'hostname', hostname, 'last_beat_at', last_beat_at)
           FROM worker_heartbeats
          WHERE last_beat_at < now() - make_interval(secs => $1)
            AND last_beat_at >= now() - make_interval(secs => $2)
            AND EXISTS (SELECT 1 FROM notification_routes)
         ON CONFLICT (dedupe_key) DO NOTHING",
        stale_seconds,
        gone_seconds
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(unknown + stale)
}

/// Deletes notifications older than `retention_seconds` whose deliveries are all final (sent or
/// dead-lettered), with their deliveries (at most 5,000 a call). Returns how many notifications.
pub async fn delete_older_than(conn: &mut PgConnection, retention_seconds: f64) -> Result<u64> {
    let r = sqlx::query!(
        "DELETE FROM notifications WHERE id IN (
             SELECT n.id FROM notifications n
              WHERE n.created_at < now() - make_interval(secs => $1)
                AND NOT EXISTS (SELECT 1 FROM notification_deliveries d
                                 WHERE d.notification_id = n.id AND d.status = 'pending')
              LIMIT 5000)",
        retention_seconds
    )
    .execute(&mut *conn)
    .await?;
    Ok(r.rows_affected())
}

/// A route naming an approver, against an `approval_needed` notification not routed yet: what
/// deciding whether that principal may give the approval needs.
#[derive(Debug, Clone)]
pub struct ApproverCandidate {
    pub notification_id: Uuid,
    pub route_id: Uuid,
    /// The principal the route names, or none when it names a role.
    pub approver: Option<String>,
    pub approver_role: Option<String>,
    /// The movement's creator, its policy version and approver groups, who approved it so far
    /// (none when the movement is gone).
    pub created_by: Option<String>,
    pub policy_version: Option<i32>,
    pub policy_groups: Option<Value>,
    pub approved_by: Vec<String>,
}

/// The oldest `approval_needed` notifications not routed yet (up to `limit`), and each of them
/// against every route that names an approver (a principal or a role).
pub async fn approver_candidates(conn: &mut PgConnection, limit: i64) -> Result<(Vec<Uuid>, Vec<ApproverCandidate>)> {
    let ids: Vec<Uuid> = sqlx::query_scalar!(
        "SELECT id FROM notifications WHERE routed_at IS NULL AND kind = 'approval_needed'
          ORDER BY created_at, id LIMIT $1",
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    let candidates = sqlx::query_as!(
        ApproverCandidate,
        r#"SELECT n.id AS notification_id, r.id AS route_id, r.approver, r.approver_role,
                  m.created_by AS "created_by?", m.policy_version, m.policy_groups,
                  COALESCE((SELECT array_agg(a.approver) FROM movement_approvals a WHERE a.request_id = m.id),
                           '{}') AS "approved_by!"
             FROM notifications n
             JOIN notification_routes r ON r.approver IS NOT NULL OR r.approver_role IS NOT NULL
             LEFT JOIN movement_requests m ON m.id = n.movement_id
            WHERE n.id = ANY ($1)"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok((ids, candidates))
}

/// Every active API key's principal and roles (who may approve what).
pub async fn active_principals(conn: &mut PgConnection) -> Result<Vec<(String, Vec<String>)>> {
    Ok(sqlx::query!(
        "SELECT principal, roles FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())"
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.principal, r.roles))
    .collect())
}

/// Routes up to `limit` notifications not routed yet (SKIP LOCKED: each by one replica): a
/// delivery per matching route's channel (one per notification and channel), due now, at the
/// end of the route's quiet hours (below `critical`) or at its next digest boundary. An
/// `approval_needed` notification is routed only once `evaluated` (its approver routes judged,
/// [`approver_candidates`]), through an approver route only when `eligible` pairs it with that
/// route. Returns `(notifications routed, deliveries made)`.
pub async fn route(
    conn: &mut PgConnection,
    limit: i64,
    max_attempts: i32,
    evaluated: &[Uuid],
    eligible: &[(Uuid, Uuid)],
) -> Result<(u64, u64)> {
    let (eligible_n, eligible_r): (Vec<Uuid>, Vec<Uuid>) = eligible.iter().copied().unzip();
    let r = sqlx::query!(
        r#"WITH picked AS (
             SELECT id FROM notifications
              WHERE routed_at IS NULL AND (kind <> 'approval_needed' OR id = ANY ($3))
              ORDER BY created_at, id LIMIT $1
             FOR UPDATE SKIP LOCKED
         ), matched AS (
             SELECT n.id AS notification_id, r.channel_id, r.id AS route_id,
                    n.severity, r.quiet_start, r.quiet_end, r.digest_minutes
               FROM notifications n
               JOIN picked p ON p.id = n.id
               JOIN notification_routes r
                 ON (cardinality(r.event_kinds) = 0 OR n.kind = ANY (r.event_kinds))
                AND (cardinality(r.templates) = 0 OR n.template_key = ANY (r.templates))
                AND array_position(ARRAY['info', 'warning', 'critical'], n.severity)
                    >= array_position(ARRAY['info', 'warning', 'critical'], r.min_severity)
               JOIN notification_channels c ON c.id = r.channel_id AND c.enabled
               LEFT JOIN movement_requests m ON m.id = n.movement_id
              WHERE ((r.approver IS NULL AND r.approver_role IS NULL) OR n.kind <> 'approval_needed'
                     OR (n.id, r.id) IN (SELECT * FROM unnest($4::uuid[], $5::uuid[])))
                -- Nobody is asked for an approval no longer wanted (approved, rejected, expired
                -- meanwhile), nor told of what is a day old (a backlog from a dispatcher that was off).
                AND (n.kind <> 'approval_needed'
                     OR (m.request_state = 'PENDING_APPROVAL' AND (m.expires_at IS NULL OR m.expires_at > now())))
                AND n.created_at > now() - interval '1 day'
         ), timed AS (
             SELECT x.*, now() AS now_,
                    floor(extract(epoch FROM now() - date_trunc('day', now(), 'UTC')) / 60)::int AS minute
               FROM matched x
         ), each_route AS (
             SELECT t.notification_id, t.channel_id, t.route_id,
                    GREATEST(
                      CASE WHEN t.quiet_start IS NULL OR t.severity = 'critical' THEN t.now_
                           WHEN t.quiet_start <= t.quiet_end AND t.minute >= t.quiet_start AND t.minute < t.quiet_end
                             THEN date_trunc('day', t.now_, 'UTC') + make_interval(mins => t.quiet_end)
                           WHEN t.quiet_start > t.quiet_end AND t.minute >= t.quiet_start
                             THEN date_trunc('day', t.now_, 'UTC') + interval '1 day'
                                  + make_interval(mins => t.quiet_end)
                           WHEN t.quiet_start > t.quiet_end AND t.minute < t.quiet_end
                             THEN date_trunc('day', t.now_, 'UTC') + make_interval(mins => t.quiet_end)
                           ELSE t.now_ END,
                      CASE WHEN t.digest_minutes IS NULL THEN t.now_
                           ELSE date_trunc('day', t.now_, 'UTC')
                                + make_interval(mins => ((t.minute / t.digest_minutes) + 1) * t.digest_minutes) END
                    ) AS at
               FROM timed t
         ), due AS (
             -- Several routes to one channel: the one that would send soonest decides.
             SELECT DISTINCT ON (notification_id, channel_id) notification_id, channel_id, route_id, at
               FROM each_route ORDER BY notification_id, channel_id, at, route_id
         ), made AS (
             INSERT INTO notification_deliveries (notification_id, channel_id, route_id, max_attempts, next_attempt_at)
             SELECT notification_id, channel_id, route_id, $2, at FROM due
             ON CONFLICT (notification_id, channel_id) DO NOTHING
             RETURNING 1
         ), marked AS (
             UPDATE notifications n SET routed_at = now() FROM picked p WHERE n.id = p.id RETURNING 1
         )
         SELECT (SELECT count(*) FROM marked) AS "routed!", (SELECT count(*) FROM made) AS "made!""#,
        limit,
        max_attempts,
        evaluated,
        &eligible_n,
        &eligible_r
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok((r.routed as u64, r.made as u64))
}

/// A channel leased for one message, with what it needs to send (Debug never shows the secret).
#[derive(Clone)]
pub struct Leased {
    pub channel_id: Uuid,
    pub token: Uuid,
    pub name: String,
    pub kind: String,
    pub config: Value,
    /// Never logged.
    pub secret: Option<String>,
}

impl std::fmt::Debug for Leased {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leased")
            .field("channel_id", &self.channel_id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

/// Leases up to `limit` channels for `lease_seconds` (SKIP LOCKED and checked again on the
/// locked row: a channel is leased by one replica at a time): enabled channels with a delivery
/// due, no lease running, fewer messages than their rate within the last minute.
pub async fn lease_channels(conn: &mut PgConnection, limit: i64, lease_seconds: f64) -> Result<Vec<Leased>> {
    Ok(sqlx::query_as!(
        Leased,
        r#"WITH candidates AS (
             SELECT c.id FROM notification_channels c
              WHERE c.enabled AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= now())
                AND EXISTS (SELECT 1 FROM notification_deliveries d
                             WHERE d.channel_id = c.id AND d.status = 'pending' AND d.next_attempt_at <= now())
                AND (SELECT count(DISTINCT d.batch_id) FROM notification_deliveries d
                      WHERE d.channel_id = c.id AND d.last_attempt_at > now() - interval '1 minute')
                    < c.rate_per_minute
              -- The channel whose oldest due delivery waited longest first: none starves.
              ORDER BY (SELECT min(d.next_attempt_at) FROM notification_deliveries d
                         WHERE d.channel_id = c.id AND d.status = 'pending'), c.id
              LIMIT $1
              FOR UPDATE SKIP LOCKED
         )
         UPDATE notification_channels c SET lease_token = gen_random_uuid(),
                lease_expires_at = now() + make_interval(secs => $2)
           FROM candidates WHERE c.id = candidates.id
            AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= now())
         RETURNING c.id AS channel_id, c.lease_token AS "token!", c.name, c.kind, c.config, c.secret"#,
        limit,
        lease_seconds
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// One delivery taken into a leased channel's message.
#[derive(Debug, Clone)]
pub struct Taken {
    pub id: Uuid,
    pub notification_id: Uuid,
    pub attempts: i32,
    pub kind: String,
    pub severity: String,
    pub subject: String,
    pub movement_id: Option<Uuid>,
    pub template_key: Option<String>,
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

/// Takes up to `limit` due deliveries of a channel leased with `token` into one message: each
/// attempt counted now and the next one due after `lease_seconds` (a message that never
/// records an outcome is sent again then). Deliveries that used every attempt are
/// dead-lettered first. Nothing when the lease is no longer this one.
pub async fn take(
    conn: &mut PgConnection,
    channel_id: Uuid,
    token: Uuid,
    limit: i64,
    lease_seconds: f64,
) -> Result<Vec<Taken>> {
    sqlx::query!(
        "WITH dead AS (
             UPDATE notification_deliveries SET status = 'dlq', updated_at = now(),
                 last_error = left('no outcome recorded for attempt ' || attempts
                                   || COALESCE(' (last error: ' || last_error || ')', ''), 2000)
              WHERE channel_id = $1 AND status = 'pending' AND attempts >= max_attempts AND next_attempt_at <= now()
             RETURNING id, notification_id, attempts, last_error)
         INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
         SELECT qtg_uuid7(), 'notification_dispatcher', 'notification.dead_lettered', 'notification',
                d.notification_id::text, n.movement_id,
                jsonb_build_object('delivery_id', d.id, 'channel_id', $1::uuid, 'channel', c.name, 'kind', n.kind,
                                   'attempt', d.attempts, 'error', d.last_error)
           FROM dead d JOIN notifications n ON n.id = d.notification_id JOIN notification_channels c ON c.id = $1",
        channel_id
    )
    .execute(&mut *conn)
    .await?;
    Ok(sqlx::query_as!(
        Taken,
        r#"WITH picked AS (
             SELECT d.id FROM notification_deliveries d
              WHERE d.channel_id = $1 AND d.status = 'pending' AND d.next_attempt_at <= now()
                AND d.attempts < d.max_attempts
                AND EXISTS (SELECT 1 FROM notification_channels c WHERE c.id = $1 AND c.lease_token = $2)
              ORDER BY d.next_attempt_at, d.created_at, d.id LIMIT $3
              FOR UPDATE SKIP LOCKED
         ), taken AS (
             UPDATE notification_deliveries d SET attempts = d.attempts + 1, batch_id = $2, last_attempt_at = now(),
                    next_attempt_at = now() + make_interval(secs => $4), updated_at = now()
               FROM picked WHERE d.id = picked.id AND d.status = 'pending' AND d.next_attempt_at <= now()
             RETURNING d.id, d.notification_id, d.attempts
         )
         SELECT t.id AS "id!", t.notification_id AS "notification_id!", t.attempts AS "attempts!", n.kind, n.severity,
                n.subject, n.movement_id, n.template_key, n.data, n.created_at
           FROM taken t JOIN notifications n ON n.id = t.notification_id
          ORDER BY n.created_at, n.id"#,
        channel_id,
        token,
        limit,
        lease_seconds
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// Records a message of channel lease `token` (while it holds): its deliveries `ids` sent, or failed with
/// `error` — each retried after `min(max(2^min(attempts,10), retry_after), 600)` s, dead-lettered
/// once its attempts are used — and audits each; then releases the lease. Returns the
/// deliveries whose outcome was recorded, with their new status.
pub async fn record(
    conn: &mut PgConnection,
    channel_id: Uuid,
    token: Uuid,
    ids: &[Uuid],
    error: Option<&str>,
    retry_after_seconds: Option<f64>,
) -> Result<Vec<(Uuid, String)>> {
    let rows = sqlx::query!(
        r#"WITH updated AS (
             UPDATE notification_deliveries d SET
                 status = CASE WHEN $4::text IS NULL THEN 'sent'
                               WHEN d.attempts >= d.max_attempts THEN 'dlq' ELSE 'pending' END,
                 sent_at = CASE WHEN $4::text IS NULL THEN now() END,
                 last_error = CASE WHEN $4::text IS NULL THEN NULL ELSE left($4, 2000) END,
                 next_attempt_at = CASE WHEN $4::text IS NULL THEN d.next_attempt_at
                     ELSE now() + make_interval(secs => LEAST(GREATEST(power(2, LEAST(d.attempts, 10))::float8,
                                                                       COALESCE($5::float8, 0)), 600)) END,
                 updated_at = now()
              WHERE d.id = ANY ($3) AND d.channel_id = $1 AND d.batch_id = $2 AND d.status = 'pending'
                -- Only while the lease is this one: a lease that ran out and was taken again
                -- records nothing (the message is sent again: at least once).
                AND EXISTS (SELECT 1 FROM notification_channels c WHERE c.id = $1 AND c.lease_token = $2)
             RETURNING d.id, d.status, d.attempts, d.notification_id, d.last_error
         ), audited AS (
             INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
             SELECT qtg_uuid7(), 'notification_dispatcher',
                    CASE u.status WHEN 'sent' THEN 'notification.delivered' WHEN 'dlq' THEN 'notification.dead_lettered'
                                  ELSE 'notification.failed' END,
                    'notification', u.notification_id::text, n.movement_id,
                    jsonb_build_object('delivery_id', u.id, 'channel_id', $1::uuid, 'channel', c.name,
                                       'kind', n.kind, 'attempt', u.attempts, 'error', u.last_error)
               FROM updated u JOIN notifications n ON n.id = u.notification_id
               JOIN notification_channels c ON c.id = $1
             RETURNING 1
         ), released AS (
             UPDATE notification_channels SET lease_token = NULL, lease_expires_at = NULL
              WHERE id = $1 AND lease_token = $2 RETURNING 1
         )
         SELECT u.id AS "id!", u.status AS "status!", (SELECT count(*) FROM audited) AS "audited!",
                (SELECT count(*) FROM released) AS "released!"
           FROM updated u"#,
        channel_id,
        token,
        ids,
        error,
        retry_after_seconds
    )
    .fetch_all(&mut *conn)
    .await?;
    // The lease is released by the statement whatever it recorded.
    Ok(rows.into_iter().map(|r| (r.id, r.status)).collect())
}

/// Releases a channel's lease `token` (nothing was due after all).
pub async fn release(conn: &mut PgConnection, channel_id: Uuid, token: Uuid) -> Result<()> {
    sqlx::query!(
        "UPDATE notification_channels SET lease_token = NULL, lease_expires_at = NULL
          WHERE id = $1 AND lease_token = $2",
        channel_id,
        token
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Sends a notification's dead-lettered deliveries again: each pending, due now, with its
/// attempts counted from zero. `None` when there is no such notification; else how many.
pub async fn redeliver(conn: &mut PgConnection, id: Uuid) -> Result<Option<Vec<Uuid>>> {
    let exists = sqlx::query_scalar!("SELECT id FROM notifications WHERE id = $1 FOR UPDATE", id)
        .fetch_optional(&mut *conn)
        .await?;
    if exists.is_none() {
        return Ok(None);
    }
    Ok(Some(
        sqlx::query_scalar!(
            "UPDATE notification_deliveries SET status = 'pending', attempts = 0, next_attempt_at = now(),
                 last_error = NULL, updated_at = now()
              WHERE notification_id = $1 AND status = 'dlq' RETURNING channel_id",
            id
        )
        .fetch_all(&mut *conn)
        .await?,
    ))
}

/// A notification with its deliveries, as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotificationView {
    pub id: Uuid,
    pub kind: String,
    pub severity: String,
    pub subject: String,
    pub movement_id: Option<Uuid>,
    pub template_key: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub data: Value,
    pub created_at: DateTime<Utc>,
    pub routed_at: Option<DateTime<Utc>>,
    /// `[{channel_id, channel, status, attempts, next_attempt_at, last_error, sent_at}]`.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub deliveries: Value,
}

/// The newest notifications (of `kind`, when given) before the `(created_at, id)` cursor.
pub async fn list(
    conn: &mut PgConnection,
    kind: Option<&str>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<NotificationView>> {
    let (at, id) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
    Ok(sqlx::query_as!(
        NotificationView,
        r#"SELECT n.id, n.kind, n.severity, n.subject, n.movement_id, n.template_key, n.data, n.created_at,
                  n.routed_at,
                  COALESCE((SELECT jsonb_agg(jsonb_build_object('channel_id', d.channel_id, 'channel', c.name,
                                     'status', d.status, 'attempts', d.attempts,
                                     'next_attempt_at', d.next_attempt_at, 'last_error', d.last_error,
                                     'sent_at', d.sent_at) ORDER BY c.name)
                              FROM notification_deliveries d JOIN notification_channels c ON c.id = d.channel_id
                             WHERE d.notification_id = n.id), '[]'::jsonb) AS "deliveries!"
             FROM notifications n
            WHERE ($1::text IS NULL OR n.kind = $1)
              AND ($2::timestamptz IS NULL OR (n.created_at, n.id) < ($2, $3))
            ORDER BY n.created_at DESC, n.id DESC LIMIT $4"#,
        kind,
        at,
        id,
        limit
    )
    .fetch_all(&mut *conn)
    .await?)
}
