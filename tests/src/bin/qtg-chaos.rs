//! `make chaos`: the fault-injection run of `qtg_tests::chaos` at full size (docs/chaos.md).
//!
//! `qtg-chaos [--seed N] [--small] [--movements N]` prints the run's table and exits 1 when a
//! check failed (a duplicate, a lost callback, a movement nobody can explain, a panic).

use qtg_tests::chaos::{run, Profile};

fn usage() -> ! {
    eprintln!("usage: qtg-chaos [--seed N] [--small] [--movements N]");
    std::process::exit(2);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut seed, mut small, mut movements) = (1u64, false, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage()),
            "--small" => small = true,
            "--movements" => movements = Some(args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    let mut profile = if small { Profile::small(seed) } else { Profile::full(seed) };
    if let Some(n) = movements {
        // The same pace: the span grows with the count.
        profile.span = profile.span.mul_f64(n as f64 / profile.movements as f64);
        profile.movements = n;
    }
    eprintln!("chaos: {profile:?}");
    let full = !small && movements.is_none();
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
