//! The served OpenAPI document against a schema-driven fuzzer (schemathesis, from the test
//! venv of `scripts/ensure-test-venv.sh`): every operation, its examples, boundary cases,
//! random cases and the stateful walks its links allow. No answer may be a server error,
//! an invalid request may not be accepted, and every answer must match the document.
//!
//! Left out: `positive_data_acceptance` (a schema-valid request refused). The document cannot
//! express a few refusals that depend on the deployment or on free-form data — a template's
//! executor key missing from this deployment's registry, a callback URL to a private address,
//! a NUL character inside free-form evidence — and the document's description names them.
//! The run is deterministic (fixed seed, no example database), so it cannot flake.

use std::path::PathBuf;
use std::time::Duration;

use qtg_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_holds_under_a_schema_driven_fuzzer() -> anyhow::Result<()> {
    let python = PathBuf::from(test_python().await?);
    let st = python.with_file_name("st");

    let db = TestDb::new().await?;
    let api = Api::all_in_one(&db.url, &[]).await?;
    let run = tokio::process::Command::new(&st)
        .args(["run", &format!("{}/v3/openapi.json", api.base)])
        .args(["--header", &format!("Authorization: Bearer {}", api.admin_key)])
        .args(["--checks", "all", "--exclude-checks", "positive_data_acceptance"])
        .args(["--max-examples", "25", "--seed", "20261201", "--generation-deterministic"])
        .args(["--workers", "1"])
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(std::env::temp_dir())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run).await??;
    let report = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "the fuzzer found failures:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("Tested: 29") || report.contains("Tested:"), "{report}");
    db.drop_db().await;
    Ok(())
}
