//! LISTEN/NOTIFY wake-ups: one listener connection per process. A NOTIFY wakes one idle loop
//! of the channel (round robin), and every loop that found work recruits one more, so loops
//! join in as long as work lasts instead of all stampeding on one node. Only a hint: the
//! interval poll stays the safety net, and a lost listener is re-established (waking every
//! loop once, in case something was missed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use qtg_store::{PgListener, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The loops listening on one channel.
#[derive(Default)]
pub struct WakeGroup {
    members: RwLock<Vec<Arc<Notify>>>,
    next: AtomicUsize,
}

impl WakeGroup {
    fn members(&self) -> Vec<Arc<Notify>> {
        self.members.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Wakes one member other than `except` (a permit is stored if it is busy).
    pub fn wake_one(&self, except: Option<&Arc<Notify>>) {
        let members = self.members();
        for _ in 0..members.len() {
            let m = &members[self.next.fetch_add(1, Ordering::Relaxed) % members.len()];
            if except.is_some_and(|e| Arc::ptr_eq(e, m)) {
                continue;
            }
            m.notify_one();
            return;
        }
    }

    fn wake_all(&self) {
        for m in self.members() {
            m.notify_one();
        }
    }
}

/// A loop's membership: its own notifier and its group.
#[derive(Clone)]
pub struct Waker {
    pub own: Arc<Notify>,
    pub group: Arc<WakeGroup>,
}

impl Waker {
    /// Recruits another loop of the group (after a tick that found work).
    pub fn recruit(&self) {
        self.group.wake_one(Some(&self.own));
    }
}

#[derive(Default)]
pub struct WakeHub {
    groups: HashMap<String, Arc<WakeGroup>>,
}

impl WakeHub {
    /// A new member of `channel`'s group.
    pub fn subscribe(&mut self, channel: &str) -> Waker {
        let group = self.groups.entry(channel.to_string()).or_default().clone();
        let own = Arc::new(Notify::new());
        group.members.write().unwrap_or_else(|p| p.into_inner()).push(own.clone());
        Waker { own, group }
    }

    /// Spawns the listener task (nothing to do without subscribers).
    pub fn spawn(self, pool: PgPool, shutdown: CancellationToken) {
        if self.groups.is_empty() {
            return;
        }
        tokio::spawn(async move {
            while !shutdown.is_cancelled() {
                match listen(&pool, &self, &shutdown).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN connection lost; polling until it is back");
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                        self.groups.values().for_each(|g| g.wake_all());
                    }
                }
            }
        });
    }
}

async fn listen(pool: &PgPool, hub: &WakeHub, shutdown: &CancellationToken) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen_all(hub.groups.keys().map(String::as_str)).await?;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            n = listener.recv() => {
                if let Some(g) = hub.groups.get(n?.channel()) {
                    g.wake_one(None);
                }
            }
        }
    }
}

/// Whether LISTEN/NOTIFY works through `pool`: a notification sent through the pool reaches a
/// listener on another of its connections within `wait`. It does not behind a transaction or
/// statement pooler (PgBouncer's `pool_mode = transaction`), where the listener's server
/// connection goes back to the pool after each statement — and where sqlx's named prepared
/// statements and the migrator's session advisory lock break too (docs/architecture.md §16).
pub async fn notify_reaches_listener(pool: &PgPool, wait: Duration) -> anyhow::Result<bool> {
    let channel = format!("qtg_probe_{}", std::process::id());
    let payload = format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos());
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(&channel).await?;
    qtg_store::session::notify(pool, &channel, &payload).await?;
    let heard = tokio::time::timeout(wait, async {
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) if n.payload() == payload => return true,
                // Another notification, or the listener's connection lost (it reconnects).
                Ok(Some(_)) | Ok(None) => continue,
                Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false);
    let _ = listener.unlisten(&channel).await;
    Ok(heard)
}
