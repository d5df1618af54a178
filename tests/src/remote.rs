//! The reference remote executor as a process.

use super::*;

/// A test HTTP client (with the process' TLS provider installed, as reqwest requires).
pub fn http_client() -> reqwest::Client {
    qtg_executor::remote::install_tls_provider();
    reqwest::Client::new()
}

pub const EXAMPLE_HMAC_SECRET: &str = "example-hmac-secret-0001";

pub struct Remote {
    pub proc: Proc,
    pub registry: std::path::PathBuf,
}

/// Starts the example executor (`qtg-remote-executor-example`) and writes a registry naming it next to the sim lanes.
/// Calls are HMAC-signed on both transports (the registry names the secret's env var).
pub async fn start_example(db: &TestDb, timeout_ms: u64, extra: &[(&str, &str)]) -> anyhow::Result<Remote> {
    let keys = std::env::temp_dir().join(format!("{}-example-keys.jsonl", db.name)).to_string_lossy().to_string();
    let mut env = vec![
        ("EXAMPLE_GRPC_ADDR", "127.0.0.1:0"),
        ("EXAMPLE_HTTP_ADDR", "127.0.0.1:0"),
        ("EXAMPLE_HMAC_SECRET", EXAMPLE_HMAC_SECRET),
        ("EXAMPLE_KEY_STORE", keys.as_str()),
    ];
    env.extend_from_slice(extra);
    let proc = Proc::spawn("qtg-remote-executor-example", &db.url, &env).await?;
    let grpc = proc.wait_field("grpc_addr", Duration::from_secs(20)).await?;
    let http = proc.wait_field("http_addr", Duration::from_secs(20)).await?;
    let sim = std::fs::read_to_string(registry_file())?;
    let registry = std::env::temp_dir().join(format!("{}-registry.toml", db.name));
    std::fs::write(
        &registry,
        format!(
            "{sim}\n[executors.\"exec.ex.grpc\"]\ntransport = \"grpc\"\nendpoint = \"http://{grpc}\"\n\
             timeout_ms = {timeout_ms}\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n\
             [executors.\"exec.ex.http\"]\ntransport = \"http\"\nendpoint = \"http://{http}\"\n\
             timeout_ms = {timeout_ms}\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n\
             [signers.\"signer.ex.grpc\"]\ntransport = \"grpc\"\nendpoint = \"http://{grpc}\"\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n\
             [signers.\"signer.ex.http\"]\ntransport = \"http\"\nendpoint = \"http://{http}/signer\"\n\
             auth = {{ hmac_env = \"QTG_EXAMPLE_SECRET\" }}\n"
        ),
    )?;
    Ok(Remote { proc, registry })
}
