//! API keys and roles: `Authorization: Bearer <key>`, looked up by sha256 hash; roles are
//! ordered `viewer < requester < approver < operator < admin`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ApiError;
use crate::AppState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Viewer,
    Requester,
    Approver,
    Operator,
    Admin,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::Viewer, Role::Requester, Role::Approver, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Requester => "requester",
            Role::Approver => "approver",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Principal {
    pub name: String,
    pub highest: Role,
}

impl Principal {
    /// 403 unless the caller holds `role` or a higher one.
    pub fn require(&self, role: Role) -> Result<(), ApiError> {
        if self.highest >= role {
            Ok(())
        } else {
            Err(ApiError::forbidden(role.as_str()))
        }
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(ApiError::unauthenticated)?;
        let secret = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 512)
            .ok_or_else(ApiError::unauthenticated)?;
        let key = qtg_store::api_keys::find_by_hash(&state.pool, &qtg_engine::access::key_hash(secret))
            .await?
            .ok_or_else(ApiError::unauthenticated)?;
        let highest = key.roles.iter().filter_map(|r| Role::parse(r)).max().ok_or_else(ApiError::unauthenticated)?;
        Ok(Principal { name: key.principal, highest })
    }
}
