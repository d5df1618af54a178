//! A PostgreSQL failover as its users run one (docs/architecture.md §16): a primary with a
//! synchronous streaming standby behind one proxy (the `-rw` Service) that every process
//! connects through; every worker binary and the API running, movements over the sim, CEX,
//! EVM and remote lanes in flight; the primary killed right after a dispatcher armed a node
//! (its call on the wire) and again as an answer was being recorded, the standby promoted, a
//! new standby made. Then the boundaries — submit calls the sim venue recorded, withdraw
//! requests the CEX venue logged, transactions on the chain, executions the remote executor
//! logged — show one execution per node, and every movement settled. Against an asynchronous
//! standby the same failover forgets what the API answered for; so the binaries that make
//! effects refuse to run there when `MG_DB_REQUIRE_SYNC_REPLICATION=true`, the others warn,
//! and a standby is always refused.

use std::time::Duration;

use qtg_tests::chaos::{run, Profile, ReplicatedPg};
use qtg_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_failovers_under_synchronous_replication_execute_every_node_once() -> anyhow::Result<()> {
    let report = run(Profile::failover(11)).await?;
    println!("{}", report.table());
    assert!(report.passed(), "{}", report.table());
    assert_eq!(report.failovers.len(), 2, "{}", report.table());
    assert_eq!((report.duplicates, report.callbacks_lost, report.verdicts_disagreeing, report.forgotten), (0, 0, 0, 0));
    Ok(())
}

