//! What every handler takes and gives besides its own types: the caller's role, JSON bodies
//! and query strings that fail as 400 `VALIDATION_ERROR` naming the problem, resource ids,
//! and the one [`Page`] every list answers (and the OpenAPI document describes).
//!
//! Extractors run in argument order, so a handler takes its role first: an unauthenticated
//! or under-privileged caller gets 401/403 before its body or query is looked at.

use axum::extract::rejection::JsonRejection;
use std::collections::HashMap;

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::auth::{Principal, Role};
use crate::error::ApiError;
use crate::AppState;

macro_rules! role_extractor {
    ($($name:ident => $role:expr),* $(,)?) => {$(
        #[doc = concat!("A caller holding at least the `", stringify!($name), "` role (else 401/403).")]
        pub struct $name(pub Principal);

        impl FromRequestParts<AppState> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
                let who = Principal::from_request_parts(parts, state).await?;
                who.require($role)?;
                Ok($name(who))
            }
        }
    )*};
}

role_extractor!(
    Viewer => Role::Viewer,
    Requester => Role::Requester,
    Approver => Role::Approver,
    Operator => Role::Operator,
    Admin => Role::Admin,
);

/// A JSON body whose every problem (content type, size, syntax, unknown field, wrong type,
/// a NUL character) is a clear 4xx. Keeps the raw value for body hashing.
pub struct Body<T> {
    pub value: T,
    pub raw: Value,
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(raw): Json<Value> = Json::from_request(req, state).await.map_err(|e: JsonRejection| match e {
            JsonRejection::MissingJsonContentType(_) => ApiError::with_status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                qtg_core::codes::VALIDATION_ERROR,
                "Content-Type must be application/json",
            ),
            JsonRejection::BytesRejection(_) => too_large(),
            other => ApiError::validation(format!("invalid JSON body: {}", other.body_text())),
        })?;
        Ok(Body { value: typed(&raw)?, raw })
    }
}

/// An optional JSON body: empty (or `null`) means `T::default()`.
pub struct OptBody<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::to_bytes(req.into_body(), crate::BODY_LIMIT).await.map_err(|_| too_large())?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptBody(T::default()));
        }
        let raw: Value =
            serde_json::from_slice(&bytes).map_err(|e| ApiError::validation(format!("invalid JSON body: {e}")))?;
        if raw.is_null() {
            return Ok(OptBody(T::default()));
        }
        Ok(OptBody(typed(&raw)?))
    }
}

fn too_large() -> ApiError {
    ApiError::with_status(
        StatusCode::PAYLOAD_TOO_LARGE,
        qtg_core::codes::VALIDATION_ERROR,
        format!("body is larger than {} bytes", crate::BODY_LIMIT),
    )
}

fn typed<T: DeserializeOwned>(raw: &Value) -> Result<T, ApiError> {
    if has_nul(raw) {
        // PostgreSQL text and jsonb cannot hold U+0000.
        return Err(ApiError::validation("strings and keys must not contain the NUL character (\\u0000)"));
    }
    serde_json::from_value(raw.clone()).map_err(|e| ApiError::validation(format!("invalid body: {e}")))
}

fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// A query string; unknown or malformed parameters are a 400 naming them.
pub struct Params<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Params(q))
            .map_err(|e| ApiError::validation(format!("invalid query: {}", e.body_text())))
    }
}

/// A resource id from the path: anything that is not a UUID names no resource (404).
fn parse_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    raw.parse().map_err(|_| ApiError::not_found(what))
}

/// The path's parameters by name.
async fn path_params<S: Send + Sync>(parts: &mut Parts, state: &S) -> HashMap<String, String> {
    Path::<HashMap<String, String>>::from_request_parts(parts, state).await.map(|Path(p)| p).unwrap_or_default()
}

macro_rules! path_id {
    ($($name:ident => $what:literal),* $(,)?) => {$(
        #[doc = concat!("The `{id}` of a ", $what, " in the path (404 unless a UUID).")]
        pub struct $name(pub Uuid);

        impl<S: Send + Sync> FromRequestParts<S> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
                let params = path_params(parts, state).await;
                parse_id(params.get("id").map(String::as_str).unwrap_or_default(), $what).map($name)
            }
        }
    )*};
}

path_id!(
    MovementId => "movement",
    ProposalId => "template proposal",
    CallbackId => "callback",
    KeyId => "api key",
    KeyRequestId => "api key request",
    CapitalTransferId => "capital transfer",
    BookEntryId => "address-book entry",
    ChannelId => "notification channel",
    RouteId => "notification route",
    NotificationId => "notification",
);

/// A policy `{version}` in the path (404 when it is not a version number).
pub struct PolicyVersionParam(pub i32);

impl<S: Send + Sync> FromRequestParts<S> for PolicyVersionParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = path_params(parts, state).await;
        params
            .get("version")
            .and_then(|v| v.parse::<i32>().ok())
            .filter(|v| *v >= 1)
            .map(PolicyVersionParam)
            .ok_or_else(|| ApiError::not_found("policy version"))
    }
}

