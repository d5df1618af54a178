//! Nodes this process has just made READY (a completion activated them): a dispatcher of the
//! same process tries them first, claiming by id without listing candidates. Only a hint — a
//! miss (another process took it, another database's node in a test binary) falls back to the
//! candidate list — and bounded, so a process without a dispatcher keeps at most a few ids.

use std::collections::VecDeque;
use std::sync::{LazyLock, Mutex};

use uuid::Uuid;

const CAPACITY: usize = 64;

static READY: LazyLock<Mutex<VecDeque<Uuid>>> = LazyLock::new(Default::default);

/// Offers nodes that just became READY.
pub(crate) fn offer(ids: impl IntoIterator<Item = Uuid>) {
    let mut q = READY.lock().unwrap_or_else(|p| p.into_inner());
    for id in ids {
        if q.len() == CAPACITY {
            q.pop_front();
        }
        q.push_back(id);
    }
}

/// Takes one hinted node, if any (each loop takes its own).
pub(crate) fn take() -> Vec<Uuid> {
    READY.lock().unwrap_or_else(|p| p.into_inner()).pop_front().into_iter().collect()
}