/// What the check below refuses: the same failover over an asynchronous standby whose link is
/// cut just before (its lag), with `MG_DB_REQUIRE_SYNC_REPLICATION` off. Movements the API
/// answered for, and executions the boundaries saw, are gone from the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_to_an_asynchronous_standby_forgets_what_was_answered() -> anyhow::Result<()> {
    let mut profile = Profile::failover(5);
    (profile.sync_replication, profile.failovers, profile.movements) = (false, 1, 16);
    profile.span = std::time::Duration::from_secs(20);
    let report = run(profile).await?;
    println!("{}", report.table());
    assert_eq!(report.failovers.len(), 1, "{}", report.table());
    // At least the movement created after the link was cut is gone; what else shows depends
    // on what was in flight (a node FAILED whose transfer the chain holds, a duplicate).
    let wrong = report.forgotten + report.verdicts_disagreeing + report.duplicates;
    assert!(wrong >= 1, "the failover lost what was answered: {}", report.table());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_standby_is_refused_or_warned_and_a_standby_is_never_used() -> anyhow::Result<()> {
    let pair = ReplicatedPg::start(false).await?;
    let strict = [("MG_DB_REQUIRE_SYNC_REPLICATION", "true"), ("MG_MIGRATE", "true")];
    // A worker that makes effects refuses commits that a failover could lose.
    let mut dispatcher = Proc::spawn("qtg-dispatcher", &pair.primary.url, &strict).await?;
    assert_ne!(dispatcher.wait_exit(Duration::from_secs(30)).await?, Some(0), "{}", dispatcher.log());
    assert!(dispatcher.log().contains("commits are not synchronously replicated"), "{}", dispatcher.log());
    // The API makes none: it runs, warns, and says so on /readyz and /metrics.
    let api = Api::start(&pair.primary.url, &strict).await?;
    assert!(api.proc.log().contains("database session is weaker than money safety needs"), "{}", api.proc.log());
    let admin = api.proc.wait_field("admin_addr", Duration::from_secs(20)).await?;
    let http = http_client();
    let ready = http.get(format!("http://{admin}/readyz")).send().await?;
    assert_eq!(ready.status(), 200);
    let text = ready.text().await?;
    assert!(text.contains("durability local") && text.contains("not synchronously replicated"), "{text}");
    let metrics = http.get(format!("http://{admin}/metrics")).send().await?.text().await?;
    assert!(metrics.contains("qtg_db_synchronous_replication 0"), "{metrics}");
    // Without the requirement the dispatcher runs and warns.
    let lenient = Proc::spawn("qtg-dispatcher", &pair.primary.url, &[]).await?;
    lenient.wait_field("admin_addr", Duration::from_secs(30)).await?;
    assert!(lenient.log().contains("not synchronously replicated"), "{}", lenient.log());
    // Nothing is decided from a standby: every binary refuses it.
    let mut on_standby = Proc::spawn("qtg-api", &pair.standby.url, &[]).await?;
    assert_ne!(on_standby.wait_exit(Duration::from_secs(30)).await?, Some(0), "{}", on_standby.log());
    assert!(on_standby.log().contains("the server is a standby"), "{}", on_standby.log());
    drop((api, lenient));
    Ok(())
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &std::path::Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("openssl").current_dir(dir).args(args).output()?;
    anyhow::ensure!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_verifies_the_servers_certificate() -> anyhow::Result<()> {
    // A CA and a server certificate for 127.0.0.1, as an operator's PostgreSQL has them.
    let dir = std::env::temp_dir().join(format!("qtg-tls-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=qtg-test-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ],
    )?;
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    )?;
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n",
    )?;
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.crt",
        ],
    )?;
    // The server reads its key only if it owns it, mode 0600.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("server.key"), std::fs::Permissions::from_mode(0o600))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    if qtg_tests::chaos::is_root() {
        std::process::Command::new("chown").arg("postgres").arg(dir.join("server.key")).status()?;
    }
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    let pg = qtg_tests::chaos::PrivatePg::primary(&[
        ("ssl", "on"),
        ("ssl_cert_file", &cert.to_string_lossy()),
        ("ssl_key_file", &key.to_string_lossy()),
    ])
    .await?;
    let verified = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url, dir.join("ca.crt").display());
    let api = Api::start(&verified, &[]).await?;
    let encrypted: bool = sqlx::query_scalar(
        "SELECT coalesce(bool_and(s.ssl), false) FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid
         WHERE a.application_name = 'qtg-api'",
    )
    .fetch_one(&sqlx::PgPool::connect(&pg.url).await?)
    .await?;
    assert!(encrypted, "qtg-api's connections are TLS");
    drop(api);
    // A certificate the CA did not sign is refused: the server's own as the root.
    let wrong = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url, dir.join("server.crt").display());
    let mut refused = Proc::spawn("qtg-api", &wrong, &[]).await?;
    assert_ne!(refused.wait_exit(Duration::from_secs(30)).await?, Some(0), "{}", refused.log());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_turned_read_only_is_left_and_the_primary_found_again() -> anyhow::Result<()> {
    // A switchover as the old primary sees it: its sessions turn read-only under the workers.
    let pg = qtg_tests::chaos::PrivatePg::start().await?;
    let api = Api::start(&pg.url, &[]).await?;
    let admin = api.proc.wait_field("admin_addr", Duration::from_secs(20)).await?;
    let db = sqlx::PgPool::connect(&pg.url).await?;
    let body = || serde_json::json!({"principal": "p", "roles": ["viewer"]});
    api.ok("POST", "/v3/api-keys", &api.admin_key, Some(body()), 201).await?;
    let read_only = |on: bool| {
        let db = db.clone();
        async move {
            let set = if on { "ALTER SYSTEM SET default_transaction_read_only = on" } else { "ALTER SYSTEM RESET ALL" };
            sqlx::query(set).execute(&db).await?;
            sqlx::query("SELECT pg_reload_conf()").execute(&db).await?;
            anyhow::Ok(())
        }
    };
    read_only(true).await?;
    // A write fails; the pool drops its connections and refuses the read-only server.
    wait_until("the write refused and /readyz unready", Duration::from_secs(30), || async {
        let (status, _) = api.call("POST", "/v3/api-keys", &api.admin_key, Some(body())).await?;
        let ready = http_client().get(format!("http://{admin}/readyz")).send().await?;
        Ok(status >= 500 && ready.status() == 503)
    })
    .await?;
    assert!(api.proc.log().contains("turned read-only"), "{}", api.proc.log());
    assert!(api.proc.log().contains("new transactions are read-only"), "{}", api.proc.log());
    // The server writable again (the primary found again): the same process carries on.
    read_only(false).await?;
    wait_until("writes again, without a restart", Duration::from_secs(30), || async {
        Ok(api.call("POST", "/v3/api-keys", &api.admin_key, Some(body())).await?.0 == 201)
    })
    .await?;
    drop(api);
    Ok(())
}
