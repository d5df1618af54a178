//! The worker table: one entry per worker, from which the all-in-one `qtg`, each worker's own
//! binary, the settings (`--print-config`), the heartbeat rows, `GET /v3/workers` and the
//! Helm chart's worker list all follow (a test checks the chart, `k8s/base` and docs/binaries.md
//! against it). Adding a worker = one entry here + its tick in `libs/engine` + a
//! `services/<name>/src/main.rs` that calls [`crate::run_worker_binary`] with its binary name.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use qtg_engine::Engine;
use qtg_runtime::{Flag, Group, Tick};
use qtg_store::transition::{CHANNEL_CALLBACK, CHANNEL_DISPATCH, CHANNEL_OBSERVE, CHANNEL_RECOVER};

/// One tick of a worker: items processed and, when idle, how soon known work falls due.
pub type TickFuture = Pin<Box<dyn Future<Output = anyhow::Result<Tick>> + Send>>;
pub type TickFn = fn(Arc<Engine>) -> TickFuture;
pub type Worker = qtg_runtime::Worker<TickFn>;

/// Every worker qtg runs, in the seed's order (core first).
pub static WORKERS: &[Worker] = &[
    Worker {
        name: "node_dispatcher",
        binary: "qtg-dispatcher",
        summary: "claims READY nodes and runs preflight, prepare, sign and submit under a lease",
        interval_key: "MG_NODE_DISPATCH_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(2),
        concurrency_key: Some("MG_DISPATCHER_CONCURRENCY"),
        wake: Some(CHANNEL_DISPATCH),
        group: Group::Core,
        enabled_by: None,
        requires: None,
        tick: |e| {
            Box::pin(async move {
                let d = e.dispatch().await?;
                Ok(Tick { processed: d.claimed, due_in: None, retry_in: d.retry_in })
            })
        },
    },
    Worker {
        name: "node_observer",
        binary: "qtg-observer",
        summary: "polls SUBMITTED and OBSERVING nodes until a terminal answer",
        interval_key: "MG_NODE_OBSERVE_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(5),
        concurrency_key: Some("MG_OBSERVER_CONCURRENCY"),
        wake: Some(CHANNEL_OBSERVE),
        group: Group::Core,
        enabled_by: None,
        requires: None,
        tick: |e| {
            Box::pin(async move {
                let processed = e.observe_tick().await?;
                // Idle: wake when the next scheduled observation falls due.
                let due_in = if processed == 0 { e.observe_due_in().await? } else { None };
                Ok(Tick { processed, due_in, retry_in: None })
            })
        },
    },
    Worker {
        name: "node_recovery",
        binary: "qtg-recovery",
        summary: "decides UNKNOWN and stale SUBMITTING nodes by asking the venue (never a blind re-submit)",
        interval_key: "MG_NODE_RECOVERY_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(60),
        concurrency_key: Some("MG_RECOVERY_CONCURRENCY"),
        wake: Some(CHANNEL_RECOVER),
        group: Group::Core,
        enabled_by: None,
        requires: None,
        tick: |e| {
            Box::pin(async move {
                let processed = e.recover_tick().await?;
                let due_in = if processed == 0 { e.recovery_due_in().await? } else { None };
                Ok(Tick { processed, due_in, retry_in: None })
            })
        },
    },
    Worker {
        name: "evm_nonce_reaper",
        binary: "qtg-reaper",
        summary: "reclaims EVM nonce reservations no attempt ever signed or broadcast with, once they are old",
        interval_key: "MG_EVM_NONCE_REAPER_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(60),
        concurrency_key: None,
        wake: None,
        // The seed: when enabled it joins the core fail-fast group.
        group: Group::Core,
        enabled_by: Some(Flag { key: "MG_EVM_NONCE_REAPER_ENABLED", default: true, list: false }),
        requires: Some("MG_EVM_CHAINS"),
        tick: |e| Box::pin(async move { Ok(e.reap_nonces_tick().await?.into()) }),
    },
    Worker {
        name: "ccip_stranded_reaper",
        binary: "qtg-reaper",
        summary: "ends CCIP send intents nothing else will: releases never-broadcast ones (and their nonce), hands \
                  messages with no execution past the age to a person",
        interval_key: "MG_CCIP_STRANDED_REAPER_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(60),
        concurrency_key: None,
        wake: None,
        // The seed: when enabled it joins the core fail-fast group.
        group: Group::Core,
        enabled_by: Some(Flag { key: "MG_CCIP_STRANDED_REAPER_ENABLED", default: true, list: false }),
        requires: Some("MG_CCIP_CHAINS"),
        tick: |e| Box::pin(async move { Ok(e.reap_ccip_tick().await?.into()) }),
    },
    Worker {
        name: "callback_dispatcher",
        binary: "qtg-callback",
        summary: "delivers signed callbacks from the outbox, with retries and a dead-letter queue",
        interval_key: "MG_CALLBACK_DISPATCH_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(3),
        concurrency_key: None,
        wake: Some(CHANNEL_CALLBACK),
        group: Group::Sidecar,
        enabled_by: None,
        requires: None,
        tick: |e| Box::pin(async move { Ok(e.deliver_callbacks_tick().await?.into()) }),
    },
    Worker {
        name: "notification_dispatcher",
        binary: "qtg-callback",
        summary: "tells people what waits for them: routes the notifications outbox to Slack/Teams, signed webhooks \
                  and e-mail, once per event and channel, one bad channel never holding the others",
        interval_key: "MG_NOTIFY_DISPATCH_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(2),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: Some(Flag { key: "MG_NOTIFY_ENABLED", default: false, list: false }),
        requires: None,
        tick: |e| Box::pin(async move { Ok(e.notify_tick().await?.into()) }),
    },
    Worker {
        name: "expiration_checker",
        binary: "qtg-expiry",
        summary: "expires movements past their approval window",
        interval_key: "MG_EXPIRATION_CHECK_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(30),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: None,
        requires: None,
        tick: |e| Box::pin(async move { Ok(e.expire_movements_tick().await?.into()) }),
    },
    Worker {
        name: "template_proposal_expiration",
        binary: "qtg-expiry",
        summary: "expires template proposals past their review window",
        interval_key: "MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(30),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: None,
        requires: None,
        tick: |e| Box::pin(async move { Ok(e.expire_template_proposals_tick().await?.into()) }),
    },
    Worker {
        name: "executor_health",
        binary: "qtg-health",
        summary: "health-checks every executor and signer and records their identity",
        interval_key: "MG_EXECUTOR_HEALTH_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(60),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: None,
        requires: None,
        // Every entry each tick: report no work so the loop keeps its pace.
        tick: |e| {
            Box::pin(async move {
                e.refresh_health_tick().await?;
                Ok(Tick::default())
            })
        },
    },
    Worker {
        name: "capital_transfer_followup",
        binary: "qtg-followup",
        summary:
            "follows up stale capital transfers: creates a lost movement, closes finished ones, surfaces stuck ones",
        interval_key: "MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(60),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: Some(Flag { key: "MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED", default: false, list: false }),
        requires: None,
        tick: |e| Box::pin(async move { Ok(e.follow_up_capital_transfers_tick().await?.into()) }),
    },
    Worker {
        name: "balance_snapshot",
        binary: "qtg-balance",
        summary: "appends every venue's balances through the registry's balance fetchers and deletes old snapshots",
        interval_key: "MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(30),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: Some(Flag { key: "MG_BALANCE_SNAPSHOT_ENABLED", default: false, list: false }),
        requires: None,
        // Every venue each tick: report no work so the loop keeps its pace.
        tick: |e| {
            Box::pin(async move {
                e.snapshot_balances_tick().await?;
                Ok(Tick::default())
            })
        },
    },
    Worker {
        name: "balance_history_rollup",
        binary: "qtg-balance",
        summary: "rolls balance snapshots into hourly and daily first/last/min/max/count, once per bucket across \
                  replicas, kept longer than the snapshots",
        interval_key: "MG_BALANCE_HISTORY_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(300),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: Some(Flag { key: "MG_BALANCE_HISTORY_ENABLED", default: true, list: false }),
        requires: None,
        tick: |e| Box::pin(async move { Ok(e.roll_balance_history_tick().await?.into()) }),
    },
    Worker {
        name: "cex_transfer_ingest",
        binary: "qtg-balance",
        summary: "ingests the listed venue accounts' withdrawal and deposit history, links it to the nodes that \
                  explain it, alerts an unexplained withdrawal once",
        interval_key: "MG_CEX_TRANSFER_INGEST_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(60),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: Some(Flag { key: "MG_CEX_TRANSFER_INGEST_VENUES_CSV", default: false, list: true }),
        requires: None,
        // Every venue each tick: report no work so the loop keeps its pace.
        tick: |e| {
            Box::pin(async move {
                e.ingest_venue_transfers_tick().await?;
                Ok(Tick::default())
            })
        },
    },
    Worker {
        name: "verify_drift",
        binary: "qtg-drift",
        summary: "re-reads the on-chain facts the lanes rely on and compares them with the recorded baseline",
        interval_key: "MG_VERIFY_DRIFT_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(21600),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: Some(Flag { key: "MG_VERIFY_DRIFT_ENABLED", default: false, list: false }),
        requires: None,
        // Every scope each tick: report no work so the loop keeps its pace.
        tick: |e| {
            Box::pin(async move {
                e.verify_drift_tick().await?;
                Ok(Tick::default())
            })
        },
    },
    Worker {
        name: "ccip_drift",
        binary: "qtg-drift",
        summary: "re-reads the CCIP lane's on-chain facts (ramps, pools, rate limits, tokens) and compares them \
                  with the recorded baseline",
        interval_key: "MG_CCIP_DRIFT_POLL_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(300),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: Some(Flag { key: "MG_CCIP_ENABLED", default: false, list: false }),
        requires: Some("MG_CCIP_CHAINS"),
        tick: |e| {
            Box::pin(async move {
                e.ccip_drift_tick().await?;
                Ok(Tick::default())
            })
        },
    },
    Worker {
        name: "audit_outbox_promoter",
        binary: "qtg-audit",
        summary: "promotes audit_outbox rows into audit_events, in order and exactly once",
        interval_key: "MG_AUDIT_PROMOTE_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(1),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: None,
        requires: None,
        tick: |e| Box::pin(async move { Ok(e.promote_audit_tick().await?.into()) }),
    },
    Worker {
        name: "outbox_retention",
        binary: "qtg-audit",
        summary: "deletes audit_outbox rows promoted and callbacks acknowledged longer than \
                  MG_OUTBOX_RETENTION_SECONDS ago (audit_events and the movements stay)",
        interval_key: "MG_OUTBOX_RETENTION_INTERVAL_SECONDS",
        default_interval: Duration::from_secs(300),
        concurrency_key: None,
        wake: None,
        group: Group::Sidecar,
        enabled_by: Some(Flag { key: "MG_OUTBOX_RETENTION_ENABLED", default: true, list: false }),
        requires: None,
        tick: |e| Box::pin(async move { Ok(e.prune_outboxes_tick().await?.into()) }),
    },
];

