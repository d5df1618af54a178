//! The kill switch: pause and resume new submits globally, per lane or per executor key.
//! Each change is audited; resume wakes the dispatchers.

use qtg_core::Lane;
use qtg_store::audit::{self, AuditRecord};
use qtg_store::controls::{self, Pause};
use serde_json::json;

use crate::movements::{finish, OpError};
use crate::Engine;

/// What a pause applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseScope {
    Global,
    Lane(Lane),
    Executor(String),
}

impl PauseScope {
    /// `scope` is `global` (no target), `lane` (target = a lane) or `executor` (target = an
    /// executor key). Pausing needs a key this deployment's registry knows (a typo must not
    /// pause nothing); resuming takes any key, so a pause outlives no registry change.
    pub fn parse(engine: &Engine, scope: &str, target: Option<&str>, resume: bool) -> Result<PauseScope, OpError> {
        match (scope, target) {
            ("executor", Some(t)) if resume && !t.is_empty() => Ok(PauseScope::Executor(t.into())),
            ("global", None | Some("")) => Ok(PauseScope::Global),
            ("global", Some(_)) => Err(OpError::Validation("a global pause takes no target".into())),
            ("lane", Some(t)) => Lane::parse(t)
                .map(PauseScope::Lane)
                .ok_or_else(|| OpError::Validation(format!("lane {t:?} is not one of ccip, stargate, cex, other"))),
            ("executor", Some(t)) if engine.registry.executor(t).is_some() => Ok(PauseScope::Executor(t.into())),
            // A well-formed key that names nothing: 404, as any unknown resource.
            ("executor", Some(_)) => Err(OpError::NotFound("executor key (in this deployment's registry)")),
            ("lane" | "executor", None) => Err(OpError::Validation(format!("a {scope} pause needs a target"))),
            _ => Err(OpError::Validation("scope must be global, lane or executor".into())),
        }
    }

    fn parts(&self) -> (&'static str, &str) {
        match self {
            PauseScope::Global => ("global", ""),
            PauseScope::Lane(l) => ("lane", l.as_str()),
            PauseScope::Executor(k) => ("executor", k),
        }
    }
}

impl Engine {
    /// Pauses new submits in `scope` (updating the reason if already paused).
    pub async fn pause_dispatch(&self, actor: &str, scope: &PauseScope, reason: &str) -> Result<Pause, OpError> {
        let (s, t) = scope.parts();
        let mut tx = self.pool.begin().await?;
        let res = async {
            let (pause, new) = controls::pause(&mut tx, s, t, reason, actor).await?;
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor,
                    action: "control.pause",
                    entity_type: "control",
                    entity_id: format!("{s}:{t}"),
                    movement_id: None,
                    data: json!({"scope": s, "target": t, "reason": reason, "new": new}),
                },
            )
            .await?;
            tracing::warn!(scope = s, target = t, actor, reason, "dispatch paused");
            Ok(pause)
        }
        .await;
        finish(tx, res).await
    }

    /// Lifts the pause of `scope`; 404-style `NotFound` when it was not paused.
    pub async fn resume_dispatch(&self, actor: &str, scope: &PauseScope, reason: &str) -> Result<Pause, OpError> {
        let (s, t) = scope.parts();
        let mut tx = self.pool.begin().await?;
        let res = async {
            let pause = controls::resume(&mut tx, s, t).await?.ok_or(OpError::NotFound("pause"))?;
            audit::record(
                &mut tx,
                &AuditRecord {
                    actor,
                    action: "control.resume",
                    entity_type: "control",
                    entity_id: format!("{s}:{t}"),
                    movement_id: None,
                    data: json!({"scope": s, "target": t, "reason": reason, "paused_by": pause.paused_by,
                                 "paused_reason": pause.reason}),
                },
            )
            .await?;
            tracing::warn!(scope = s, target = t, actor, reason, "dispatch resumed");
            Ok(pause)
        }
        .await;
        finish(tx, res).await
    }
}
