//! The kill switch: dispatch pauses (global, per lane, per executor key). The dispatch claim
//! leaves a paused node READY ([`crate::claims`] tests [`PAUSED`] in the claim statement), and
//! dispatch transaction 2 tests it again right before the submit (`held_by` in
//! [`crate::claims::node_now`]): a node claimed before the pause committed ends FAILED with
//! `DISPATCH_PAUSED` without reaching the venue.
//! Only a submit already on the wire when the pause commits is not stopped.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::Result;

/// The one definition of which pauses (`c`) hold a node (`n`, plan node `p`), the widest
/// first. Every reader of pauses below is built from it.
///
/// `holding_pauses!("columns")` is the statement's text (a literal, for `concat!`).
/// `holding_pauses!(sqlx::query!, "before", "columns", "after", args..)` is the checked query
/// of `before`, that text and `after` (sqlx's macros join string literals with `+` and expand
/// no macro inside, so the text is handed to them as literals).
macro_rules! holding_pauses {
    (@join $($m:ident)::+ ! [$($before:tt)*] $sep:tt $columns:literal [$($after:tt)*]) => {
        $($m)::+!(
            $($before)* "SELECT " $sep $columns $sep " FROM dispatch_pauses c
             WHERE c.scope = 'global' OR (c.scope = 'lane' AND c.target = n.lane)
                OR (c.scope = 'executor' AND c.target = p.executor_key)
             ORDER BY array_position(ARRAY['global', 'lane', 'executor'], c.scope) LIMIT 1" $($after)*
        )
    };
    ($columns:literal) => {
        $crate::controls::holding_pauses!(@join concat! [] , $columns [])
    };
    ($($m:ident)::+ !, $before:literal, $columns:literal, $after:literal $(, $arg:expr)* $(,)?) => {
        $crate::controls::holding_pauses!(@join $($m)::+ ! [$before +] + $columns [+ $after $(, $arg)*])
    };
}
pub(crate) use holding_pauses;

/// The claim predicate's pause test.
pub(crate) const PAUSED: &str = concat!("EXISTS (", holding_pauses!("1"), ")");

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pause {
    /// `global`, `lane` or `executor`.
    pub scope: String,
    /// `""` for global, else the lane or executor key.
    pub target: String,
    pub reason: String,
    pub paused_by: String,
    pub paused_at: DateTime<Utc>,
}

/// Pauses a scope (or updates the reason of an existing pause); returns the stored pause and
/// whether it is new.
pub async fn pause(
    conn: &mut PgConnection,
    scope: &str,
    target: &str,
    reason: &str,
    actor: &str,
) -> Result<(Pause, bool)> {
    let r = sqlx::query!(
        r#"INSERT INTO dispatch_pauses (scope, target, reason, paused_by) VALUES ($1, $2, $3, $4)
         ON CONFLICT (scope, target) DO UPDATE SET reason = EXCLUDED.reason
         RETURNING scope, target, reason, paused_by, paused_at, (xmax = 0) AS "inserted!""#,
        scope,
        target,
        reason,
        actor,
    )
    .fetch_one(&mut *conn)
    .await?;
    let pause =
        Pause { scope: r.scope, target: r.target, reason: r.reason, paused_by: r.paused_by, paused_at: r.paused_at };
    Ok((pause, r.inserted))
}

/// Lifts a pause and wakes the dispatchers; `None` when that scope was not paused.
pub async fn resume(conn: &mut PgConnection, scope: &str, target: &str) -> Result<Option<Pause>> {
    let pause = sqlx::query_as!(
        Pause,
        "DELETE FROM dispatch_pauses WHERE scope = $1 AND target = $2
         RETURNING scope, target, reason, paused_by, paused_at",
        scope,
        target,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if pause.is_some() {
        // Delivered on commit: the held nodes are picked up at once, not on the next poll.
        crate::transition::wake(conn, crate::transition::CHANNEL_DISPATCH).await?;
    }
    Ok(pause)
}

/// Every active pause, global first.
pub async fn list(conn: &mut PgConnection) -> Result<Vec<Pause>> {
    Ok(sqlx::query_as!(
        Pause,
        "SELECT scope, target, reason, paused_by, paused_at FROM dispatch_pauses
         ORDER BY array_position(ARRAY['global', 'lane', 'executor'], scope), target",
    )
    .fetch_all(&mut *conn)
    .await?)
}