/// The `{key}` of a template or signer in the path (404 when the path cannot be read).
pub struct KeyParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for KeyParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        path_params(parts, state).await.remove("key").map(KeyParam).ok_or_else(|| ApiError::not_found("key"))
    }
}

/// A movement's node in the path: `{id}` and `{node_key}`.
pub struct NodeRef {
    pub movement: Uuid,
    pub node_key: String,
}

impl<S: Send + Sync> FromRequestParts<S> for NodeRef {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let mut params = path_params(parts, state).await;
        let movement = parse_id(params.get("id").map(String::as_str).unwrap_or_default(), "movement")?;
        let node_key = params.remove("node_key").ok_or_else(|| ApiError::not_found("node"))?;
        Ok(NodeRef { movement, node_key })
    }
}

/// The paging parameters of a list ordered by a key (rosters, templates), as the document
/// shows them; each list's filters are listed with its operation. Documentation only: the
/// query is read as a [`ListQuery`].
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct PageQuery {
    /// 1-200 (default 50)
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page
    #[param(max_length = 200, pattern = "^[^\\u0000]*$")]
    cursor: Option<String>,
}

/// Paging of a list ordered by creation time (movements, API keys, callbacks).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct TimePageQuery {
    /// 1-200 (default 50)
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page
    #[param(pattern = "^([0-9]{1,16}_[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})?$")]
    cursor: Option<String>,
}

/// Paging of the audit trail (ordered by event sequence).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SeqPageQuery {
    /// 1-200 (default 50)
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page
    #[param(pattern = "^([0-9]{1,18})?$")]
    cursor: Option<String>,
}

/// A list's query string: paging and the filters some lists take. Each handler says which
/// filters it takes ([`ListQuery::allow`]); any other parameter is a 400 naming it.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
    pub state: Option<String>,
    pub status: Option<String>,
    pub movement_id: Option<String>,
    pub actor: Option<String>,
    pub action: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub venue: Option<String>,
    pub asset: Option<String>,
    pub fresh: Option<String>,
    pub template_key: Option<String>,
    pub created_by: Option<String>,
    pub direction: Option<String>,
    pub unexplained: Option<String>,
    pub id: Option<String>,
    pub idempotency_key: Option<String>,
    pub destination: Option<String>,
    pub amount_min: Option<String>,
    pub amount_max: Option<String>,
    pub node_state: Option<String>,
    pub awaiting_approval: Option<String>,
    pub event_type: Option<String>,
    pub include_gone: Option<String>,
    pub replayed: Option<String>,
    pub spread: Option<String>,
    pub granularity: Option<String>,
    pub kind: Option<String>,
}

impl ListQuery {
    /// Refuses a filter set on this query that is not one of `filters`. `limit` or `cursor`
    /// given empty (`?limit=`) counts as absent.
    pub fn allow(mut self, filters: &[&str]) -> Result<Self, ApiError> {
        for v in [&mut self.limit, &mut self.cursor] {
            if v.as_deref().is_some_and(str::is_empty) {
                *v = None;
            }
        }
        if self.cursor.as_ref().is_some_and(|c| c.len() > 200) {
            return Err(ApiError::validation("cursor is not one this API returned"));
        }
        let set = [
            ("state", &self.state),
            ("status", &self.status),
            ("movement_id", &self.movement_id),
            ("actor", &self.actor),
            ("action", &self.action),
            ("since", &self.since),
            ("until", &self.until),
            ("venue", &self.venue),
            ("asset", &self.asset),
            ("fresh", &self.fresh),
            ("template_key", &self.template_key),
            ("created_by", &self.created_by),
            ("direction", &self.direction),
            ("unexplained", &self.unexplained),
            ("id", &self.id),
            ("idempotency_key", &self.idempotency_key),
            ("destination", &self.destination),
            ("amount_min", &self.amount_min),
            ("amount_max", &self.amount_max),
            ("node_state", &self.node_state),
            ("awaiting_approval", &self.awaiting_approval),
            ("event_type", &self.event_type),
            ("include_gone", &self.include_gone),
            ("replayed", &self.replayed),
            ("spread", &self.spread),
            ("granularity", &self.granularity),
            ("kind", &self.kind),
        ];
        match set.iter().find(|(name, v)| v.is_some() && !filters.contains(name)) {
            Some((name, _)) => Err(ApiError::validation(format!("unknown query parameter {name}"))),
            None => Ok(self),
        }
    }

    /// The time filter `name` (`since`, `until`) as RFC 3339.
    pub fn time(&self, name: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
        let v = match name {
            "since" => self.since.as_deref(),
            "until" => self.until.as_deref(),
            _ => None,
        };
        v.map(|t| {
            DateTime::parse_from_rfc3339(t).map(|t| t.with_timezone(&Utc)).map_err(|_| {
                ApiError::validation(format!("{name} must be an RFC 3339 time, e.g. 2026-11-29T18:00:00Z"))
            })
        })
        .transpose()
    }

