//! The seed's `run_loop`: call `tick` forever; it returns how many items it processed. After
//! a tick that processed something the next runs at once (drain), and a tick that is still
//! running after 50 ms (an executor call in flight) recruits another loop of the worker, so
//! slow calls overlap instead of queueing; after an idle one the loop
//! sleeps `interval ± jitter` (at least 0.1 s) or until woken by NOTIFY; after 5 consecutive
//! errors it backs off `min(2^n, 60)` s. Shutdown is only observed between ticks, so the item
//! in hand is always finished.

use std::future::Future;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::heartbeat::Heartbeat;
use crate::metrics::Metrics;
use crate::wake::Waker;

pub const MAX_CONSECUTIVE_ERRORS: u32 = 5;
pub const MAX_BACKOFF_SECONDS: f64 = 60.0;
pub const MIN_SLEEP: Duration = Duration::from_millis(100);
/// A tick running longer than this recruits another loop of its worker.
pub const RECRUIT_AFTER: Duration = Duration::from_millis(50);

#[derive(Clone)]
pub struct LoopSpec {
    /// Worker name (metrics label, logs).
    pub name: String,
    pub interval: Duration,
    pub jitter: Duration,
    /// Woken early by NOTIFY; the interval stays the safety net.
    pub wake: Option<Waker>,
    /// A second (third…) claim loop of the same worker in one process: it ignores `due_in`
    /// (the first loop wakes for scheduled work and recruits the others while work lasts) —
    /// not `retry_in`, work it saw but could not take yet —, so
    /// an idle process polls about once per `interval` however many loops it runs. Its own
    /// `interval` is the long safety net.
    pub secondary: bool,
}

/// How much longer a secondary loop's idle poll is than the first loop's.
pub const SECONDARY_INTERVAL_FACTOR: u32 = 10;

/// The pause after a tick: `None` = run again now.
pub fn pause_after(
    result: &Result<Tick, ()>,
    consecutive_errors: u32,
    interval: Duration,
    jitter: Duration,
) -> Option<Duration> {
    match result {
        Ok(t) if t.processed > 0 => None,
        Err(()) if consecutive_errors >= MAX_CONSECUTIVE_ERRORS => {
            Some(Duration::from_secs_f64(2f64.powi(consecutive_errors.min(30) as i32).min(MAX_BACKOFF_SECONDS)))
        }
        _ => {
            let j = jitter.as_secs_f64();
            let offset = if j > 0.0 { rand::rng().random_range(-j..=j) } else { 0.0 };
            let mut pause = interval.as_secs_f64() + offset;
            // Known future work (a scheduled observation) may only shorten the idle pause.
            if let Ok(Tick { due_in: Some(due), .. }) = result {
                pause = pause.min(due.as_secs_f64());
            }
            if let Ok(Tick { retry_in: Some(retry), .. }) = result {
                pause = pause.min(retry.as_secs_f64());
            }
            Some(Duration::from_secs_f64(pause.max(MIN_SLEEP.as_secs_f64())))
        }
    }
}

/// What one tick did: items processed and, when idle, how soon known work falls due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tick {
    pub processed: usize,
    pub due_in: Option<Duration>,
    /// Work was there but another claim held it: try again this soon. Every loop does,
    /// secondary ones too (a secondary that missed would otherwise wait for a wake-up that may
    /// not come, or its long safety-net interval).
    pub retry_in: Option<Duration>,
}

impl Tick {
    /// The tick as a secondary loop pauses after it: scheduled work is the first loop's to
    /// wake for; a retry is every loop's.
    pub fn for_secondary(self) -> Tick {
        Tick { due_in: None, ..self }
    }
}

impl From<usize> for Tick {
    fn from(processed: usize) -> Self {
        Tick { processed, ..Default::default() }
    }
}

