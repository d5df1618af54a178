//! The fault-injection run behind `make chaos` (`qtg-chaos`) and its seeded small version in
//! `make test` (`tests/tests/chaos.rs`); docs/chaos.md describes it and records its results.
//!
//! Every worker binary runs in 2–3 replicas over one database on a private PostgreSQL cluster
//! (so that it can be restarted), with a callback receiver, the remote example executor,
//! `qtg-venue-sim` and anvil. A stream of movements over mixed templates (sim nodes with
//! scripted faults, the remote executor over gRPC and HTTP, CEX→CEX, EVM transfers) runs while,
//! on a schedule drawn from the seed, processes are SIGKILLed and restarted, a dispatcher is
//! SIGSTOPped past its lease and grace while it prepares or right after it armed, PostgreSQL is
//! crash-restarted, the venue, the remote executor and the receiver stop for a while and one
//! dispatcher is cut off from Postgres. Then the run waits for quiescence and checks what the
//! boundaries saw — submit calls the sim venue recorded, withdraw requests the CEX venue
//! logged, transactions on the chain, executions the remote executor logged — not what qtg's
//! own ledgers say.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::{
    bin_dir, http_client, registry_file, Anvil, DbProxy, Proc, VenueSim, ANVIL_ADDR_0, ANVIL_ADDR_2, ANVIL_KEY_0,
    ANVIL_KEY_1, BOOTSTRAP_KEY, EXAMPLE_HMAC_SECRET, SIM_B_DEPOSIT, VENUE_SIM_CREDENTIALS,
};

/// How big a run is. [`Profile::small`] is the version `make test` runs; [`Profile::full`]
/// is `make chaos`.
#[derive(Debug, Clone)]
pub struct Profile {
    pub seed: u64,
    pub movements: usize,
    /// How long the stream of movements and the fault schedule last.
    pub span: Duration,
    pub dispatchers: usize,
    /// Replicas of every other worker binary (and of the API).
    pub replicas: usize,
    /// A SIGKILL every `kill_gap_ms.0..kill_gap_ms.1` milliseconds.
    pub kill_gap_ms: (u64, u64),
    pub pauses: usize,
    pub pg_restarts: usize,
    /// How long the venue, the remote executor and the receiver are down, and the cut lasts.
    pub outage: Duration,
    /// Whether processes are SIGKILLed, and the venue, executor, receiver and a dispatcher's
    /// database go away for `outage`.
    pub kills: bool,
    pub outages: bool,
    /// PostgreSQL failovers: the database is a primary with a streaming standby behind one
    /// proxy (the `-rw` Service) that every process connects through; the primary is killed
    /// right after an arm and while an answer is being recorded, the standby promoted.
    pub failovers: usize,
    /// The standby is synchronous (`synchronous_standby_names = '*'`).
    pub sync_replication: bool,
    pub quiesce_timeout: Duration,
}

impl Profile {
    pub fn small(seed: u64) -> Profile {
        Profile {
            seed,
            movements: 40,
            span: Duration::from_secs(60),
            dispatchers: 3,
            replicas: 2,
            kill_gap_ms: (2500, 5000),
            pauses: 2,
            pg_restarts: 1,
            outage: Duration::from_secs(8),
            kills: true,
            outages: true,
            failovers: 0,
            sync_replication: true,
            quiesce_timeout: Duration::from_secs(150),
        }
    }

    /// Two PostgreSQL failovers under synchronous replication, every lane in flight, nothing
    /// else failing (`tests/tests/failover.rs`; `make chaos FAILOVER=sync` or `async` for a longer run).
    pub fn failover(seed: u64) -> Profile {
        Profile {
            seed,
            movements: 36,
            span: Duration::from_secs(40),
            dispatchers: 2,
            replicas: 1,
            kill_gap_ms: (2500, 5000),
            pauses: 0,
            pg_restarts: 0,
            outage: Duration::from_secs(8),
            kills: false,
            outages: false,
            failovers: 2,
            sync_replication: true,
            quiesce_timeout: Duration::from_secs(150),
        }
    }

    pub fn full(seed: u64) -> Profile {
        Profile {
            seed,
            movements: 520,
            span: Duration::from_secs(330),
            dispatchers: 3,
            replicas: 2,
            kill_gap_ms: (2000, 5000),
            pauses: 6,
            pg_restarts: 2,
            outage: Duration::from_secs(12),
            kills: true,
            outages: true,
            failovers: 0,
            sync_replication: true,
            quiesce_timeout: Duration::from_secs(300),
        }
    }
}

/// A small deterministic generator (splitmix64): the seed alone fixes the schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi.saturating_sub(lo).max(1))
    }
}

/// A PostgreSQL cluster of the run's own, on a free port, that the run may crash-restart
/// (`pg_ctl stop -m immediate`, then start: WAL recovery, every connection gone). As root it
/// runs as the `postgres` user (initdb refuses root).
pub struct PrivatePg {
    dir: PathBuf,
    bindir: PathBuf,
    port: u16,
    pub url: String,
}

impl PrivatePg {
    pub async fn start() -> anyhow::Result<PrivatePg> {
        Self::primary(&[]).await
    }

    fn bindir() -> anyhow::Result<PathBuf> {
        std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").exists())
            .max()
            .context(
                "no PostgreSQL server binaries under /usr/lib/postgresql (scripts/ensure-postgres.sh installs them)",
            )
    }

    /// A cluster directory of its own and a free port (nothing started).
    fn place() -> anyhow::Result<PrivatePg> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::temp_dir().join(format!("qtg-chaos-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let pg = PrivatePg {
            dir,
            bindir: Self::bindir()?,
            port,
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        };
        if is_root() {
            run_tool(std::process::Command::new("chown").arg("-R").arg("postgres").arg(&pg.dir))?;
        }
        Ok(pg)
    }

    /// A new cluster whose postgresql.conf also carries `conf` (copied to its standbys).
    pub async fn primary(conf: &[(&str, &str)]) -> anyhow::Result<PrivatePg> {
        let pg = Self::place()?;
        let data = pg.dir.join("data");
        run_tool(pg.as_postgres("initdb").arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "-E", "UTF8"]))?;
        if !conf.is_empty() {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(data.join("postgresql.conf"))?;
            for (k, v) in conf {
                writeln!(f, "{k} = '{v}'")?;
            }
        }
        pg.start_server()?;
        Ok(pg)
    }

    /// A hot standby of the primary at `upstream` (`host:port`; a proxy in front of it when
    /// the replication link is to be cut), streaming from it (`pg_basebackup -R`: its
    /// configuration, `synchronous_standby_names` included, is the primary's).
    pub async fn standby_of(upstream: &str) -> anyhow::Result<PrivatePg> {
        let pg = Self::place()?;
        let (host, port) = upstream.rsplit_once(':').context("host:port")?;
        run_tool(
            pg.as_postgres("pg_basebackup")
                .args(["-h", host, "-p", port, "-U", "postgres", "-D"])
                .arg(pg.dir.join("data"))
                .args(["-R", "-X", "stream", "-c", "fast"]),
        )?;
        pg.start_server()?;
        Ok(pg)
    }

    /// `host:port`, as a proxy forwards to it.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server dies at once (no checkpoint, every connection gone).
    pub fn kill(&self) -> anyhow::Result<()> {
        run_tool(self.as_postgres("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "stop"]))
    }

    /// A standby becomes a primary (waits until it accepts writes).
    pub fn promote(&self) -> anyhow::Result<()> {
        run_tool(self.as_postgres("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-w", "promote"]))
    }

    fn as_postgres(&self, tool: &str) -> std::process::Command {
        let path = self.bindir.join(tool);
        if is_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            std::process::Command::new(path)
        }
    }

    fn start_server(&self) -> anyhow::Result<()> {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c max_connections=400 -c fsync=off",
            self.port,
            self.dir.display()
        );
        run_tool(
            self.as_postgres("pg_ctl")
                .arg("-D")
                .arg(self.dir.join("data"))
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-w", "-o", &opts, "start"]),
        )
    }

    /// A crash and a restart: the server dies without a checkpoint, comes back through WAL
    /// recovery. Returns how long it was away.
    pub fn crash_restart(&self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.kill()?;
        self.start_server()?;
        Ok(t.elapsed())
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let _ = self
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A primary with a streaming hot standby, as a PostgreSQL operator runs it: with
/// `sync`, `synchronous_standby_names = '*'` (a commit returns once the standby flushed it),
/// else asynchronous. [`ReplicatedPg::fail_over`] is a failover as CloudNativePG does one.
pub struct ReplicatedPg {
    pub primary: PrivatePg,
    pub standby: PrivatePg,
    pub sync: bool,
    /// The standby's link to the primary (a proxy that can be cut).
    link: DbProxy,
}

impl ReplicatedPg {
    pub async fn start(sync: bool) -> anyhow::Result<ReplicatedPg> {
        let conf: &[(&str, &str)] = if sync { &[("synchronous_standby_names", "*")] } else { &[] };
        let primary = PrivatePg::primary(conf).await?;
        let link = DbProxy::start(&primary.url).await?;
        let standby = PrivatePg::standby_of(&link.addr()).await?;
        let pair = ReplicatedPg { primary, standby, sync, link };
        pair.wait_streaming().await?;
        Ok(pair)
    }

    /// Until the primary has a standby streaming (synchronously, with `sync`).
    async fn wait_streaming(&self) -> anyhow::Result<()> {
        let db = PgPool::connect(&self.primary.url).await?;
        let want = if self.sync { "sync" } else { "async" };
        crate::wait_until("a streaming standby", Duration::from_secs(60), || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1",
            )
            .bind(want)
            .fetch_one(&db)
            .await?;
            Ok(n > 0)
        })
        .await?;
        db.close().await;
        Ok(())
    }

    /// Cuts the standby's link to the primary: commits go on on the primary (which does not
    /// wait for an asynchronous standby) and never reach the standby — the lag a failover to
    /// an asynchronous standby loses.
    pub fn cut_replication(&self) {
        self.link.cut();
    }

    /// The primary dies at once; `proxy` (the `-rw` Service) drops every connection; the
    /// standby is promoted and the proxy sends new connections to it; a new standby is made of
    /// it in the old one's place (with `sync`, commits on the new primary wait for it, as with
    /// CloudNativePG's `dataDurability: required`). Returns how long writes were impossible.
    pub async fn fail_over(&mut self, proxy: &DbProxy) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.primary.kill()?;
        proxy.cut();
        self.standby.promote()?;
        proxy.switch(&self.standby.addr());
        self.link = DbProxy::start(&self.standby.url).await?;
        let fresh = PrivatePg::standby_of(&self.link.addr()).await?;
        let old = std::mem::replace(&mut self.primary, std::mem::replace(&mut self.standby, fresh));
        drop(old);
        self.wait_streaming().await?;
        Ok(t.elapsed())
    }
}

