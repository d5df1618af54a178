//! LISTEN/NOTIFY wake-ups: one listener connection per process. A NOTIFY wakes one idle loop
//! of the channel (round robin), and every loop that found work recruits one more, so loops
//! join in as long as work lasts instead of all stampeding on one node. Only a hint: the
//! interval poll stays the safety net, and a lost listener is re-established (waking every
//! loop once, in case something was missed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use qtg_store::{PgListener, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// One loop of a group: its notifier, and whether it is asleep waiting for it.
#[derive(Default)]
pub struct Member {
    notify: Notify,
    idle: AtomicBool,
}

impl Member {
    /// Wakes this loop now, or, if it is busy, when it next goes idle.
    pub fn notify(&self) {
        self.notify.notify_one();
    }
}

/// The loops listening on one channel.
#[derive(Default)]
pub struct WakeGroup {
    members: RwLock<Vec<Arc<Member>>>,
    next: AtomicUsize,
}

impl WakeGroup {
    fn members(&self) -> Vec<Arc<Member>> {
        self.members.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Wakes one member other than `except`: an idle one (round robin) if there is one — a
    /// wake-up given to a loop that is busy would leave the idle ones asleep while the work
    /// waits —, else the next one gets a permit and looks once more when its tick ends, so a
    /// wake-up that arrives while every loop is finishing is not lost.
    pub fn wake_one(&self, except: Option<&Arc<Member>>) {
        let members = self.members();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let members = &members;
        let others = || {
            (0..members.len())
                .map(move |i| &members[(start + i) % members.len()])
                .filter(|m| !except.is_some_and(|e| Arc::ptr_eq(e, m)))
        };
        if let Some(m) = others().find(|m| m.idle.swap(false, Ordering::AcqRel)) {
            m.notify();
        } else if let Some(m) = others().next() {
            m.notify();
        }
    }

    fn wake_all(&self) {
        for m in self.members() {
            m.notify();
        }
    }
}

/// A loop's membership: its own notifier and its group.
#[derive(Clone)]
pub struct Waker {
    pub own: Arc<Member>,
    pub group: Arc<WakeGroup>,
}

impl Waker {
    /// Recruits another loop of the group (after a tick that found work).
    pub fn recruit(&self) {
        self.group.wake_one(Some(&self.own));
    }

    /// Waits for a wake-up, marked idle meanwhile (until this future completes or is dropped).
    pub async fn woken(&self) {
        struct Busy<'a>(&'a AtomicBool);
        impl Drop for Busy<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let notified = self.own.notify.notified();
        self.own.idle.store(true, Ordering::Release);
        let _busy = Busy(&self.own.idle);
        notified.await;
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
        let own = Arc::new(Member::default());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_goes_to_an_idle_loop_before_a_busy_one() {
        let mut hub = WakeHub::default();
        let loops: Vec<Waker> = (0..4).map(|_| hub.subscribe("c")).collect();
        // Loop 2 sleeps; the others are busy (in a tick). Whatever the round robin's position,
        // every wake-up reaches loop 2 while it is the only one asleep.
        for _ in 0..4 {
            let sleeper = loops[2].clone();
            let asleep = tokio::spawn(async move { sleeper.woken().await });
            tokio::task::yield_now().await;
            loops[0].recruit();
            tokio::time::timeout(Duration::from_secs(1), asleep).await.expect("the idle loop was woken").expect("join");
        }
        // Nobody asleep: the wake-up is kept as a permit, so a loop finishing its tick looks again.
        loops[0].group.wake_one(None);
        let woken = tokio::time::timeout(Duration::from_millis(10), async {
            for l in &loops {
                let l = l.clone();
                if tokio::time::timeout(Duration::from_millis(1), async move { l.woken().await }).await.is_ok() {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(woken, Ok(true), "one loop holds the permit");
    }
}
