//! `make chaos`: the fault-injection run of `qtg_tests::chaos` at full size (docs/chaos.md).
//!
//! `qtg-chaos [--seed N] [--small] [--movements N] [--failover sync|async]` prints the run's
//! table and exits 1 when a check failed (a duplicate, a lost callback, a movement nobody can
//! explain, a panic). `--failover` runs PostgreSQL failovers instead of the other faults
//! (docs/architecture.md §16): `sync` over a synchronous standby (no duplicate may appear);
//! `async` over an asynchronous one whose replication is stopped before each failover — what
//! it loses shows at the boundaries.

use qtg_tests::chaos::{run, Profile};

fn usage() -> ! {
    eprintln!("usage: qtg-chaos [--seed N] [--small] [--movements N] [--failover sync|async]");
    std::process::exit(2);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut seed, mut small, mut movements, mut failover) = (1u64, false, None, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage()),
            "--small" => small = true,
            "--failover" => match args.next().as_deref() {
                Some("sync") => failover = Some(true),
                Some("async") => failover = Some(false),
                _ => usage(),
            },
            "--movements" => movements = Some(args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    let mut profile = match failover {
        Some(sync) => {
            let mut p = Profile::failover(seed);
            p.sync_replication = sync;
            if !small {
                (p.movements, p.span, p.failovers) = (200, std::time::Duration::from_secs(200), 6);
            }
            p
        }
        None if small => Profile::small(seed),
        None => Profile::full(seed),
    };
    if let Some(n) = movements {
        // The same pace: the span grows with the count.
        profile.span = profile.span.mul_f64(n as f64 / profile.movements as f64);
        profile.movements = n;
    }
    eprintln!("chaos: {profile:?}");
    let full = !small && movements.is_none() && failover.is_none();
    let mut report = run(profile).await?;
    if full {
        // What `make chaos` promises (docs/chaos.md): at least 500 movements, 50 kills, 5 pauses
        // and a PostgreSQL restart.
        report.require(500, 50, 5, 1);
    }
    println!("{}", report.table());
    if !report.passed() {
        std::process::exit(1);
    }
    Ok(())
}
