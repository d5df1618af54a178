//! A small W3C WebDriver client over `chromedriver` and headless Chromium (Debian's packages;
//! `scripts/ensure-chromium.sh` installs them, `make test` hands the driver's path over as
//! `QTG_CHROMEDRIVER`): enough to drive the console like a person — navigate, type, click,
//! read, wait, take screenshots.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::http_client;

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub fn chromedriver_bin() -> PathBuf {
    std::env::var("QTG_CHROMEDRIVER").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from("/usr/bin/chromedriver"))
}

/// A browser session: chromedriver on a port of its own, one headless Chromium window.
pub struct Browser {
    _driver: Child,
    base: String,
    http: reqwest::Client,
}

impl Browser {
    /// Starts chromedriver and a 1280×860 headless Chromium (a laptop screen).
    pub async fn start() -> anyhow::Result<Browser> {
        let driver = chromedriver_bin();
        if !driver.exists() {
            bail!("{} is missing: run scripts/ensure-chromium.sh (make test does)", driver.display());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {}", driver.display()))?;
        let http = http_client();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http.get(format!("{base}/status")).send().await.ok();
            if let Some(r) = ready {
                if r.json::<Value>().await.ok().is_some_and(|v| v["value"]["ready"] == true) {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!("chromedriver did not become ready on port {port}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let chromium = driver.with_file_name("chromium");
        let mut options = json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                          "--window-size=1280,860", "--force-device-scale-factor=1"]});
        if chromium.exists() {
            options["binary"] = json!(chromium.to_string_lossy());
        }
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}});
        let v: Value = http.post(format!("{base}/session")).json(&caps).send().await?.json().await?;
        let id = v["value"]["sessionId"].as_str().with_context(|| format!("no session: {v}"))?;
        Ok(Browser { _driver: child, base: format!("{base}/session/{id}"), http })
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url).json(&body.unwrap_or(json!({}))),
        };
        let v: Value = req.send().await?.json().await?;
        if let Some(e) = v["value"].get("error") {
            bail!("webdriver {method} {path}: {e}: {}", v["value"]["message"]);
        }
        Ok(v["value"].clone())
    }

    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.cmd("POST", "/url", Some(json!({"url": url}))).await.map(|_| ())
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page; answers its value.
    pub async fn eval(&self, script: &str, args: Value) -> anyhow::Result<Value> {
        self.cmd("POST", "/execute/sync", Some(json!({"script": script, "args": args}))).await
    }

    async fn find(&self, css: &str) -> anyhow::Result<Option<String>> {
        let url = format!("{}/element", self.base);
        let v: Value =
            self.http.post(&url).json(&json!({"using": "css selector", "value": css})).send().await?.json().await?;
        Ok(v["value"][ELEMENT].as_str().map(str::to_string))
    }

    /// Waits for an element matching `css` to exist; answers its reference.
    pub async fn wait(&self, css: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.find(css).await? {
                return Ok(e);
            }
            if Instant::now() > deadline {
                bail!("no element {css:?} after {timeout:?}; page: {}", self.page_text().await.unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the text of `css` contains `needle`.
    pub async fn wait_text(&self, css: &str, needle: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let t = self
                .eval("const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", json!([css]))
                .await?;
            if let Some(t) = t.as_str().filter(|t| t.contains(needle)) {
                return Ok(t.to_string());
            }
            if Instant::now() > deadline {
                bail!("{css:?} never showed {needle:?}; it shows {t}");
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    pub async fn click(&self, css: &str) -> anyhow::Result<()> {
        let e = self.wait(css, Duration::from_secs(15)).await?;
        self.cmd("POST", &format!("/element/{e}/click"), None).await.map(|_| ())
    }

    /// Types `text` into the field `css` (cleared first).
    pub async fn fill(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let e = self.wait(css, Duration::from_secs(15)).await?;
        self.cmd("POST", &format!("/element/{e}/clear"), None).await?;
        self.cmd("POST", &format!("/element/{e}/value"), Some(json!({"text": text}))).await.map(|_| ())
    }

    /// How many elements match `css` now.
    pub async fn count(&self, css: &str) -> anyhow::Result<u64> {
        let v = self.eval("return document.querySelectorAll(arguments[0]).length;", json!([css])).await?;
        Ok(v.as_u64().unwrap_or(0))
    }

    pub async fn page_text(&self) -> anyhow::Result<String> {
        Ok(self.eval("return document.body.innerText;", json!([])).await?.as_str().unwrap_or_default().to_string())
    }

    /// Writes a PNG of the window to `dir/name.png`; answers its path.
    pub async fn screenshot(&self, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
        let v = self.cmd("GET", "/screenshot", None).await?;
        let png = base64::engine::general_purpose::STANDARD.decode(v.as_str().context("screenshot")?)?;
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png)?;
        Ok(path)
    }

    pub async fn close(self) {
        let _ = self.cmd("DELETE", "", None).await;
    }
}
