//! Test databases: a copy of the migrated template per test, dropped afterwards; a proxy in front of Postgres.

use super::*;

/// The server tests create their databases on: `QTG_TEST_DATABASE_URL`, `DATABASE_URL`, or
/// the local default.
pub fn admin_url() -> String {
    std::env::var("QTG_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn with_db(url: &str, db: &str) -> String {
    let (base, rest) = match url.find("://").and_then(|s| url[s + 3..].find('/').map(|i| s + 3 + i)) {
        Some(slash) => (&url[..slash], &url[slash + 1..]),
        None => (url, ""),
    };
    let query = rest.find('?').map(|q| &rest[q..]).unwrap_or("");
    format!("{base}/{db}{query}")
}

/// A fresh, migrated database, dropped by [`TestDb::drop_db`] — or, when a test fails before
/// it gets there (a panic, an early `?`), when the value is dropped.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
    dropped: bool,
}

/// The name of the migrated template database of this schema: one per set of migrations
/// (their versions and checksums), so a changed migration gets a template of its own.
fn template_name() -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for m in qtg_store::MIGRATOR.iter() {
        h.update(m.version.to_le_bytes());
        h.update(&m.checksum);
    }
    format!("qtg_tpl_{}", &hex::encode(h.finalize())[..16])
}

/// Creates the template database once per schema, across test processes (an advisory lock on
/// the server serialises them): migrated under a temporary name, then renamed, so a template
/// that exists is complete. Templates of other schemas are dropped.
async fn ensure_template(admin_pool: &PgPool) -> anyhow::Result<String> {
    let name = template_name();
    let mut conn = admin_pool.acquire().await?;
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('qtg-test-template', 0))").execute(&mut *conn).await?;
    let made = async {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await?;
        if exists {
            return anyhow::Ok(());
        }
        let stale: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'qtg\\_tpl\\_%'")
                .fetch_all(&mut *conn)
                .await?;
        for old in stale {
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {old} WITH (FORCE)")))
                .execute(&mut *conn)
                .await?;
        }
        let building = format!("{name}_building");
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)")))
            .execute(&mut *conn)
            .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {building}"))).execute(&mut *conn).await?;
        let pool = qtg_store::connect(&with_db(&admin_url(), &building), 1).await?;
        qtg_store::migrate(&pool).await?;
        pool.close().await;
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE {building} RENAME TO {name}")))
            .execute(&mut *conn)
            .await?;
        Ok(())
    }
    .await;
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended('qtg-test-template', 0))").execute(&mut *conn).await?;
    made?;
    Ok(name)
}

impl TestDb {
    /// A fresh database with the schema: a copy of the migrated template (migrating every
    /// test's database from scratch was most of a test's set-up).
    pub async fn new() -> anyhow::Result<TestDb> {
        let admin = admin_url();
        let admin_pool = qtg_store::connect(&admin, 1).await.context("connect to the test Postgres server")?;
        let template = ensure_template(&admin_pool).await?;
        let name = format!("qtg_t_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name} TEMPLATE {template}")))
            .execute(&admin_pool)
            .await
            .context("copy the template database")?;
        admin_pool.close().await;
        let url = with_db(&admin, &name);
        let pool = qtg_store::connect(&url, 20).await?;
        // Already current: this checks the copy against the migrations and applies nothing.
        qtg_store::migrate(&pool).await?;
        Ok(TestDb { name, url, pool, dropped: false })
    }

    /// A fresh database without the schema.
    pub async fn empty() -> anyhow::Result<TestDb> {
        let admin = admin_url();
        let name = format!("qtg_t_{}", uuid::Uuid::new_v4().simple());
        let admin_pool = qtg_store::connect(&admin, 1).await.context("connect to the test Postgres server")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&admin_pool).await?;
        admin_pool.close().await;
        let url = with_db(&admin, &name);
        let pool = qtg_store::connect(&url, 20).await?;
        Ok(TestDb { name, url, pool, dropped: false })
    }

    pub async fn drop_db(mut self) {
        self.pool.close().await;
        drop_database(&self.name).await;
        self.dropped = true;
    }
}

async fn drop_database(name: &str) {
    if let Ok(admin_pool) = qtg_store::connect(&admin_url(), 1).await {
        // FORCE: a spawned binary still connected does not keep it alive.
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&admin_pool)
            .await;
        admin_pool.close().await;
    }
}

impl Drop for TestDb {
    /// The test ended without [`TestDb::drop_db`] (it failed): drop the database anyway, on a
    /// thread of its own (a runtime cannot block inside the test's runtime).
    fn drop(&mut self) {
        if self.dropped || std::env::var_os("QTG_TEST_KEEP_DB").is_some() {
            return;
        }
        let name = self.name.clone();
        let dropper = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                rt.block_on(drop_database(&name));
            }
        });
        let _ = dropper.join();
    }
}

/// A TCP proxy in front of Postgres that the test controls: [`DbProxy::cut`] drops every
/// connection through it and refuses new ones (a worker cut off from its database, or the
/// database gone) until [`DbProxy::restore`].
pub struct DbProxy {
    /// `url` with the proxy's address instead of the server's.
    pub url: String,
    upstream: Arc<Mutex<String>>,
    cut: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl DbProxy {
    /// In front of the server of `db_url` (`postgres://user@host:port/db`).
    pub async fn start(db_url: &str) -> anyhow::Result<DbProxy> {
        let (head, rest) = db_url.split_once('@').context("a postgres URL with user@host")?;
        let (upstream, tail) = rest.split_once('/').context("a postgres URL with /db")?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("{head}@{}/{tail}", listener.local_addr()?);
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let upstream = Arc::new(Mutex::new(upstream.to_string()));
        let (up, c, k) = (upstream.clone(), cut.clone(), conns.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if c.load(std::sync::atomic::Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = up.lock().expect("upstream").clone();
                let h = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                let mut conns = k.lock().expect("conns");
                conns.retain(|c| !c.is_finished());
                conns.push(h.abort_handle());
            }
        });
        Ok(DbProxy { url, upstream, cut, conns, task })
    }

    /// `host:port` it listens on.
    pub fn addr(&self) -> String {
        self.url.split_once('@').and_then(|(_, r)| r.split_once('/')).map(|(a, _)| a.to_string()).unwrap_or_default()
    }

    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for h in self.conns.lock().expect("conns").drain(..) {
            h.abort();
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// New connections go to `addr` (`host:port`) from now on; the ones through the proxy
    /// are dropped (a Service that moved to another server).
    pub fn switch(&self, addr: &str) {
        self.cut();
        *self.upstream.lock().expect("upstream") = addr.to_string();
        self.restore();
    }
}

impl Drop for DbProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}
