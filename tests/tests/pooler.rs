//! qtg behind Debian's PgBouncer (docs/architecture.md §16). In session mode PgBouncer drops
//! the startup `options` carrying qtg's session limits: every binary refuses to run on what the
//! server then reports (or, with `MG_DB_SESSION_CHECK=warn`, runs and says so) — and with the
//! limits set on the database, a movement's whole lifecycle runs through it. In transaction
//! mode a notification never reaches its listener: the binary refuses to run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use qtg_tests::chaos::is_root;
use qtg_tests::*;
use serde_json::json;

/// A PgBouncer in front of the test server, in `mode` (session or transaction).
struct Bouncer {
    dir: PathBuf,
    port: u16,
    _child: tokio::process::Child,
}

impl Bouncer {
    async fn start(mode: &str) -> anyhow::Result<Bouncer> {
        let bin = std::env::var("QTG_PGBOUNCER").unwrap_or_else(|_| "pgbouncer".into());
        let server = admin_url();
        let (_, rest) = server.split_once('@').context("a postgres URL with user@host")?;
        let (host_port, _) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, server_port) = host_port.rsplit_once(':').unwrap_or((host_port, "5432"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::temp_dir().join(format!("qtg-pgbouncer-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n")?;
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n* = host={host} port={server_port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
                 listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {users}\n\
                 pool_mode = {mode}\nignore_startup_parameters = extra_float_digits, options\n\
                 default_pool_size = 20\nmax_client_conn = 200\nlogfile = {log}\npidfile = {pid}\n",
                users = dir.join("users.txt").display(),
                log = dir.join("pgbouncer.log").display(),
                pid = dir.join("pgbouncer.pid").display(),
            ),
        )?;
        // PgBouncer does not run as root.
        let mut cmd = if is_root() {
            std::process::Command::new("chown").arg("-R").arg("postgres").arg(&dir).status()?;
            let mut c = tokio::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&bin);
            c
        } else {
            tokio::process::Command::new(&bin)
        };
        let child = cmd
            .arg(dir.join("pgbouncer.ini"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {bin} (scripts/ensure-pgbouncer.sh installs it)"))?;
        let b = Bouncer { dir, port, _child: child };
        wait_until("pgbouncer listening", Duration::from_secs(20), || async {
            Ok(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok())
        })
        .await?;
        Ok(b)
    }

    /// `url` (a database on the test server) through this PgBouncer.
    fn url(&self, url: &str) -> String {
        let db = url.rsplit('/').next().unwrap_or("postgres");
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The limits qtg asks for, as database defaults (what `ALTER ROLE … SET` does for a role).
async fn set_limits(db: &TestDb) -> anyhow::Result<()> {
    let name = &db.name;
    for stmt in [
        format!("ALTER DATABASE \"{name}\" SET lock_timeout = '5s'"),
        format!("ALTER DATABASE \"{name}\" SET idle_in_transaction_session_timeout = '20s'"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(stmt)).execute(&db.pool).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_in_session_mode_limits_are_checked_and_a_movement_completes() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let bouncer = Bouncer::start("session").await?;
    let url = bouncer.url(&db.url);
    let limits = [("MG_DB_LOCK_TIMEOUT_MS", "5000"), ("MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "20")];

    // PgBouncer drops the options: the server's defaults (no lock_timeout) are refused.
    let mut refused = Proc::spawn("qtg-api", &url, &limits).await?;
    assert_ne!(refused.wait_exit(Duration::from_secs(30)).await?, Some(0), "{}", refused.log());
    assert!(refused.log().contains("lock_timeout is 0 (no bound)"), "{}", refused.log());
    assert!(refused.log().contains("idle_in_transaction_session_timeout is 0"), "{}", refused.log());

    // Warned only, it runs, and /readyz and /metrics say what is missing.
    let warned = Proc::spawn("qtg-api", &url, &[limits[0], limits[1], ("MG_DB_SESSION_CHECK", "warn")]).await?;
    let admin = warned.wait_field("admin_addr", Duration::from_secs(30)).await?;
    let http = http_client();
    let ready = http.get(format!("http://{admin}/readyz")).send().await?.text().await?;
    assert!(ready.contains("lock_timeout is 0"), "{ready}");
    let metrics = http.get(format!("http://{admin}/metrics")).send().await?.text().await?;
    assert!(metrics.contains("qtg_db_session_limits_weaker 1"), "{metrics}");
    drop((warned, bouncer));

    // The limits on the database (as on a role): the whole lifecycle runs through PgBouncer
    // (a new one: server connections keep the defaults they started with).
    set_limits(&db).await?;
    let bouncer = Bouncer::start("session").await?;
    let url = bouncer.url(&db.url);
    let api = Api::all_in_one(&url, &[limits[0], limits[1], ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0.3")]).await?;
    let keys = Keys::create(&api).await?;
    let template = json!({"template_key": "bouncer.t", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
         "config": {"sim": {}}},
        {"node_key": "b", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer",
         "config": {"sim": {"observe_polls": 1}}}],
        "edges": [{"from": "a", "to": "b"}]});
    install_template(&api, &keys, template).await?;
    let id = start_movement(&api, &keys, "bouncer.t", "through-the-pooler", None).await?;
    let m = wait_settled(&api, &keys.requester, &id, &[&api.proc]).await?;
    assert_eq!(m["request_state"], "COMPLETED", "{m}\n{}", api.proc.log());
    let through: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'qtg'",
    )
    .fetch_one(&db.pool)
    .await?;
    assert!(through >= 1, "qtg's connections reach the server through PgBouncer");
    drop(api);
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_pgbouncer_in_transaction_mode_a_binary_refuses_to_run() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    set_limits(&db).await?;
    let bouncer = Bouncer::start("transaction").await?;
    let env = [("MG_DB_LOCK_TIMEOUT_MS", "5000"), ("MG_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", "20")];
    let mut api = Proc::spawn("qtg-api", &bouncer.url(&db.url), &env).await?;
    assert_ne!(api.wait_exit(Duration::from_secs(30)).await?, Some(0), "{}", api.log());
    // Found by the session check (another client's prepared statement on the connection) or
    // by the LISTEN/NOTIFY probe, whichever meets it first.
    assert!(api.log().contains("pool_mode = transaction"), "{}", api.log());
    db.drop_db().await;
    Ok(())
}