/// The workers a binary runs (the all-in-one `qtg` runs them all).
pub fn of_binary(binary: &str) -> Vec<&'static Worker> {
    WORKERS.iter().filter(|w| binary == "qtg" || w.binary == binary).collect()
}

/// The worker binaries, each once, in table order.
pub fn binaries() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for w in WORKERS {
        if !out.contains(&w.binary) {
            out.push(w.binary);
        }
    }
    out
}

/// The entry of worker `name`.
pub fn by_name(name: &str) -> Option<&'static Worker> {
    WORKERS.iter().find(|w| w.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn repo_file(path: &str) -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn the_table_is_well_formed() {
        let names: BTreeSet<&str> = WORKERS.iter().map(|w| w.name).collect();
        assert_eq!(names.len(), WORKERS.len(), "worker names are unique");
        for w in WORKERS {
            assert!(w.binary.starts_with("qtg-") && w.interval_key.starts_with("MG_"), "{}", w.name);
            assert!(!w.default_interval.is_zero(), "{}", w.name);
            // The seed's order: core first, so the all-in-one starts core loops first.
        }
        let first_sidecar = WORKERS.iter().position(|w| w.group == Group::Sidecar).unwrap_or(WORKERS.len());
        assert!(WORKERS[first_sidecar..].iter().all(|w| w.group == Group::Sidecar), "core workers come first");
        assert_eq!(of_binary("qtg").len(), WORKERS.len());
        assert_eq!(of_binary("qtg-expiry").len(), 2);
        assert!(by_name("node_dispatcher").is_some_and(|w| w.wake.is_some()));
    }

    /// The seed's CCIP workers: the stranded reaper joins the core fail-fast group (on by
    /// default, every 60 s, idle without MG_CCIP_CHAINS); ccip_drift is a sidecar behind
    /// MG_CCIP_ENABLED.
    #[test]
    fn the_ccip_workers_are_where_the_seed_puts_them() {
        let reaper = by_name("ccip_stranded_reaper").expect("ccip_stranded_reaper");
        assert_eq!((reaper.binary, reaper.group), ("qtg-reaper", Group::Core));
        assert_eq!(reaper.default_interval, Duration::from_secs(60));
        assert_eq!(reaper.interval_key, "MG_CCIP_STRANDED_REAPER_INTERVAL_SECONDS");
        assert!(reaper.enabled_by.is_some_and(|f| f.key == "MG_CCIP_STRANDED_REAPER_ENABLED" && f.default));
        assert_eq!(reaper.requires, Some("MG_CCIP_CHAINS"));
        let drift = by_name("ccip_drift").expect("ccip_drift");
        assert_eq!((drift.binary, drift.group), ("qtg-drift", Group::Sidecar));
        assert_eq!(drift.interval_key, "MG_CCIP_DRIFT_POLL_INTERVAL_SECONDS");
        assert!(drift.enabled_by.is_some_and(|f| f.key == "MG_CCIP_ENABLED" && !f.default));
    }

    /// The Helm chart, the kustomize base, docs/binaries.md and the workspace list exactly the
    /// table's worker binaries, with the table's default intervals.
    #[test]
    fn deployments_and_docs_follow_the_table() {
        let values = repo_file("helm/qtg/values.yaml");
        let section = &values[values.find("\nworkers:").expect("values.yaml has workers:")..];
        let section = &section[..section.find("\nmigrations:").unwrap_or(section.len())];
        let chart: BTreeSet<&str> = section
            .lines()
            .filter_map(|l| l.trim().strip_prefix("binary: "))
            .filter(|b| !matches!(*b, "qtg" | "qtg-api"))
            .collect();
        let table: BTreeSet<&str> = binaries().into_iter().collect();
        assert_eq!(chart, table, "helm/qtg/values.yaml workers vs the worker table");
        for w in WORKERS {
            let default = format!("{}: \"{}\"", w.interval_key, w.default_interval.as_secs_f64());
            assert!(section.contains(&default), "values.yaml should set {default}");
        }
        let workspace = repo_file("Cargo.toml");
        let readme = repo_file("docs/binaries.md");
        for binary in table {
            let dir = binary.trim_start_matches("qtg-");
            let main = repo_file(&format!("services/{dir}/src/main.rs"));
            assert!(main.contains(&format!("run_worker_binary(\"{binary}\")")), "services/{dir} runs {binary}");
            assert!(workspace.contains(&format!("\"services/{dir}\"")), "workspace lists services/{dir}");
            repo_file(&format!("k8s/base/deployment-{dir}.yaml"));
            assert!(readme.contains(&format!("| `{binary}` |")), "docs/binaries.md's table lists {binary}");
        }
    }
}
