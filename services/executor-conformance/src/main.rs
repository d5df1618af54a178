//! `qtg-executor-conformance --endpoint URL --transport grpc|http [--executor-key KEY]
//! [--bearer-env VAR | --hmac-env VAR] [--timeout-ms N]`: checks a remote executor against the protocol and
//! prints a pass/fail table; exits 0 only if every check passed.

use std::time::Duration;

use qtg_conformance::{run, Target, Transport};
use qtg_executor::remote::TlsClient;
use qtg_wire_auth::Credentials;

const USAGE: &str = "usage: qtg-executor-conformance --endpoint URL --transport grpc|http [--executor-key KEY] \
                     [--bearer-env VAR | --hmac-env VAR] [--timeout-ms N] [--ca-file PEM [--tls-domain NAME]]";

fn parse() -> Result<Target, String> {
    let mut args = std::env::args().skip(1);
    let (mut endpoint, mut transport, mut key, mut auth, mut timeout) =
        (None, None, "exec.conformance".to_string(), Credentials::None, 5000u64);
    let (mut ca_file, mut domain): (Option<String>, Option<String>) = (None, None);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--endpoint" => endpoint = Some(value()?),
            "--transport" => {
                transport = Some(match value()?.as_str() {
                    "grpc" => Transport::Grpc,
                    "http" => Transport::Http,
                    other => return Err(format!("--transport {other:?}: grpc or http\n{USAGE}")),
                })
            }
            "--executor-key" => key = value()?,
            "--bearer-env" => {
                let var = value()?;
                auth = Credentials::Bearer(std::env::var(&var).map_err(|_| format!("{var} is not set"))?);
            }
            "--hmac-env" => {
                let var = value()?;
                auth = Credentials::Hmac(std::env::var(&var).map_err(|_| format!("{var} is not set"))?.into_bytes());
            }
            "--timeout-ms" => {
                timeout = value()?.parse().map_err(|_| format!("--timeout-ms takes milliseconds\n{USAGE}"))?
            }
            "--ca-file" => ca_file = Some(value()?),
            "--tls-domain" => domain = Some(value()?),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Target {
        endpoint: endpoint.ok_or_else(|| format!("--endpoint is required\n{USAGE}"))?,
        transport: transport.ok_or_else(|| format!("--transport is required\n{USAGE}"))?,
        executor_key: key,
        auth,
        timeout: Duration::from_millis(timeout),
        tls: match ca_file {
            Some(path) => {
                Some(TlsClient { ca_pem: std::fs::read(&path).map_err(|e| format!("--ca-file {path}: {e}"))?, domain })
            }
            None => None,
        },
    })
}

#[tokio::main]
async fn main() {
    let target = match parse() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let report = run(&target).await;
    print!("{}", report.table());
    std::process::exit(if report.passed() { 0 } else { 1 });
}
