//! Supervision groups (docs/architecture.md §3.3): a core worker that exits abnormally
//! fails the whole core group fast (the process exits non-zero); a sidecar that crashes is
//! logged and the rest continue.

use std::future::Future;
use std::pin::Pin;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub type Task = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// Runs both groups until `shutdown`, or until a core task ends on its own.
pub async fn run_groups(
    core: Vec<(String, Task)>,
    sidecars: Vec<(String, Task)>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut core_set = JoinSet::new();
    for (name, task) in core {
        core_set.spawn(async move { (name, task.await) });
    }
    let mut side_set = JoinSet::new();
    for (name, task) in sidecars {
        side_set.spawn(async move { (name, task.await) });
    }
    let mut failure: Option<anyhow::Error> = None;
    loop {
        tokio::select! {
            Some(done) = core_set.join_next() => {
                let (name, why) = match done {
                    Ok((name, Ok(()))) => (name, "exited".to_string()),
                    Ok((name, Err(e))) => (name, format!("failed: {e:#}")),
                    Err(e) => ("<core task>".to_string(), format!("panicked: {e}")),
                };
                if shutdown.is_cancelled() {
                    continue;
                }
                tracing::error!(worker = %name, reason = %why, "core worker ended; stopping the core group");
                failure = Some(anyhow::anyhow!("core worker {name} {why}"));
                shutdown.cancel();
            }
            Some(done) = side_set.join_next() => {
                match done {
                    Ok((name, Ok(()))) if !shutdown.is_cancelled() => {
                        tracing::error!(worker = %name, "sidecar worker exited; others continue")
                    }
                    Ok((name, Err(e))) => {
                        tracing::error!(
                            worker = %name, error = format!("{e:#}"),
                            "sidecar worker failed; others continue"
                        )
                    }
                    Err(e) => tracing::error!(error = %e, "sidecar worker panicked; others continue"),
                    _ => {}
                }
            }
            else => break,
        }
        if core_set.is_empty() && side_set.is_empty() {
            break;
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_core_failure_stops_everything_a_sidecar_failure_does_not() {
        let shutdown = CancellationToken::new();
        let s = shutdown.clone();
        let core: Vec<(String, Task)> = vec![(
            "core".into(),
            Box::pin(async move {
                s.cancelled().await;
                Ok(())
            }),
        )];
        let sidecars: Vec<(String, Task)> = vec![("side".into(), Box::pin(async { anyhow::bail!("boom") }))];
        let t = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!t.is_cancelled(), "a sidecar crash must not stop the core");
            t.cancel();
        });
        run_groups(core, sidecars, shutdown.clone()).await.unwrap();

        let shutdown = CancellationToken::new();
        let s = shutdown.clone();
        let core: Vec<(String, Task)> = vec![
            ("dies".into(), Box::pin(async { anyhow::bail!("db gone") })),
            (
                "waits".into(),
                Box::pin(async move {
                    s.cancelled().await;
                    Ok(())
                }),
            ),
        ];
        let err = run_groups(core, vec![], shutdown.clone()).await.unwrap_err();
        assert!(err.to_string().contains("dies"));
        assert!(shutdown.is_cancelled());
    }
}
