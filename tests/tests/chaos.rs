//! The seeded small version of `make chaos` (docs/chaos.md): every worker binary in two
//! replicas over a private PostgreSQL cluster, ~40 movements over every lane, SIGKILLs every
//! few seconds, a dispatcher paused while preparing and one right after its arm, a PostgreSQL
//! crash-restart, the venue, the remote executor and the callback receiver down for a while and
//! a dispatcher cut off from Postgres (and restarted while cut) — then no duplicate at any boundary, no callback lost,
//! every movement explained.

use qtg_tests::chaos::{run, Profile};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_seeded_small_chaos_run_finds_no_duplicate_and_loses_no_callback() -> anyhow::Result<()> {
    let seed = std::env::var("QTG_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    let report = run(Profile::small(seed)).await?;
    println!("{}", report.table());
    assert!(report.passed(), "{}", report.table());
    assert!(report.kills >= 5 && report.pauses() == 2 && report.pg_restarts == 1, "{}", report.table());
    // The cut dispatcher is also restarted while cut: it exits (no database at start) and
    // comes back once the database is reachable.
    assert!(!report.exits.is_empty(), "{}", report.table());
    assert_eq!((report.duplicates, report.callbacks_lost), (0, 0));
    Ok(())
}