/// Runs until `shutdown` is cancelled. Errors are logged and counted, never fatal.
pub async fn run_loop<F, Fut>(
    spec: LoopSpec,
    shutdown: CancellationToken,
    metrics: Metrics,
    heartbeat: Option<Heartbeat>,
    mut tick: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Tick>>,
{
    let mut consecutive_errors: u32 = 0;
    tracing::info!(worker = %spec.name, interval_s = spec.interval.as_secs_f64(), "worker loop started");
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        // A tick still running after RECRUIT_AFTER is working (an idle tick is one quick
        // statement): bring one more loop in now rather than after a slow call.
        let fut = tick();
        tokio::pin!(fut);
        let result = tokio::select! {
            r = &mut fut => r,
            _ = tokio::time::sleep(RECRUIT_AFTER) => {
                if let Some(w) = &spec.wake {
                    w.recruit();
                }
                fut.await
            }
        };
        metrics.observe_tick(&spec.name, started.elapsed());
        let outcome = match result {
            Ok(t) => {
                consecutive_errors = 0;
                metrics.processed(&spec.name, t.processed);
                Ok(t)
            }
            Err(e) => {
                consecutive_errors += 1;
                metrics.tick_error(&spec.name);
                tracing::error!(
                    worker = %spec.name, consecutive_errors, error = format!("{e:#}"),
                    "worker tick failed"
                );
                Err(())
            }
        };
        metrics.set_consecutive_errors(&spec.name, consecutive_errors);
        let for_pause = match &outcome {
            Ok(t) if spec.secondary => Ok(t.for_secondary()),
            other => *other,
        };
        let pause = pause_after(&for_pause, consecutive_errors, spec.interval, spec.jitter);
        // The worker view's "last ticked / next due" (the primary loop's schedule).
        if let Some(hb) = heartbeat.as_ref().filter(|_| !spec.secondary) {
            hb.ticked(pause);
        }
        match pause {
            None => {
                // Work exists: bring one more loop in, then drain.
                if let Some(w) = &spec.wake {
                    w.recruit();
                }
                tokio::task::yield_now().await
            }
            Some(pause) => {
                // Backoff after errors ignores wake-ups; an idle pause does not.
                let wake = spec.wake.as_ref().filter(|_| outcome.is_ok());
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                    _ = async {
                        match wake {
                            Some(w) => w.woken().await,
                            None => std::future::pending().await,
                        }
                    } => {}
                }
            }
        }
    }
    tracing::info!(worker = %spec.name, "worker loop stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn pauses_follow_the_seed() {
        let i = Duration::from_secs(2);
        assert_eq!(pause_after(&Ok(3.into()), 0, i, Duration::ZERO), None);
        assert_eq!(pause_after(&Ok(0.into()), 0, i, Duration::ZERO), Some(i));
        let soon = Tick { due_in: Some(Duration::from_millis(300)), ..Default::default() };
        assert_eq!(pause_after(&Ok(soon), 0, i, Duration::ZERO), Some(Duration::from_millis(300)));
        let late = Tick { due_in: Some(Duration::from_secs(30)), ..Default::default() };
        assert_eq!(pause_after(&Ok(late), 0, i, Duration::ZERO), Some(i));
        let missed = Tick { retry_in: Some(Duration::from_millis(100)), ..Default::default() };
        assert_eq!(pause_after(&Ok(missed), 0, i, Duration::ZERO), Some(Duration::from_millis(100)));
        // What a secondary loop sees of it: the schedule erased, the retry kept.
        let both =
            Tick { due_in: Some(Duration::from_millis(300)), retry_in: Some(Duration::from_millis(150)), processed: 0 };
        assert_eq!(pause_after(&Ok(both.for_secondary()), 0, i, Duration::ZERO), Some(Duration::from_millis(150)));
        assert_eq!(pause_after(&Err(()), 1, i, Duration::ZERO), Some(i));
        assert_eq!(pause_after(&Err(()), 5, i, Duration::ZERO), Some(Duration::from_secs(32)));
        assert_eq!(pause_after(&Err(()), 6, i, Duration::ZERO), Some(Duration::from_secs(60)));
        assert_eq!(pause_after(&Ok(0.into()), 0, Duration::ZERO, Duration::ZERO), Some(MIN_SLEEP));
        for _ in 0..100 {
            let p = pause_after(&Ok(0.into()), 0, i, Duration::from_millis(500)).unwrap();
            assert!(p >= Duration::from_millis(1500) && p <= Duration::from_millis(2500), "{p:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn drains_then_sleeps_and_wakes_on_notify() {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut hub = crate::wake::WakeHub::default();
        let waker = hub.subscribe("c");
        let group = waker.group.clone();
        let shutdown = CancellationToken::new();
        let spec = LoopSpec {
            name: "t".into(),
            interval: Duration::from_secs(3600),
            jitter: Duration::ZERO,
            wake: Some(waker),
            secondary: false,
        };
        let c = calls.clone();
        let task = tokio::spawn(run_loop(spec, shutdown.clone(), Metrics::new(), None, move || {
            let c = c.clone();
            async move {
                let n = c.fetch_add(1, Ordering::SeqCst);
                // Three ticks with work, then idle.
                Ok(Tick::from(if n < 3 { 1 } else { 0 }))
            }
        }));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 4, "drains without sleeping, then idles");
        group.wake_one(None);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 5, "a NOTIFY wakes an idle loop");
        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn backs_off_after_five_errors() {
        let calls = Arc::new(AtomicUsize::new(0));
        let shutdown = CancellationToken::new();
        let spec = LoopSpec {
            name: "t".into(),
            interval: Duration::from_secs(1),
            jitter: Duration::ZERO,
            wake: None,
            secondary: false,
        };
        let c = calls.clone();
        let task = tokio::spawn(run_loop(spec, shutdown.clone(), Metrics::new(), None, move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { Err(anyhow::anyhow!("boom")) }
        }));
        // Ticks at 0,1,2,3,4 (1 s apart), then the 5th error backs off 32 s.
        tokio::time::sleep(Duration::from_millis(4500)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 5);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 5);
        tokio::time::sleep(Duration::from_secs(13)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 6);
        shutdown.cancel();
        task.await.unwrap();
    }
}