/// Whether the tests run as root (PostgreSQL's tools and PgBouncer then run as `postgres`).
pub fn is_root() -> bool {
    std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn run_tool(cmd: &mut std::process::Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The movements' callback receiver: keeps every event id it was sent; while it is down it
/// accepts no connection and answers 503 on connections kept alive from before.
#[derive(Clone)]
struct Receiver {
    addr: std::net::SocketAddr,
    up: Arc<AtomicBool>,
    /// Answers only after 20 s (longer than qtg's callback deadline): a slow receiver, which
    /// must hold up nothing but its own callbacks.
    slow: Arc<AtomicBool>,
    got: Arc<Mutex<HashMap<String, u32>>>,
    task: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

async fn receive(
    axum::extract::State(r): axum::extract::State<Receiver>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    if !r.up.load(Ordering::SeqCst) {
        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
    }
    if r.slow.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(20)).await;
    }
    let id = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["event_id"].as_str().map(str::to_string));
    match id {
        Some(id) => {
            *r.got.lock().expect("receiver").entry(id).or_default() += 1;
            axum::http::StatusCode::OK
        }
        None => axum::http::StatusCode::BAD_REQUEST,
    }
}

impl Receiver {
    async fn start() -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let r = Receiver {
            addr: listener.local_addr()?,
            up: Arc::new(AtomicBool::new(true)),
            slow: Arc::new(AtomicBool::new(false)),
            got: Arc::default(),
            task: Arc::default(),
        };
        r.serve(listener);
        Ok(r)
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(self.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        *self.task.lock().expect("receiver") = Some(task);
    }

    fn stop(&self) {
        self.up.store(false, Ordering::SeqCst);
        if let Some(t) = self.task.lock().expect("receiver").take() {
            t.abort();
        }
    }

    async fn resume(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    note(&format!("receiver rebind: {e}"));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.serve(listener);
        self.up.store(true, Ordering::SeqCst);
        Ok(())
    }
}

fn note(msg: &str) {
    eprintln!("chaos: {msg}");
}

/// One replica of a binary: the process now running and the ones killed before it (their
/// logs are checked too).
struct Slot {
    name: String,
    binary: &'static str,
    db_url: String,
    env: Vec<(String, String)>,
    live: Option<Proc>,
    past: Vec<Proc>,
    /// When a process that ended on its own is started again (a restart backoff).
    restart_at: Option<Instant>,
}

impl Slot {
    async fn spawn(&mut self) -> anyhow::Result<()> {
        let pairs: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.restart_at = None;
        self.live = Some(Proc::spawn(self.binary, &self.db_url, &pairs).await?);
        Ok(())
    }

    async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut p) = self.live.take() {
            p.signal("KILL");
            let _ = p.wait_exit(Duration::from_secs(10)).await;
            self.past.push(p);
        }
        Ok(())
    }

    /// Like Kubernetes restarting a container: if the process ended on its own (a worker
    /// started while its database was unreachable exits, by design), start it again. Answers
    /// how it ended and its last log line.
    async fn supervise(&mut self) -> anyhow::Result<Option<String>> {
        if self.restart_at.is_some_and(|t| Instant::now() >= t) {
            self.restart_at = None;
            self.spawn().await?;
            return Ok(None);
        }
        let Some(status) = self.live.as_mut().and_then(Proc::exited) else { return Ok(None) };
        // The error it ended with (`Error: …`), else its last line.
        let last = self.live.as_ref().map(|p| {
            let lines = p.lines.lock().expect("log lock");
            lines.iter().rev().find(|l| l.starts_with("Error:")).or(lines.last()).cloned().unwrap_or_default()
        });
        let last = last.unwrap_or_default();
        if let Some(p) = self.live.take() {
            self.past.push(p);
        }
        self.restart_at = Some(Instant::now() + Duration::from_secs(2));
        let said = Some(message(&last)).filter(|m| !m.is_empty()).unwrap_or_else(|| last.chars().take(200).collect());
        Ok(Some(format!("{} exited ({status}): {said}", self.name)))
    }

    fn signal(&self, sig: &str) {
        if let Some(p) = &self.live {
            p.signal(sig);
        }
    }

    fn procs(&self) -> impl Iterator<Item = &Proc> {
        self.past.iter().chain(self.live.iter())
    }
}

/// What the run counted and found.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub movements: usize,
    pub by_state: BTreeMap<String, i64>,
    /// Failed nodes by template, node and error code: what made movements fail.
    pub failed_nodes: BTreeMap<String, i64>,
    pub nodes: i64,
    pub processes: usize,
    pub kills: usize,
    /// Processes that ended on their own and were started again (as Kubernetes would).
    pub exits: Vec<String>,
    pub pauses_in_prepare: usize,
    pub pauses_after_arm: usize,
    pub pg_restarts: usize,
    /// PostgreSQL failovers: when each struck (right after an arm, while an answer was being
    /// recorded) and how long writes were impossible.
    pub failovers: Vec<String>,
    /// The node each pause caught, what became of it and what the venue saw.
    pub paused_nodes: Vec<String>,
    pub outages: Vec<String>,
    pub sim_submit_calls: i64,
    pub refused_by_fence: i64,
    pub stale_answers_dropped: i64,
    pub cex_requests: usize,
    pub chain_transactions: usize,
    pub remote_executions: usize,
    /// EVM nodes whose signer signed as another address (each gave its nonce back).
    pub refused_signatures: i64,
    /// Reservations still held by a finished node at the end (a re-claimed node that may
    /// have a signature keeps its nonce for the reaper).
    pub nonces_held: usize,
    pub duplicates: usize,
    /// Nodes whose final state the boundary contradicts (COMPLETED without exactly one
    /// execution there, FAILED with one).
    pub verdicts_disagreeing: usize,
    /// Movements the API created, and nodes a boundary executed, that the database no longer
    /// has (what a failover to a standby without the last commits loses).
    pub forgotten: usize,
    pub callbacks: i64,
    pub callbacks_dlq: i64,
    pub callbacks_redelivered: usize,
    pub callbacks_lost: usize,
    pub audit_missing: i64,
    pub quiescence: Duration,
    pub wall: Duration,
    /// Every violation found, each in a sentence; empty when the run passed.
    pub problems: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }

    /// Adds a problem for each figure below its floor (what `make chaos` promises to cover).
    pub fn require(&mut self, movements: usize, kills: usize, pauses: usize, pg_restarts: usize) {
        for (what, got, floor) in [
            ("movements", self.movements, movements),
            ("kills", self.kills, kills),
            ("pauses", self.pauses(), pauses),
            ("PostgreSQL restarts", self.pg_restarts, pg_restarts),
        ] {
            if got < floor {
                self.problems.push(format!("only {got} {what}; the run must cover at least {floor}"));
            }
        }
    }

    pub fn pauses(&self) -> usize {
        self.pauses_in_prepare + self.pauses_after_arm
    }

    /// The table `make chaos` prints (and docs/chaos.md records).
    pub fn table(&self) -> String {
        let states = self.by_state.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ");
        let rows: Vec<(&str, String)> = vec![
            ("seed", self.seed.to_string()),
            ("movements", format!("{} ({states})", self.movements)),
            ("nodes", self.nodes.to_string()),
            (
                "failed nodes (template/node: code)",
                self.failed_nodes.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "),
            ),
            ("processes started", self.processes.to_string()),
            ("kills (SIGKILL + restart)", self.kills.to_string()),
            ("exits on their own, restarted", self.exits.len().to_string()),
            (
                "pauses (SIGSTOP past lease + grace)",
                format!(
                    "{} ({} while preparing, {} right after arm)",
                    self.pauses(),
                    self.pauses_in_prepare,
                    self.pauses_after_arm
                ),
            ),
            ("PostgreSQL crash-restarts", self.pg_restarts.to_string()),
            ("PostgreSQL failovers", format!("{} ({})", self.failovers.len(), self.failovers.join("; "))),
            ("outages", self.outages.join(", ")),
            ("sim venue submit calls", self.sim_submit_calls.to_string()),
            ("  refused by the fence (void, late, superseded)", self.refused_by_fence.to_string()),
            ("  stale answers dropped (claim lost, stale)", self.stale_answers_dropped.to_string()),
            ("CEX venue withdraw requests", self.cex_requests.to_string()),
            ("chain transactions", self.chain_transactions.to_string()),
            ("remote executor executions", self.remote_executions.to_string()),
            ("refused signatures (nonce given back)", self.refused_signatures.to_string()),
            ("  nonces still held by a finished node", self.nonces_held.to_string()),
            ("duplicates (must be 0)", self.duplicates.to_string()),
            ("verdicts the boundary contradicts (must be 0)", self.verdicts_disagreeing.to_string()),
            ("movements and executions the database forgot (must be 0)", self.forgotten.to_string()),
            (
                "callbacks (sent or in DLQ)",
                format!(
                    "{} ({} in DLQ, {} redelivered)",
                    self.callbacks, self.callbacks_dlq, self.callbacks_redelivered
                ),
            ),
            ("callbacks lost (must be 0)", self.callbacks_lost.to_string()),
            ("transitions and audit events unpaired (must be 0)", self.audit_missing.to_string()),
            ("time to quiescence", format!("{:.1} s", self.quiescence.as_secs_f64())),
            ("wall time", format!("{:.1} s", self.wall.as_secs_f64())),
            ("result", if self.passed() { "PASS".into() } else { format!("FAIL ({} problems)", self.problems.len()) }),
        ];
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (k, v) in rows {
            out.push_str(&format!("| {k:<width$} | {v} |\n"));
        }
        for n in &self.paused_nodes {
            out.push_str(&format!("paused node: {n}\n"));
        }
        for e in &self.exits {
            out.push_str(&format!("exit: {e}\n"));
        }
        for p in &self.problems {
            out.push_str(&format!("problem: {p}\n"));
        }
        out
    }
}

