//! Helpers written in Python (tests/py/), run from the test venv of
//! `scripts/ensure-test-venv.sh`: receivers that check qtg's output with other people's code
//! (the reference Standard Webhooks library, a real SMTP server, an OTLP collector).

use super::*;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The test venv's python (created on first use; shared by concurrent tests).
pub async fn test_python() -> anyhow::Result<String> {
    let out = Command::new(repo().join("scripts/ensure-test-venv.sh")).output().await?;
    anyhow::ensure!(
        out.status.success(),
        "scripts/ensure-test-venv.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// A running tests/py helper that said `LISTENING <port>` and writes JSON lines to `out`.
pub struct PyHelper {
    _child: Child,
    pub port: u16,
    pub out: PathBuf,
}

impl PyHelper {
    /// Runs `tests/py/<script>` with `args` and `--out <a file of its own>`; waits (30 s) for
    /// its `LISTENING <port>` line.
    pub async fn spawn(script: &str, args: &[String]) -> anyhow::Result<PyHelper> {
        let py = test_python().await?;
        let out = std::env::temp_dir().join(format!("qtg-{}-{}.jsonl", script, uuid::Uuid::new_v4()));
        let mut child = Command::new(py)
            .arg(repo().join("tests/py").join(script))
            .args(args)
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().context("helper stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await??.unwrap_or_default();
        let port = line.strip_prefix("LISTENING ").context(format!("{script} said {line:?}"))?.trim().parse()?;
        Ok(PyHelper { _child: child, port, out })
    }

    /// Every JSON line written so far.
    pub fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}