    /// `limit`: 1-200, default 50.
    pub fn limit(&self) -> Result<i64, ApiError> {
        self.limit_up_to(200)
    }

    /// `limit` (default 50) for a list that allows up to `max`.
    pub fn limit_up_to(&self, max: i64) -> Result<i64, ApiError> {
        match self.limit.as_deref() {
            None => Ok(50),
            Some(l) => match l.parse::<i64>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(ApiError::validation(format!("limit must be an integer between 1 and {max}"))),
            },
        }
    }

    /// A `true` / `false` flag (absent or empty: false).
    pub fn flag(name: &str, v: &Option<String>) -> Result<bool, ApiError> {
        match v.as_deref() {
            None | Some("") | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(ApiError::validation(format!("{name} must be true or false, not {other:?}"))),
        }
    }

    /// `movement_id` as a UUID.
    pub fn movement_id(&self) -> Result<Option<Uuid>, ApiError> {
        let parse = |m: &str| m.parse().map_err(|_| ApiError::validation("movement_id must be a UUID"));
        self.movement_id.as_deref().map(parse).transpose()
    }
}

/// The cursor of a list ordered by creation time: `{created_at µs}_{id}`.
pub fn time_cursor(created_at: DateTime<Utc>, id: Uuid) -> String {
    format!("{}_{id}", created_at.timestamp_micros())
}

pub fn parse_time_cursor(c: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let bad = || ApiError::validation("cursor is not one this API returned");
    let (ts, id) = c.split_once('_').ok_or_else(bad)?;
    let micros: i64 = ts.parse().map_err(|_| bad())?;
    Ok((DateTime::from_timestamp_micros(micros).ok_or_else(bad)?, id.parse().map_err(|_| bad())?))
}

/// One page of a list: follow `next_cursor` (pass it as `cursor`) until it is null.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T: Serialize> Page<T> {
    /// From up to `limit + 1` rows read after the cursor: the first `limit`, and the cursor of
    /// the last of them when more follow.
    pub fn from_rows(mut rows: Vec<T>, limit: i64, cursor: impl Fn(&T) -> String) -> Json<Page<T>> {
        let limit = limit.max(1) as usize;
        let next_cursor = (rows.len() > limit).then(|| cursor(&rows[limit - 1]));
        rows.truncate(limit);
        Json(Page { items: rows, next_cursor })
    }

    /// A small roster read whole: ordered by `key`, after the cursor (the last key of the
    /// previous page).
    /// A roster takes no filter.
    pub fn of_roster(items: Vec<T>, key: impl Fn(&T) -> String, q: ListQuery) -> Result<Json<Page<T>>, ApiError> {
        let q = q.allow(&[])?;
        let limit = q.limit()?;
        let mut keyed: Vec<(String, T)> = items.into_iter().map(|i| (key(&i), i)).collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        keyed.retain(|(k, _)| q.cursor.as_ref().is_none_or(|c| k > c));
        let page = Page::from_rows(keyed, limit, |(k, _)| k.clone()).0;
        Ok(Json(Page { items: page.items.into_iter().map(|(_, i)| i).collect(), next_cursor: page.next_cursor }))
    }
}

/// An optional reason (approve / reject); the body itself is optional: empty or `null` is `{}`.
#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonBody {
    #[schema(max_length = 2000)]
    #[serde(default)]
    pub reason: Option<String>,
}

impl ReasonBody {
    pub fn reason(&self) -> Result<Option<&str>, ApiError> {
        match self.reason.as_deref() {
            Some(r) => free_text("reason", r, 2000).map(Some),
            None => Ok(None),
        }
    }
}

/// A required reason (operator actions and controls): 1-2000 characters of printable text
/// after trimming.
pub fn required_reason(reason: &str) -> Result<&str, ApiError> {
    let r = reason.trim();
    if r.is_empty() {
        return Err(ApiError::validation("reason must be 1-2000 characters"));
    }
    free_text("reason", r, 2000)
}

/// A value a person reads before money moves (an identifier, an intent field): printable,
/// at most `max` characters, no space at either end (`qtg_core::text::check_plain`).
pub fn plain<'a>(field: &str, value: &'a str, max: usize) -> Result<&'a str, ApiError> {
    qtg_core::text::check_plain(field, value, max).map_err(|e| ApiError::validation(e.to_string()))?;
    Ok(value)
}

/// Free text (a reason, a description): printable, lines allowed (`check_free`).
pub fn free_text<'a>(field: &str, value: &'a str, max: usize) -> Result<&'a str, ApiError> {
    qtg_core::text::check_free(field, value, max).map_err(|e| ApiError::validation(e.to_string()))?;
    Ok(value)
}
