//! One shutdown path: SIGTERM or SIGINT cancels the token every loop selects on.

use tokio_util::sync::CancellationToken;

/// Spawns the signal watcher; returns the token it cancels.
pub fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot watch SIGTERM");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: finishing the items in hand, then exiting"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: finishing the items in hand, then exiting"),
        }
        t.cancel();
    });
    token
}
