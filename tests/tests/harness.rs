//! The harness itself: a test that fails still leaves no database behind.

use qtg_tests::*;

#[tokio::test]
async fn a_failing_test_still_drops_its_database() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let name = db.name.clone();
    let failed = tokio::spawn(async move {
        let _db = db;
        panic!("a test failing before drop_db");
    })
    .await;
    assert!(failed.is_err(), "the task panicked");
    let admin = qtg_store::connect(&admin_url(), 1).await?;
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1").bind(&name).fetch_one(&admin).await?;
    admin.close().await;
    assert_eq!(left, 0, "database {name} outlived its failed test");
    Ok(())
}