/// The lanes a movement can take.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Lane {
    Sim(&'static str),
    Remote(&'static str),
    Cex,
    Evm,
    /// An EVM transfer whose signer signs as another address: refused after its nonce was
    /// reserved, which must give the nonce back at once (the next transfer takes it).
    EvmRefused,
}

const SIM_TEMPLATES: [&str; 7] = [
    "chaos.sim.chain",
    "chaos.sim.fanout",
    "chaos.sim.prepare",
    "chaos.sim.hold",
    "chaos.sim.unknown",
    "chaos.sim.timeout",
    "chaos.sim.refused",
];

fn sim(key: &str, script: Value) -> Value {
    json!({"node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
           "config": {"sim": script}})
}

fn remote(key: &str, executor: &str, example: Value) -> Value {
    json!({"node_key": key, "node_kind": "action", "action_type": "transfer", "executor_key": executor,
           "config": {"example": example}})
}

fn templates() -> anyhow::Result<Vec<Value>> {
    let mut t = vec![
        json!({"template_key": "chaos.sim.chain", "nodes": [sim("a", json!({"observe_polls": 2})), sim("b", json!({}))],
               "edges": [{"from": "a", "to": "b"}]}),
        json!({"template_key": "chaos.sim.fanout",
        "nodes": [
            sim("a", json!({})), sim("b", json!({"observe_polls": 1})), sim("c", json!({})), sim("d", json!({}))
        ],
        "edges": [
            {"from": "a", "to": "b"}, {"from": "a", "to": "c"}, {"from": "b", "to": "d"},
            {"from": "c", "to": "d"}
        ]}),
        // A slow prepare: where a pause "while preparing" lands.
        json!({"template_key": "chaos.sim.prepare", "nodes": [sim("prep", json!({"prepare_delay_ms": 2500}))]}),
        // The submit call is on the wire 1.5 s after the arm: where a pause "right after the
        // arm" lands, and a kill leaves a SUBMITTING node for recovery.
        json!({"template_key": "chaos.sim.hold", "nodes": [sim("hold", json!({"submit_hold_ms": 1500}))]}),
        // Scripted faults: the venue executed it but answered UNKNOWN, or no answer in time.
        json!({"template_key": "chaos.sim.unknown", "nodes": [sim("u", json!({"submit": "unknown"}))]}),
        json!({
            "template_key": "chaos.sim.timeout", "nodes": [sim("t", json!({"submit": "timeout", "delay_ms": 3500}))]
        }),
        json!({"template_key": "chaos.sim.refused", "nodes": [sim("r", json!({"preflight": "fail"}))]}),
        json!({"template_key": "chaos.remote",
               "nodes": [
                   remote("g", "exec.ex.grpc", json!({"observe_polls": 1})), remote("h", "exec.ex.http", json!({}))
               ],
               "edges": [{"from": "g", "to": "h"}]}),
        json!({"template_key": "chaos.evm", "nodes": [{
            "node_key": "send", "node_kind": "action", "action_type": "evm_transfer",
            "executor_key": "exec.evm.transfer", "signer_key": "signer.evm.local", "signing_required": true,
            "config": {"chain_id": 31337}}]}),
        json!({"template_key": "chaos.evm.refused", "nodes": [{
            "node_key": "send", "node_kind": "action", "action_type": "evm_transfer",
            "executor_key": "exec.evm.transfer", "signer_key": "signer.evm.other", "signing_required": true,
            "config": {"chain_id": 31337}}]}),
    ];
    let cex: Value = serde_json::from_str(&std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/cex-demo-template.json"),
    )?)?;
    t.push(cex);
    Ok(t)
}

/// The lane of movement `i`: about half sim (faults included), the rest remote, CEX and EVM;
/// every 20th (from the 11th) an EVM transfer whose signature is refused.
fn pick_lane(rng: &mut Rng) -> Lane {
    match rng.below(100) {
        0..=49 => Lane::Sim(SIM_TEMPLATES[rng.below(SIM_TEMPLATES.len())]),
        50..=64 => Lane::Remote("chaos.remote"),
        65..=79 => Lane::Cex,
        _ => Lane::Evm,
    }
}

/// The wei movement `i` of the EVM lane sends: unique, so the chain tells its transactions apart.
fn evm_wei(i: usize) -> u128 {
    1_000_000_000 + i as u128
}

fn body(lane: Lane, i: usize, callback_url: &str) -> Value {
    let (template, intent) = match lane {
        Lane::Sim(t) | Lane::Remote(t) => {
            (t, json!({"asset": "USDC", "amount": "250.00", "source": "venue-a", "destination": "0xdest"}))
        }
        Lane::Cex => (
            "demo.cex.a_to_b",
            json!({
                "asset": "USDT", "amount": format!("20.{:04}", i % 10_000), "source": "sim_a",
                "destination": SIM_B_DEPOSIT
            }),
        ),
        Lane::Evm | Lane::EvmRefused => (
            if lane == Lane::Evm { "chaos.evm" } else { "chaos.evm.refused" },
            json!({
                "asset": "ETH", "amount": format!("0.{:018}", evm_wei(i)), "source": ANVIL_ADDR_0,
                "destination": ANVIL_ADDR_2
            }),
        ),
    };
    json!({
        "template_key": template, "intent": intent, "idempotency_key": format!("chaos-{i}"),
        "callback_url": callback_url
    })
}

/// The API replicas as the movement stream sees them: fixed addresses (a restarted replica
/// comes back on its port), tried in turn until one answers.
#[derive(Clone)]
struct Apis {
    bases: Vec<String>,
    http: reqwest::Client,
}

