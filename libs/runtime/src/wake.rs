//! LISTEN/NOTIFY wake-ups: one listener connection per process; a NOTIFY on a channel wakes
//! every loop subscribed to it. Only a hint: the interval poll stays the safety net, and a
//! lost listener is re-established (waking everyone once, in case something was missed).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use qtg_store::{PgListener, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct WakeHub {
    subscribers: HashMap<String, Vec<Arc<Notify>>>,
}

impl WakeHub {
    /// A notifier that fires on `channel`.
    pub fn subscribe(&mut self, channel: &str) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        self.subscribers.entry(channel.to_string()).or_default().push(n.clone());
        n
    }

    fn wake(&self, channel: &str) {
        for n in self.subscribers.get(channel).into_iter().flatten() {
            // notify_one stores a permit, so a wake-up during a tick is not lost.
            n.notify_one();
        }
    }

    fn wake_all(&self) {
        for c in self.subscribers.keys() {
            self.wake(c);
        }
    }

    /// Spawns the listener task (nothing to do without subscribers).
    pub fn spawn(self, pool: PgPool, shutdown: CancellationToken) {
        if self.subscribers.is_empty() {
            return;
        }
        tokio::spawn(async move {
            let channels: Vec<String> = self.subscribers.keys().cloned().collect();
            while !shutdown.is_cancelled() {
                match listen(&pool, &channels, &self, &shutdown).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN connection lost; polling until it is back");
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                        self.wake_all();
                    }
                }
            }
        });
    }
}

async fn listen(
    pool: &PgPool,
    channels: &[String],
    hub: &WakeHub,
    shutdown: &CancellationToken,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen_all(channels.iter().map(String::as_str)).await?;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            n = listener.recv() => hub.wake(n?.channel()),
        }
    }
}