impl Apis {
    /// `method path` on any replica, retried (the same request: the idempotency key makes a
    /// repeat harmless) until an answer that is not a transport error or a 5xx, or `within`.
    async fn call(
        &self,
        method: &str,
        path: &str,
        key: &str,
        body: Option<&Value>,
        within: Duration,
    ) -> anyhow::Result<(u16, Value)> {
        let deadline = Instant::now() + within;
        let mut n = 0usize;
        loop {
            let base = &self.bases[n % self.bases.len()];
            n += 1;
            let url = format!("{base}{path}");
            let req = if method == "POST" {
                self.http.post(&url).json(&body.cloned().unwrap_or(json!({})))
            } else {
                self.http.get(&url)
            };
            let res = req.bearer_auth(key).timeout(Duration::from_secs(5)).send().await;
            let last = match res {
                Ok(r) if r.status().as_u16() < 500 => {
                    let status = r.status().as_u16();
                    let v = r.json().await.unwrap_or(Value::Null);
                    return Ok((status, v));
                }
                Ok(r) => format!("{}", r.status()),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                bail!("{method} {path}: no replica answered within {within:?}; last: {last}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn key(&self, principal: &str, role: &str) -> anyhow::Result<String> {
        let (s, v) = self
            .call(
                "POST",
                "/v3/api-keys",
                BOOTSTRAP_KEY,
                Some(&json!({"principal": principal, "roles": [role]})),
                Duration::from_secs(30),
            )
            .await?;
        anyhow::ensure!(s == 201, "create key {principal}: {s} {v}");
        Ok(v["secret"].as_str().context("secret")?.to_string())
    }
}

/// Creates and approves movement `i`; answers its id. Retries survive a killed API replica
/// and a restarting database: creation is idempotent by key, and an approval that already
/// happened is recognised by reading the movement.
async fn create(apis: &Apis, requester: &str, approver: &str, body: &Value) -> anyhow::Result<String> {
    let within = Duration::from_secs(120);
    let (s, m) = apis.call("POST", "/v3/movements", requester, Some(body), within).await?;
    anyhow::ensure!(s == 201 || s == 200, "create {}: {s} {m}", body["idempotency_key"]);
    let id = m["id"].as_str().context("movement id")?.to_string();
    let deadline = Instant::now() + within;
    loop {
        let (s, v) = apis.call("POST", &format!("/v3/movements/{id}/approve"), approver, None, within).await?;
        // 404: the movement the API answered for is gone (a failover lost it) — the check
        // reports it as forgotten.
        if s == 200 || s == 404 {
            return Ok(id);
        }
        let (_, m) = apis.call("GET", &format!("/v3/movements/{id}"), requester, None, within).await?;
        if m["approval_status"] == "approved" {
            return Ok(id);
        }
        anyhow::ensure!(Instant::now() < deadline, "approve {id}: {s} {v}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The call deadline (`MG_EXECUTOR_TIMEOUT_MS`), the tests' clock-skew margin and the recovery
/// grace; the lease and the pause follow from them (docs/architecture.md §6.4).
const CALL_TIMEOUT_S: f64 = 3.0;
const SKEW_S: f64 = 0.2;
const GRACE_S: f64 = 5.0;
/// `MG_DISPATCH_LEASE_SECONDS`' default: preflight + prepare + sign deadlines + 2 × skew.
const LEASE_S: f64 = 3.0 * CALL_TIMEOUT_S + 2.0 * SKEW_S;
/// A pause outlasts the lease (another dispatcher re-claims) and the grace (recovery decides
/// the armed attempt), with room for their loops to act.
const PAUSE_S: f64 = if LEASE_S > GRACE_S { LEASE_S } else { GRACE_S } + 6.0;

/// Every loop of the run ticks at least every 10 s; a heartbeat three times older is stale.
const STALE_SECONDS: f64 = 30.0;

const TERMINAL: [&str; 6] = ["COMPLETED", "FAILED", "CANCELLED", "REJECTED", "EXPIRED", "MANUAL_INTERVENTION"];

/// Lines a process logged after `from`, and its line count now.
fn lines_since(p: &Proc, from: usize) -> (Vec<String>, usize) {
    let lines = p.lines.lock().expect("log lock");
    (lines.iter().skip(from).cloned().collect(), lines.len())
}

fn field(line: &str, name: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    let f = v.get("fields").unwrap_or(&v);
    f.get(name).or_else(|| v.get(name)).and_then(|x| x.as_str().map(str::to_string).or_else(|| Some(x.to_string())))
}

fn message(line: &str) -> String {
    field(line, "message").unwrap_or_default()
}

/// Runs the whole thing; the report says what it saw. An error means the run could not be
/// carried out (a part failed to start), not that a check failed.
pub async fn run(p: Profile) -> anyhow::Result<Report> {
    let wall = Instant::now();
    let mut rng = Rng(p.seed);
    let mut report = Report { seed: p.seed, ..Default::default() };
    anyhow::ensure!(
        bin_dir().join("qtg-dispatcher").exists(),
        "the binaries are not built: run `cargo build --workspace --bins`"
    );

    // One server that can crash-restart, or (failovers) a primary with a streaming standby
    // behind the proxy every process connects through, as through a `-rw` Service.
    let mut pair = if p.failovers > 0 { Some(ReplicatedPg::start(p.sync_replication).await?) } else { None };
    let single = if pair.is_none() { Some(PrivatePg::start().await?) } else { None };
    let server_url = match (&single, &pair) {
        (Some(g), _) => g.url.clone(),
        (None, Some(r)) => r.primary.url.clone(),
        (None, None) => bail!("no database"),
    };
    // Dispatcher #0 (or, with failovers, every process) reaches Postgres through a proxy.
    let proxy = DbProxy::start(&server_url).await?;
    let via_proxy = p.failovers > 0;
    let db_url = if via_proxy { proxy.url.clone() } else { server_url.clone() };
    let anvil = Anvil::start().await?;
    let venue = VenueSim::start(&format!("chaos-{}", p.seed)).await?;
    let receiver = Receiver::start().await?;
    let keys_file = std::env::temp_dir().join(format!("qtg-chaos-{}-keys.jsonl", uuid::Uuid::new_v4().simple()));
    let keys_path = keys_file.to_string_lossy().to_string();
    let remote = Proc::spawn(
        "qtg-remote-executor-example",
        "",
        &[
            ("EXAMPLE_GRPC_ADDR", "127.0.0.1:0"),
            ("EXAMPLE_HTTP_ADDR", "127.0.0.1:0"),
            ("EXAMPLE_HMAC_SECRET", EXAMPLE_HMAC_SECRET),
            ("EXAMPLE_KEY_STORE", keys_path.as_str()),
        ],
    )
    .await?;
    let grpc = remote.wait_field("grpc_addr", Duration::from_secs(20)).await?;
    let http = remote.wait_field("http_addr", Duration::from_secs(20)).await?;

    // One registry: the sim lanes, the CEX entries at the venue, the EVM lane, the remote executor.
    let registry = std::env::temp_dir().join(format!("qtg-chaos-{}-registry.toml", uuid::Uuid::new_v4().simple()));
    let cex = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/registry.cex.toml"))?
        .replace("http://127.0.0.1:9400\"", &format!("{}\", timeout_ms = 1000, history_lag_seconds = 1", venue.base));
    std::fs::write(
        &registry,
        format!(
            "{}\n{cex}\n[executors.\"exec.evm.transfer\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
             config = {{ from = \"{ANVIL_ADDR_0}\" }}\n\n\
             [signers.\"signer.evm.local\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
             config = {{ account = \"anvil0\" }}\n\n\
             [signers.\"signer.evm.other\"]\ntransport = \"local\"\nimpl = \"evm\"\n\
             config = {{ account = \"anvil1\" }}\n\n\
             [executors.\"exec.ex.grpc\"]\ntransport = \"grpc\"\nendpoint = \"http://{grpc}\"\ntimeout_ms = 3000\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n\
             [executors.\"exec.ex.http\"]\ntransport = \"http\"\nendpoint = \"http://{http}\"\ntimeout_ms = 3000\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n",
            std::fs::read_to_string(registry_file())?
        ),
    )?;

    let mut env: Vec<(String, String)> = [
        ("MG_EXECUTOR_REGISTRY", registry.to_string_lossy().to_string()),
        ("MG_EVM_CHAINS", crate::evm_chains(&anvil.url, 1, 120.0)),
        ("MG_ANVIL0_PRIVATE_KEY", ANVIL_KEY_0.to_string()),
        ("MG_ANVIL1_PRIVATE_KEY", ANVIL_KEY_1.to_string()),
        ("QTG_EXAMPLE_SECRET", EXAMPLE_HMAC_SECRET.to_string()),
        ("MG_EXECUTOR_TIMEOUT_MS", format!("{}", (CALL_TIMEOUT_S * 1000.0) as u64)),
        ("MG_CLOCK_SKEW_MARGIN_SECONDS", SKEW_S.to_string()),
        ("MG_RECOVERY_SUBMITTING_GRACE_SECONDS", GRACE_S.to_string()),
        ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2".to_string()),
        ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.3".to_string()),
        ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "0.5".to_string()),
        ("MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", "0.3".to_string()),
        ("MG_CALLBACK_ALLOW_PRIVATE", "true".to_string()),
        ("MG_CALLBACK_SECRET", "chaos-callback-secret-0001".to_string()),
        ("MG_CALLBACK_MAX_ATTEMPTS", "12".to_string()),
        ("MG_AUDIT_PROMOTE_INTERVAL_SECONDS", "0.5".to_string()),
        ("MG_EXECUTOR_HEALTH_INTERVAL_SECONDS", "2".to_string()),
        ("MG_BALANCE_SNAPSHOT_ENABLED", "true".to_string()),
        ("MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS", "5".to_string()),
        ("MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED", "true".to_string()),
        ("MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS", "5".to_string()),
        ("MG_VERIFY_DRIFT_ENABLED", "true".to_string()),
        ("MG_VERIFY_DRIFT_INTERVAL_SECONDS", "10".to_string()),
        ("MG_EVM_NONCE_REAPER_INTERVAL_SECONDS", "2".to_string()),
        ("MG_EXPIRATION_CHECK_INTERVAL_SECONDS", "2".to_string()),
        ("MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS", "2".to_string()),
        // A heartbeat older than this is stale (`GET /v3/workers`, and the check at the end).
        ("MG_WORKER_STALE_SECONDS", STALE_SECONDS.to_string()),
        ("MG_DB_POOL_SIZE", "3".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(VENUE_SIM_CREDENTIALS.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    if p.failovers > 0 && p.sync_replication {
        // The production setting with a standby that can be promoted (docs/architecture.md §16).
        env.push(("MG_DB_REQUIRE_SYNC_REPLICATION".into(), "true".into()));
    }

    // The API replicas, on fixed ports; the first one migrates.
    let mut slots: Vec<Slot> = Vec::new();
    let mut bases = Vec::new();
    for n in 0..p.replicas {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut e = env.clone();
        e.push(("MG_API_ADDR".into(), format!("127.0.0.1:{port}")));
        e.push(("MG_API_BOOTSTRAP_ADMIN_KEY".into(), BOOTSTRAP_KEY.into()));
        e.push(("MG_MIGRATE".into(), "true".into()));
        let mut s = Slot {
            name: format!("qtg-api#{n}"),
            binary: "qtg-api",
            db_url: db_url.clone(),
            env: e,
            live: None,
            past: vec![],
            restart_at: None,
        };
        s.spawn().await?;
        s.live.as_ref().context("api")?.wait_field("api_addr", Duration::from_secs(60)).await?;
        bases.push(format!("http://127.0.0.1:{port}"));
        slots.push(s);
    }
    let apis = Apis { bases, http: http_client() };
    let requester = apis.key("chaos-requester", "requester").await?;
    let approver = apis.key("chaos-approver", "approver").await?;
    let operator = apis.key("chaos-operator", "operator").await?;
    for t in templates()? {
        let (s, v) = apis.call("POST", "/v3/template-proposals", &operator, Some(&t), Duration::from_secs(30)).await?;
        anyhow::ensure!(s == 201, "propose {}: {s} {v}", t["template_key"]);
        let id = v["id"].as_str().context("proposal id")?;
        let (s, v) = apis
            .call(
                "POST",
                &format!("/v3/template-proposals/{id}/approve"),
                BOOTSTRAP_KEY,
                Some(&json!({"reason": "chaos"})),
                Duration::from_secs(30),
            )
            .await?;
        anyhow::ensure!(s == 200, "approve template {}: {s} {v}", t["template_key"]);
    }

    // The workers. Dispatcher #0 reaches Postgres through the proxy the run cuts.
    let mut workers: Vec<(&'static str, usize)> = vec![("qtg-dispatcher", p.dispatchers)];
    for b in [
        "qtg-observer",
        "qtg-recovery",
        "qtg-callback",
        "qtg-audit",
        "qtg-expiry",
        "qtg-health",
        "qtg-reaper",
        "qtg-balance",
        "qtg-followup",
        "qtg-drift",
    ] {
        workers.push((b, p.replicas));
    }
    for (binary, n) in workers {
        for i in 0..n {
            let db_url = if binary == "qtg-dispatcher" && i == 0 { proxy.url.clone() } else { db_url.clone() };
            let mut s = Slot {
                name: format!("{binary}#{i}"),
                binary,
                db_url,
                env: env.clone(),
                live: None,
                past: vec![],
                restart_at: None,
            };
            s.spawn().await?;
            slots.push(s);
        }
    }
    let cut_slot = slots.iter().position(|s| s.name == "qtg-dispatcher#0").context("dispatcher #0")?;

    // The stream of movements, at an even pace over the span.
    let lanes: Vec<Lane> =
        (0..p.movements).map(|i| if i % 20 == 10 { Lane::EvmRefused } else { pick_lane(&mut rng) }).collect();
    let created: Arc<Mutex<Vec<(usize, Lane, String)>>> = Arc::default();
    let stream_errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let driver = {
        let (apis, created, errors, lanes, url) =
            (apis.clone(), created.clone(), stream_errors.clone(), lanes.clone(), receiver.url());
        let (requester, approver, span, total) = (requester.clone(), approver.clone(), p.span, p.movements);
        tokio::spawn(async move {
            let start = Instant::now();
            let mut pending = tokio::task::JoinSet::new();
            for (i, lane) in lanes.into_iter().enumerate() {
                let at = span.mul_f64(i as f64 / total.max(1) as f64);
                tokio::time::sleep_until((start + at).into()).await;
                let (apis, created, errors, requester, approver, body) = (
                    apis.clone(),
                    created.clone(),
                    errors.clone(),
                    requester.clone(),
                    approver.clone(),
                    body(lane, i, &url),
                );
                pending.spawn(async move {
                    match create(&apis, &requester, &approver, &body).await {
                        Ok(id) => created.lock().expect("created").push((i, lane, id)),
                        Err(e) => errors.lock().expect("errors").push(format!("movement {i}: {e}")),
                    }
                });
            }
            while pending.join_next().await.is_some() {}
        })
    };

    // The fault schedule, drawn from the seed.
    let start = Instant::now();
    let frac = |f: f64| start + p.span.mul_f64(f);
    let mut next_kill = start + Duration::from_millis(rng.between(p.kill_gap_ms.0, p.kill_gap_ms.1));
    let mut pg_restarts: Vec<Instant> =
        (0..p.pg_restarts).map(|k| frac((k as f64 + 0.5) / (p.pg_restarts as f64 + 0.25))).collect();
    let mut pause_times: Vec<Instant> =
        (0..p.pauses).map(|k| frac(0.1 + 0.8 * k as f64 / p.pauses.max(1) as f64)).collect();
    // (what, due, ends once started, over): the venue, the remote executor, the receiver, the cut.
    let mut outages: Vec<(&str, Instant, Option<Instant>, bool)> = [
        ("venue", 0.2),
        ("remote executor", 0.35),
        ("callback receiver slow", 0.45),
        ("callback receiver", 0.6),
        ("dispatcher #0 cut from Postgres", 0.75),
    ]
    .into_iter()
    .filter(|_| p.outages)
    .map(|(w, f)| (w, frac(f), None, false))
    .collect();
    let pause_for = Duration::from_secs_f64(PAUSE_S);
    let mut paused: Option<(usize, Instant)> = None;
    let mut hunting: Option<(bool, Instant)> = None; // (after the arm?, give up at)
    let mut next_kind_after_arm = false;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut pause_targets: Vec<(String, bool)> = Vec::new();
    let (mut next_bait, mut bait_tasks) = (Instant::now(), Vec::new());
    // A movement of its own for a fault to catch (a slow prepare, a call held on the wire),
    // created and approved in the background, numbered after the stream's.
    let baits = std::sync::atomic::AtomicUsize::new(0);
    let bait = |lane: Lane, what: &'static str| {
        let k = baits.fetch_add(1, Ordering::SeqCst);
        let i = p.movements + k;
        let mut b = body(lane, i, &receiver.url());
        b["idempotency_key"] = json!(format!("chaos-{what}-{k}"));
        let (apis, created, errors, requester, approver) =
            (apis.clone(), created.clone(), stream_errors.clone(), requester.clone(), approver.clone());
        tokio::spawn(async move {
            match create(&apis, &requester, &approver, &b).await {
                Ok(id) => created.lock().expect("created").push((i, lane, id)),
                Err(e) => errors.lock().expect("errors").push(format!("{what} movement {k}: {e}")),
            }
        })
    };
    let db = PgPool::connect(&db_url).await?;
    let mut failover_times: Vec<Instant> =
        (0..p.failovers).map(|k| frac((k as f64 + 0.4) / (p.failovers as f64 + 0.2))).collect();

    // Until the span is over and every fault of the schedule has run (none is skipped).
    while Instant::now() < start + p.span
        || paused.is_some()
        || hunting.is_some()
        || !pause_times.is_empty()
        || !pg_restarts.is_empty()
        || !failover_times.is_empty()
        || outages.iter().any(|o| !o.3)
    {
        let now = Instant::now();
        for s in slots.iter_mut() {
            if let Some(e) = s.supervise().await? {
                note(&e);
                report.exits.push(e);
            }
        }
        // Kills, never of the paused process.
        // Kills wait while a pause is looking for its moment (a kill could take it away).
        if p.kills && now >= next_kill && now < start + p.span && hunting.is_none() {
            let candidates: Vec<usize> = (0..slots.len()).filter(|i| paused.map(|(s, _)| s) != Some(*i)).collect();
            let victim = candidates[rng.below(candidates.len())];
            slots[victim].kill().await?;
            report.kills += 1;
            tokio::time::sleep(Duration::from_millis(rng.between(0, 800))).await;
            slots[victim].spawn().await?;
            next_kill = Instant::now() + Duration::from_millis(rng.between(p.kill_gap_ms.0, p.kill_gap_ms.1));
        }
        // PostgreSQL crash-restarts.
        if pg_restarts.first().is_some_and(|t| now >= *t) {
            pg_restarts.remove(0);
            let away = single.as_ref().context("a crash-restart needs the single server")?.crash_restart()?;
            report.pg_restarts += 1;
            note(&format!("PostgreSQL crash-restarted ({:.1} s away)", away.as_secs_f64()));
        }
        // Outages.
        for o in outages.iter_mut().filter(|o| !o.3) {
            match o.2 {
                None if now >= o.1 => {
                    o.2 = Some(now + p.outage);
                    match o.0 {
                        "venue" => venue.proc.signal("STOP"),
                        "remote executor" => remote.signal("STOP"),
                        "callback receiver" => receiver.stop(),
                        "callback receiver slow" => receiver.slow.store(true, Ordering::SeqCst),
                        _ => {
                            proxy.cut();
                            // And a restart while it is cut: a worker that starts without its
                            // database.
                            slots[cut_slot].kill().await?;
                            slots[cut_slot].spawn().await?;
                        }
                    }
                }
                Some(end) if now >= end => {
                    o.3 = true;
                    match o.0 {
                        "venue" => venue.proc.signal("CONT"),
                        "remote executor" => remote.signal("CONT"),
                        "callback receiver" => receiver.resume().await?,
                        "callback receiver slow" => receiver.slow.store(false, Ordering::SeqCst),
                        _ => proxy.restore(),
                    }
                    report.outages.push(format!("{} {:.0} s", o.0, p.outage.as_secs_f64()));
                }
                _ => {}
            }
        }
        // Failovers: the primary dies right after a dispatcher armed a node (its call on the
        // wire for 1.5 s), then as the answer of one comes back and is recorded; the standby is
        // promoted and the proxy moves to it. Each brings its own chaos.sim.hold movement.
        if failover_times.first().is_some_and(|t| now >= *t) {
            failover_times.remove(0);
            let during_record = report.failovers.len() % 2 == 1;
            if !p.sync_replication {
                // From now on nothing reaches the asynchronous standby: what the failover loses.
                pair.as_ref().context("a failover needs the replicated database")?.cut_replication();
            }
            bait_tasks.push(bait(Lane::Sim("chaos.sim.hold"), "failover"));
            let give_up = Instant::now() + Duration::from_secs(60);
            let mut caught = None;
            while caught.is_none() && Instant::now() < give_up {
                for s in slots.iter().filter(|s| s.binary == "qtg-dispatcher") {
                    let Some(proc) = s.live.as_ref() else { continue };
                    let key = format!("{}:{}", s.name, proc.pid().unwrap_or(0));
                    let (lines, len) = lines_since(proc, seen.get(&key).copied().unwrap_or(0));
                    seen.insert(key, len);
                    for l in lines.iter().filter(|l| message(l) == "armed; submitting") {
                        let node = field(l, "node_id").unwrap_or_default();
                        let hold: bool = sqlx::query_scalar(
                            "SELECT coalesce(bool_or(node_key = 'hold'), false) FROM movement_request_nodes \
                             WHERE id::text = $1",
                        )
                        .bind(&node)
                        .fetch_one(&db)
                        .await
                        .unwrap_or(false);
                        if hold && caught.is_none() {
                            caught = Some(node);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if during_record {
                // The held call answers 1.5 s after the arm: its answer is being recorded.
                tokio::time::sleep(Duration::from_millis(1450)).await;
            }
            let away = pair.as_mut().context("a failover needs the replicated database")?.fail_over(&proxy).await?;
            let when = if during_record { "as an answer was recorded" } else { "right after an arm" };
            note(&format!("PostgreSQL failed over {when} ({:.1} s without writes)", away.as_secs_f64()));
            match caught {
                Some(node) => {
                    report.failovers.push(format!("{when}, node {node}: {:.1} s without writes", away.as_secs_f64()))
                }
                None => report.problems.push(format!("no dispatcher armed a chaos.sim.hold node within 60 s ({when})")),
            }
        }
        // Pauses: find a dispatcher holding a node in PREPARING, or one that has just armed.
        // Each pause brings its own movement (a slow prepare, or a call held on the wire after
        // the arm), so that there is something to catch whatever the mix — another one every
        // 10 s while none is caught (a kill or an outage can take the moment away).
        if paused.is_none() && hunting.is_none() && pause_times.first().is_some_and(|t| now >= *t) {
            pause_times.remove(0);
            hunting = Some((next_kind_after_arm, now + Duration::from_secs(60)));
            next_bait = now;
            next_kind_after_arm = !next_kind_after_arm;
        }
        if let Some((after_arm, _)) = hunting.filter(|_| now >= next_bait) {
            next_bait = now + Duration::from_secs(10);
            bait_tasks.push(bait(Lane::Sim(if after_arm { "chaos.sim.hold" } else { "chaos.sim.prepare" }), "pause"));
        }
        if let Some((after_arm, give_up)) = hunting {
            let mut target = None;
            for (i, s) in slots.iter().enumerate() {
                let Some(proc) = (s.binary == "qtg-dispatcher" && i != cut_slot).then_some(()).and(s.live.as_ref())
                else {
                    continue;
                };
                let key = format!("{}:{}", s.name, proc.pid().unwrap_or(0));
                let from = seen.get(&key).copied().unwrap_or(0);
                let (lines, len) = lines_since(proc, from);
                seen.insert(key, len);
                for l in lines.iter().rev() {
                    let m = message(l);
                    // The node must still be where the pause is meant to land: PREPARING, or
                    // SUBMITTING with its call not answered yet.
                    let state = match m.as_str() {
                        "armed; submitting" if after_arm => "SUBMITTING",
                        "node claimed; preparing" if !after_arm => "PREPARING",
                        _ => continue,
                    };
                    let node = field(l, "node_id").unwrap_or_default();
                    // A node of chaos.sim.prepare (2.5 s in prepare) while preparing, of
                    // chaos.sim.hold (its call on the wire for 1.5 s) after the arm.
                    let there: bool = sqlx::query_scalar(
                        "SELECT coalesce(bool_or(node_state = $2 AND node_key = $3), false)
                         FROM movement_request_nodes WHERE id::text = $1",
                    )
                    .bind(&node)
                    .bind(state)
                    .bind(if after_arm { "hold" } else { "prep" })
                    .fetch_one(&db)
                    .await
                    .unwrap_or(false);
                    if there {
                        target = Some((i, node));
                        break;
                    }
                }
                if target.is_some() {
                    break;
                }
            }
            // After the arm the call must still be on its way: if the venue already has it, the
            // moment was missed — continue the process and wait for the next one.
            let mut missed = false;
            if let Some((i, node)) = &target {
                slots[*i].signal("STOP");
                if after_arm {
                    let at_venue: i64 =
                        sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls WHERE request_node_id::text = $1")
                            .bind(node)
                            .fetch_one(&db)
                            .await
                            .unwrap_or(1);
                    if at_venue > 0 {
                        slots[*i].signal("CONT");
                        missed = true;
                        next_bait = now;
                    }
                }
            }
            if let Some((i, node)) = target.filter(|_| !missed) {
                pause_targets.push((node, after_arm));
                paused = Some((i, Instant::now() + pause_for));
                if after_arm {
                    report.pauses_after_arm += 1;
                } else {
                    report.pauses_in_prepare += 1;
                }
                note(&format!(
                    "paused {} ({})",
                    slots[i].name,
                    if after_arm { "right after arm" } else { "while preparing" }
                ));
                hunting = None;
            } else if now > give_up && !missed {
                report.problems.push(format!(
                    "no dispatcher was found {} within 60 s to pause",
                    if after_arm { "right after an arm" } else { "preparing" }
                ));
                hunting = None;
            }
        }
        if let Some((i, until)) = paused {
            if now >= until {
                slots[i].signal("CONT");
                paused = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(if hunting.is_some() { 20 } else { 100 })).await;
    }
    let _ = driver.await;
    for t in bait_tasks {
        let _ = t.await;
    }
    report.problems.extend(stream_errors.lock().expect("errors").iter().cloned());
    let outages_due = if p.outages { 5 } else { 0 };
    if report.pauses() < p.pauses || report.outages.len() < outages_due || report.failovers.len() < p.failovers {
        report.problems.push(format!(
            "the schedule ran {} of {} pauses, {} of {outages_due} outages and {} of {} failovers",
            report.pauses(),
            p.pauses,
            report.outages.len(),
            report.failovers.len(),
            p.failovers
        ));
    }
    let created = created.lock().expect("created").clone();
    report.movements = created.len();

    // Quiescence: every movement terminal (or with a person), no callback pending, the audit
    // outbox promoted.
    let quiet_from = Instant::now();
    let ids: Vec<uuid::Uuid> = created.iter().filter_map(|(_, _, id)| id.parse().ok()).collect();
    loop {
        for s in slots.iter_mut() {
            if let Some(e) = s.supervise().await? {
                note(&e);
                report.exits.push(e);
            }
        }
        let open: Option<i64> = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM movement_requests WHERE id = ANY($1) AND NOT request_state = ANY($2))
                  + (SELECT count(*) FROM movement_callback_outbox WHERE status = 'pending')
                  + (SELECT count(*) FROM audit_outbox o WHERE NOT EXISTS (SELECT 1 FROM audit_events e WHERE \
                      e.outbox_id = o.id))",
        )
        .bind(&ids)
        .bind(TERMINAL.map(String::from).to_vec())
        .fetch_one(&db)
        .await
        .ok()
        .flatten();
        if open == Some(0) {
            break;
        }
        if quiet_from.elapsed() > p.quiesce_timeout {
            let stuck: Vec<(String, String)> = sqlx::query_as(
                "SELECT id::text, request_state FROM movement_requests WHERE id = ANY($1) AND NOT request_state = \
                 ANY($2) LIMIT 20",
            )
            .bind(&ids)
            .bind(TERMINAL.map(String::from).to_vec())
            .fetch_all(&db)
            .await
            .unwrap_or_default();
            // What each open movement's unfinished nodes are doing, for whoever reads the failure.
            let nodes: Vec<String> = sqlx::query_scalar(
                "SELECT concat_ws(' ', n.request_id, n.node_key, n.node_state, 'attempt', n.attempt_no,
                                  'error', n.error_code, 'next_observe_at', n.next_observe_at,
                                  'lease_expires_at', n.lease_expires_at, 'refs', n.provider_refs)
                 FROM movement_request_nodes n
                 WHERE n.request_id = ANY($1)
                   AND n.node_state NOT IN ('COMPLETED', 'FAILED', 'CANCELLED', 'SKIPPED')
                 ORDER BY n.request_id LIMIT 20",
            )
            .bind(&ids)
            .fetch_all(&db)
            .await
            .unwrap_or_default();
            report.problems.push(format!(
                "not quiescent after {:?}: {open:?} open items; movements {stuck:?}; unfinished nodes: {nodes:?}",
                p.quiesce_timeout
            ));
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    report.quiescence = quiet_from.elapsed();

    for (node, after_arm) in &pause_targets {
        let calls: Vec<(i32, String)> = sqlx::query_as(
            "SELECT attempt_no, outcome FROM sim_submit_calls WHERE request_node_id::text = $1 ORDER BY id",
        )
        .bind(node)
        .fetch_all(&db)
        .await?;
        let (state,): (String,) = sqlx::query_as("SELECT node_state FROM movement_request_nodes WHERE id::text = $1")
            .bind(node)
            .fetch_one(&db)
            .await?;
        let events: Vec<(String,)> = sqlx::query_as(
            "SELECT attempt_no || ' ' || coalesce(method, kind) || ' ' || coalesce(outcome, '') || coalesce(' ' \
             || to_state, '')
             FROM node_events WHERE request_node_id::text = $1 ORDER BY id",
        )
        .bind(node)
        .fetch_all(&db)
        .await?;
        let calls = calls.iter().map(|(a, o)| format!("attempt {a} {o}")).collect::<Vec<_>>().join(", ");
        let events = events.into_iter().map(|(e,)| e).collect::<Vec<_>>().join(" · ");
        let calls = format!("{calls}; its history: {events}");
        let at = if *after_arm { "after its arm" } else { "while preparing" };
        report.paused_nodes.push(format!("{node} (paused {at}): {state}; venue saw: {calls}"));
    }
    // A process started again just now needs a moment to write its first heartbeat.
    let mut restarted = false;
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        for s in slots.iter_mut() {
            if let Some(e) = s.supervise().await? {
                report.exits.push(e);
                restarted = true;
            }
        }
        if slots.iter().all(|s| s.restart_at.is_none()) {
            break;
        }
        restarted = true;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if restarted {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    check(&mut report, &db, &apis, &operator, &created, &venue, &anvil, &remote, &receiver, &slots).await?;
    report.processes = slots.iter().map(|s| s.procs().count()).sum();
    report.wall = wall.elapsed();
    for s in slots.iter_mut() {
        s.kill().await?;
    }
    drop(remote);
    let _ = std::fs::remove_file(&registry);
    let _ = std::fs::remove_file(&keys_file);
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
async fn check(
    report: &mut Report,
    db: &PgPool,
    apis: &Apis,
    operator: &str,
    created: &[(usize, Lane, String)],
    venue: &VenueSim,
    anvil: &Anvil,
    remote: &Proc,
    receiver: &Receiver,
    slots: &[Slot],
) -> anyhow::Result<()> {
    let ids: Vec<uuid::Uuid> = created.iter().filter_map(|(_, _, id)| id.parse().ok()).collect();
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT request_state, count(*) FROM movement_requests WHERE id = ANY($1) GROUP BY 1")
            .bind(&ids)
            .fetch_all(db)
            .await?;
    report.by_state = states.into_iter().collect();
    report.nodes = sqlx::query_scalar("SELECT count(*) FROM movement_request_nodes WHERE request_id = ANY($1)")
        .bind(&ids)
        .fetch_one(db)
        .await?;

    let failed: Vec<(String, i64)> = sqlx::query_as(
        "SELECT r.template_key || '/' || n.node_key || ': ' || coalesce(n.error_code, '-'), count(*)
         FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
         WHERE r.id = ANY($1) AND n.node_state = 'FAILED' GROUP BY 1",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    report.failed_nodes = failed.into_iter().collect();

    // A movement with a person: each of its unfinished nodes has a runbook case.
    let held: Vec<(String, String)> = sqlx::query_as(
        "SELECT n.request_id::text, n.node_key FROM movement_request_nodes n JOIN movement_requests r ON \
         r.id = n.request_id
         WHERE r.id = ANY($1) AND r.request_state = 'MANUAL_INTERVENTION'
           AND n.node_state NOT IN ('COMPLETED', 'SKIPPED', 'CANCELLED')",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    for (m, n) in held {
        let (s, d) = apis
            .call("GET", &format!("/v3/movements/{m}/nodes/{n}/diagnosis"), operator, None, Duration::from_secs(30))
            .await?;
        // A stuck node has its runbook case; one that is not stuck says so (case null).
        if s != 200 || d["title"].as_str().is_none_or(str::is_empty) {
            report.problems.push(format!("movement {m} needs a person but node {n} has no diagnosis: {s} {d}"));
        }
    }

    // The sim venue: one execution per node, one submit call per attempt.
    report.sim_submit_calls = sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls").fetch_one(db).await?;
    report.refused_by_fence =
        sqlx::query_scalar("SELECT count(*) FROM sim_submit_calls WHERE outcome LIKE 'refused%'").fetch_one(db).await?;
    report.stale_answers_dropped =
        sqlx::query_scalar("SELECT count(*) FROM node_events WHERE outcome IN ('stale', 'claim_lost')")
            .fetch_one(db)
            .await?;
    let twice: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT request_node_id::text, count(*) FILTER (WHERE outcome = 'executed'),
                (SELECT count(*) FROM sim_ledger l WHERE l.request_node_id = c.request_node_id)
         FROM sim_submit_calls c GROUP BY request_node_id
         HAVING count(*) FILTER (WHERE outcome = 'executed') > 1
             OR (SELECT count(*) FROM sim_ledger l WHERE l.request_node_id = c.request_node_id) > 1",
    )
    .fetch_all(db)
    .await?;
    for (node, executed, ledger) in twice {
        report.duplicates += 1;
        report.problems.push(format!("sim node {node}: {executed} executed submit calls, {ledger} ledger rows"));
    }
    let repeated: Vec<(String, i32, i64)> = sqlx::query_as(
        "SELECT request_node_id::text, attempt_no, count(*) FROM sim_submit_calls GROUP BY 1, 2 HAVING count(*) > 1",
    )
    .fetch_all(db)
    .await?;
    for (node, attempt, n) in repeated {
        report.duplicates += 1;
        report.problems.push(format!("sim node {node} attempt {attempt}: {n} submit calls reached the venue"));
    }

    // The CEX venue: every withdraw request it logged, by client id (= node:attempt).
    let requests = venue.requests().await?;
    report.cex_requests = requests.len();
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for r in &requests {
        if let Some(c) = r["client_id"].as_str() {
            *per_key.entry(c.to_string()).or_default() += 1;
        }
    }
    for (k, n) in per_key.iter().filter(|(_, n)| **n > 1) {
        report.duplicates += 1;
        report.problems.push(format!("the CEX venue received {n} withdraw requests with client id {k}"));
    }
    let mut paid: HashMap<String, usize> = HashMap::new();
    for w in venue.paid("").await? {
        let node =
            w["requested_client_id"].as_str().unwrap_or_default().split(':').next().unwrap_or_default().to_string();
        *paid.entry(node).or_default() += 1;
    }
    for (node, n) in paid.iter().filter(|(_, n)| **n > 1) {
        report.duplicates += 1;
        report.problems.push(format!("the CEX venue paid node {node} {n} times"));
    }

    // The chain: every transaction from the sender, by the unique value of its movement.
    let latest = anvil.quantity("eth_blockNumber", json!([])).await? as u64;
    let mut by_value: HashMap<u128, usize> = HashMap::new();
    for b in 0..=latest {
        let block = anvil.rpc("eth_getBlockByNumber", json!([format!("0x{b:x}"), true])).await?;
        for tx in block["transactions"].as_array().cloned().unwrap_or_default() {
            if tx["from"].as_str().is_some_and(|f| f.eq_ignore_ascii_case(ANVIL_ADDR_0)) {
                let v = u128::from_str_radix(tx["value"].as_str().unwrap_or("0x0").trim_start_matches("0x"), 16)
                    .unwrap_or(0);
                *by_value.entry(v).or_default() += 1;
                report.chain_transactions += 1;
            }
        }
    }
    for (i, lane, id) in created {
        if matches!(lane, Lane::Evm | Lane::EvmRefused) {
            let n = by_value.get(&evm_wei(*i)).copied().unwrap_or(0);
            if n > 1 {
                report.duplicates += 1;
                report.problems.push(format!("movement {id}: the chain has {n} transfers of its amount"));
            }
        }
    }

    // Nonces: a node that failed before anything was broadcast gave its nonce back in the same
    // step (the refused signatures above), so none is held by a finished node. One that was
    // re-claimed after a kill may keep it when a signature for it might exist (the reaper's case).
    report.refused_signatures = sqlx::query_scalar(
        "SELECT count(*) FROM movement_request_nodes WHERE request_id = ANY($1) AND error_code = 'SIGNER_REFUSED'",
    )
    .bind(&ids)
    .fetch_one(db)
    .await?;
    let held: Vec<(String, i64, i32)> = sqlx::query_as(
        "SELECT n.request_id::text, r.nonce, n.attempt_no FROM evm_nonce_reservation r
         JOIN movement_request_nodes n ON n.id = r.request_node_id
         WHERE n.request_id = ANY($1) AND r.status = 'reserved' AND n.node_state IN ('FAILED', 'CANCELLED')",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    report.nonces_held = held.len();
    let refused = created.iter().filter(|(_, lane, _)| *lane == Lane::EvmRefused).count() as i64;
    if report.refused_signatures != refused {
        report.problems.push(format!(
            "{refused} movements had their signature refused, but {} nodes failed with SIGNER_REFUSED",
            report.refused_signatures
        ));
    }
    for (movement, nonce, attempts) in held.iter().filter(|(_, _, a)| *a <= 1) {
        report.problems.push(format!(
            "movement {movement} failed at its first attempt ({attempts}) but still holds nonce {nonce}"
        ));
    }

    // The remote executor: executions it logged, per idempotency key and per node.
    let mut per_key: HashMap<String, usize> = HashMap::new();
    let mut calls: HashMap<String, usize> = HashMap::new();
    for l in remote.lines.lock().expect("log lock").iter() {
        // Refused by the SDK's fence (void, late, superseded) or handled: a call either way.
        if message(l).starts_with("submit refused") {
            *calls.entry(field(l, "idempotency_key").unwrap_or_default()).or_default() += 1;
        }
        if message(l) == "submit call" {
            let key = field(l, "idempotency_key").unwrap_or_default();
            if field(l, "executed").as_deref() == Some("true") {
                *per_key.entry(key.clone()).or_default() += 1;
            }
            *calls.entry(key).or_default() += 1;
        }
    }
    for (key, n) in calls.iter().filter(|(_, n)| **n > 1) {
        report.duplicates += 1;
        report.problems.push(format!("the remote executor received {n} submit calls with key {key}"));
    }
    report.remote_executions = per_key.values().sum();
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for (k, n) in &per_key {
        *per_node.entry(k.split(':').next().unwrap_or_default().to_string()).or_default() += n;
    }
    for (node, n) in per_node.iter().filter(|(_, n)| **n > 1) {
        report.duplicates += 1;
        report.problems.push(format!("the remote executor executed node {node} {n} times"));
    }

    // qtg's verdict against the boundary's: a node qtg calls COMPLETED was executed exactly once
    // where the money is, one it calls FAILED (or CANCELLED, SKIPPED) not at all — a "failure"
    // the venue executed would invite a retry that pays twice. A movement with a person is
    // theirs to reconcile.
    let sim_executed: HashMap<String, usize> = sqlx::query_as::<_, (String, i64)>(
        "SELECT request_node_id::text, count(*) FROM sim_submit_calls WHERE outcome = 'executed' GROUP BY 1",
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|(n, c)| (n, c as usize))
    .collect();
    let index: HashMap<&str, usize> = created.iter().map(|(i, _, id)| (id.as_str(), *i)).collect();
    let nodes: Vec<(String, String, String, String, String)> = sqlx::query_as(
        "SELECT n.id::text, n.request_id::text, n.node_key, n.node_state, p.executor_key
         FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
         JOIN plan_nodes p ON p.id = n.plan_node_id
         WHERE r.id = ANY($1) AND r.request_state <> 'MANUAL_INTERVENTION'",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    for (node, movement, key, state, executor) in nodes {
        let at_boundary = if executor == "exec.sim.transfer" {
            sim_executed.get(&node).copied().unwrap_or(0)
        } else if executor.starts_with("exec.cex.withdrawal_action") {
            paid.get(&node).copied().unwrap_or(0)
        } else if executor == "exec.evm.transfer" {
            index.get(movement.as_str()).and_then(|i| by_value.get(&evm_wei(*i))).copied().unwrap_or(0)
        } else if executor.starts_with("exec.ex.") {
            per_node.get(&node).copied().unwrap_or(0)
        } else {
            continue; // an observation: nothing of its own at the boundary
        };
        let expected = match state.as_str() {
            "COMPLETED" => 1,
            "FAILED" | "CANCELLED" | "SKIPPED" => 0,
            _ => continue,
        };
        if at_boundary != expected {
            report.verdicts_disagreeing += 1;
            report.problems.push(format!(
                "movement {movement} node {key} is {state} but the boundary executed it {at_boundary} times"
            ));
        }
    }

    // What the API answered for and what the boundaries executed must still be in the
    // database: a failover to a standby that lacks the last commits forgets them.
    let known: HashSet<String> =
        sqlx::query_scalar("SELECT id::text FROM movement_requests").fetch_all(db).await?.into_iter().collect();
    let known_nodes: HashSet<String> =
        sqlx::query_scalar("SELECT id::text FROM movement_request_nodes").fetch_all(db).await?.into_iter().collect();
    for (i, lane, id) in created.iter().filter(|(_, _, id)| !known.contains(id)) {
        report.forgotten += 1;
        let on_chain = matches!(lane, Lane::Evm) && by_value.get(&evm_wei(*i)).is_some_and(|n| *n > 0);
        report.problems.push(format!(
            "movement {id} was created (the API answered) but the database no longer has it{}",
            if on_chain { "; the chain holds its transfer" } else { "" }
        ));
    }
    for (node, n) in paid.iter().chain(per_node.iter()).filter(|(node, _)| !known_nodes.contains(*node)) {
        report.forgotten += 1;
        report.problems.push(format!("the boundary executed node {node} ({n}×), which the database no longer knows"));
    }

    // Callbacks: each transition of a node, and of a movement (its audit row is its history),
    // has its callback, sent (and received) or in the DLQ.
    // Written by the one statement of a transition, they pair up one to one: a guard against a
    // path that changes a state without it.
    let node_sql = "SELECT coalesce(sum(abs(coalesce(t.n, 0) - coalesce(c.n, 0))), 0)::bigint FROM
           (SELECT e.request_id, n.node_key, count(*) AS n FROM node_events e
            JOIN movement_request_nodes n ON n.id = e.request_node_id
            WHERE e.request_id = ANY($1) AND e.kind = 'transition' GROUP BY 1, 2) t
         FULL JOIN (SELECT request_id, payload->>'node_key' AS node_key, count(*) AS n FROM movement_callback_outbox
                    WHERE request_id = ANY($1) AND event_type = 'node_state_changed' AND replay_of IS NULL
                    GROUP BY 1, 2) c ON c.request_id = t.request_id AND c.node_key = t.node_key";
    let movement_sql = "SELECT coalesce(sum(abs(coalesce(a.n, 0) - coalesce(c.n, 0))), 0)::bigint FROM
           (SELECT movement_id, count(*) AS n FROM audit_events
            WHERE movement_id = ANY($1) AND action = 'movement.transition' GROUP BY 1) a
         FULL JOIN (SELECT request_id, count(*) AS n FROM movement_callback_outbox
                    WHERE request_id = ANY($1) AND replay_of IS NULL
                      AND event_type NOT IN ('node_state_changed', 'frontier_advanced', 'request_attention')
                    GROUP BY 1) c ON c.request_id = a.movement_id";
    for (what, sql) in [("node", node_sql), ("movement", movement_sql)] {
        let unpaired: i64 = sqlx::query_scalar(sql).bind(&ids).fetch_one(db).await?;
        if unpaired > 0 {
            report.callbacks_lost += unpaired as usize;
            report.problems.push(format!("{unpaired} {what} transitions and their callbacks do not pair up"));
        }
    }
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT event_id::text, status FROM movement_callback_outbox WHERE request_id = ANY($1) AND replay_of IS NULL",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    let got = receiver.got.lock().expect("receiver").clone();
    report.callbacks = rows.len() as i64;
    for (event, status) in &rows {
        match status.as_str() {
            "dlq" => report.callbacks_dlq += 1,
            "sent" if got.contains_key(event) => {}
            other => {
                report.callbacks_lost += 1;
                report.problems.push(format!("callback {event} is {other} but the receiver never got it"));
            }
        }
    }
    report.callbacks_redelivered = got.values().filter(|n| **n > 1).count();

    // Audit: each transition of a node has its audit event.
    report.audit_missing = sqlx::query_scalar(
        "SELECT coalesce(sum(abs(coalesce(t.n, 0) - coalesce(a.n, 0))), 0)::bigint FROM
           (SELECT request_node_id::text AS node, count(*) AS n FROM node_events
            WHERE request_id = ANY($1) AND kind = 'transition' GROUP BY 1) t
         FULL JOIN (SELECT entity_id AS node, count(*) AS n FROM audit_events
                    WHERE movement_id = ANY($1) AND action = 'node.transition' GROUP BY 1) a ON a.node = t.node",
    )
    .bind(&ids)
    .fetch_one(db)
    .await?;
    if report.audit_missing > 0 {
        report
            .problems
            .push(format!("{} node transitions and their audit events do not pair up", report.audit_missing));
    }

    // Heartbeats: every running worker process beats.
    let live: Vec<(String, i32)> = slots
        .iter()
        .filter(|s| s.binary != "qtg-api")
        .filter_map(|s| s.live.as_ref().and_then(Proc::pid).map(|pid| (s.name.clone(), pid as i32)))
        .collect();
    let pids: Vec<i32> = live.iter().map(|(_, p)| *p).collect();
    let beats: Vec<(i32, f64)> = sqlx::query_as(
        "SELECT pid, extract(epoch FROM now() - max(last_beat_at))::float8 FROM worker_heartbeats WHERE pid = \
         ANY($1) GROUP BY pid",
    )
    .bind(&pids)
    .fetch_all(db)
    .await?;
    let beats: HashMap<i32, f64> = beats.into_iter().collect();
    for (name, pid) in &live {
        match beats.get(pid) {
            Some(age) if *age < STALE_SECONDS => {}
            other => {
                report.problems.push(format!("{name} (pid {pid}) is running but its heartbeat is {other:?} s old"))
            }
        }
    }

    // No panic in any log.
    let mut panicked = HashSet::new();
    for s in slots {
        for p in s.procs() {
            if p.lines.lock().expect("log lock").iter().any(|l| l.contains("panicked")) {
                panicked.insert(s.name.clone());
            }
        }
    }
    for name in panicked {
        report.problems.push(format!("{name} panicked (see its log)"));
    }
    Ok(())
}
