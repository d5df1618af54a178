//! `qtgctl`: the operator CLI over qtg's `/v3` HTTP API. Reads `QTG_API_URL` and
//! `QTG_API_KEY` (or `--api-url` / `--api-key`); prints human tables by default and the API's
//! JSON with `--json`. Exit codes: 0 success, 1 the API refused or failed (its error code and
//! message on stderr), 2 usage, 3 `movements watch` ended in a state other than COMPLETED, 4 a
//! check of `venues drill` failed.

mod render;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(
    name = "qtgctl",
    version,
    about = "Operate qtg: templates, movements, approvals, operator actions, diagnosis, keys, controls"
)]
struct Cli {
    /// Base URL of qtg-api, e.g. https://qtg.example.internal
    #[arg(long, env = "QTG_API_URL", global = true, default_value = "http://127.0.0.1:8080")]
    api_url: String,
    /// API key (Bearer); never printed. Prefer the env var: a flag shows in `ps` and shell history
    #[arg(long, env = "QTG_API_KEY", global = true, hide_env_values = true)]
    api_key: Option<String>,
    /// Print the API's JSON instead of tables
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Template proposals and templates
    #[command(subcommand)]
    Templates(Templates),
    /// Movements: create, approve, inspect, watch, operator actions
    #[command(subcommand)]
    Movements(Movements),
    /// Nodes: runbook diagnosis
    #[command(subcommand)]
    Nodes(Nodes),
    /// API keys (admin)
    #[command(subcommand)]
    Keys(Keys),
    /// Kill switch: pause / resume new submits (admin)
    #[command(subcommand)]
    Controls(Controls),
    /// Balances: the latest snapshot per venue, account and asset (--fresh reads the venues now)
    Balances {
        #[arg(long)]
        venue: Option<String>,
        #[arg(long)]
        asset: Option<String>,
        #[arg(long)]
        fresh: bool,
    },
    /// Capital transfers: request one (requester), list them, show one
    #[command(subcommand)]
    CapitalTransfers(CapitalTransfers),
    /// On-chain drift (verify_drift): the last check per scope, and recording a baseline (admin)
    #[command(subcommand)]
    Drift(Drift),
    /// Exchange accounts of the CEX lane, checked directly (no API key: it reads the registry
    /// and the venue's MG_<VENUE>_* credentials like a worker — run it where the workers run)
    #[command(subcommand)]
    Venues(Venues),
    /// The approval policy: versions, the one in force, a draft simulated, proposed, approved
    #[command(subcommand)]
    Policies(Policies),
    /// The address book: named destinations, proposed and activated by two admins
    #[command(subcommand)]
    Book(Book),
    /// Approve a movement (same as `movements approve`)
    Approve {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// A node in full: state, attempt, refs, markers, errors, recent executor calls (same as `nodes inspect`)
    InspectNode { id: String, node_key: String },
    /// Runbook diagnosis of a stuck node (same as `nodes diagnose`)
    Diagnose { id: String, node_key: String },
}

#[derive(Subcommand)]
enum Templates {
    /// Propose a template from a JSON file ({template_key, nodes, edges, risk_controls?}); `-` reads stdin
    Propose { file: PathBuf },
    /// Approve a template proposal (admin; not your own)
    Approve {
        proposal_id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject a template proposal (admin)
    Reject {
        proposal_id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// List templates
    List(Paging),
    /// Show a template's versions, nodes and edges
    Show { template_key: String },
}

#[derive(Args, Clone)]
struct Paging {
    /// Page size (1-200)
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Follow next_cursor until the end
    #[arg(long)]
    all: bool,
}

#[derive(Subcommand)]
enum Movements {
    /// Create a movement (idempotent: the same --idempotency-key and body answer the same movement)
    Create(CreateMovement),
    /// Approve a movement (not your own)
    Approve {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject a movement
    Reject {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Show a movement and its nodes
    Show { id: String },
    /// List movements, newest first
    List {
        /// Only movements in this state (e.g. EXECUTING, MANUAL_INTERVENTION)
        #[arg(long)]
        state: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Follow a movement's DAG live until nothing more happens without a person
    Watch {
        id: String,
        /// Seconds between polls
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Give up after this many seconds (0 = never)
        #[arg(long, default_value_t = 0.0)]
        timeout: f64,
    },
    /// Cancel; while a node may have a side effect in flight only with --runbook-case C6 and --evidence
    Cancel {
        id: String,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        runbook_case: Option<String>,
        /// Evidence: a JSON value or plain text
        #[arg(long)]
        evidence: Option<String>,
    },
    /// Resume a MANUAL_INTERVENTION movement so recovery sweeps again
    Resume {
        id: String,
        #[arg(long)]
        reason: String,
    },
    /// Retry a FAILED node as a new attempt
    Retry {
        id: String,
        node_key: String,
        #[arg(long)]
        reason: String,
    },
    /// Complete a manual_* node waiting for a person
    CompleteManual {
        id: String,
        node_key: String,
        /// What was done, by whom, references: a JSON value or plain text
        #[arg(long)]
        evidence: String,
    },
}

#[derive(Args)]
struct CreateMovement {
    /// The whole request body as a JSON file (`-` = stdin); the flags below build it otherwise
    #[arg(long, conflicts_with_all = ["template", "asset", "amount"])]
    file: Option<PathBuf>,
    #[arg(long, required_unless_present = "file")]
    template: Option<String>,
    #[arg(long)]
    template_version: Option<i32>,
    #[arg(long, required_unless_present = "file")]
    asset: Option<String>,
    /// Decimal string, e.g. 100.50
    #[arg(long, required_unless_present = "file")]
    amount: Option<String>,
    #[arg(long)]
    source: Option<String>,
    #[arg(long)]
    destination: Option<String>,
    #[arg(long)]
    callback_url: Option<String>,
    /// Required: retrying with the same key never creates a second movement
    #[arg(long, required_unless_present = "file")]
    idempotency_key: Option<String>,
}

#[derive(Subcommand)]
enum Policies {
    /// The version in force (exit 4 when none is)
    Current,
    /// Every version, newest first
    List(Paging),
    /// A version: its rules, approvals, and what it changes from the version in force
    Show { version: i32 },
    /// What a draft (a JSON file; `-` reads stdin) would have decided for the movements of the
    /// last days: the ones whose outcome changes
    Simulate {
        file: PathBuf,
        #[arg(long, default_value_t = 30.0)]
        days: f64,
    },
    /// Propose a version from a JSON policy document (admin); other admins approve it
    Propose {
        file: PathBuf,
        #[arg(long)]
        description: Option<String>,
        /// RFC 3339 (UTC); default: at its approval
        #[arg(long)]
        effective_at: Option<String>,
    },
    /// Approve a pending version (admin; not your own)
    Approve {
        version: i32,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject (or, its proposer, withdraw) a pending version (admin)
    Reject {
        version: i32,
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand)]
enum Book {
    /// Entries (by status: pending, active, rejected, removed)
    List {
        #[arg(long)]
        status: Option<String>,
    },
    /// Propose an entry (admin); another admin activates it
    Propose {
        #[arg(long)]
        name: String,
        /// cex, evm, cctp, ccip, sim or other
        #[arg(long)]
        lane: String,
        /// A CEX network code, an EVM chain id, a CCIP destination selector (empty: any)
        #[arg(long, default_value = "")]
        network: String,
        #[arg(long)]
        address: String,
        /// The memo or tag beside the address (an exchange's deposit tag)
        #[arg(long, default_value = "")]
        memo: String,
        /// Repeatable
        #[arg(long = "tag")]
        tags: Vec<String>,
        #[arg(long)]
        cool_down_seconds: Option<f64>,
        /// The active entry this one changes
        #[arg(long)]
        replaces: Option<String>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Activate a pending entry (admin; not your own)
    Approve {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject a pending entry (admin)
    Reject {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Remove an active entry (admin)
    Remove {
        id: String,
        #[arg(long)]
        reason: String,
    },
}

#[derive(Subcommand)]
enum Nodes {
    /// Classify a stuck node into the runbook's cases (C1…C7), with evidence and required action
    Diagnose { id: String, node_key: String },
    /// A node in full: state, attempt, refs, markers, errors, recent executor calls
    Inspect { id: String, node_key: String },
}

#[derive(Subcommand)]
enum Keys {
    /// Create a key; its secret is printed once
    Create {
        #[arg(long)]
        principal: String,
        /// viewer, requester, approver, operator or admin (repeatable)
        #[arg(long = "role", required = true)]
        roles: Vec<String>,
    },
    /// List keys (never their secrets)
    List(Paging),
    /// Revoke a key
    Revoke { id: String },
}

#[derive(Subcommand)]
enum Venues {
    /// The runbook's submit-safety drill: the venue's clock, credentials, withdrawal history
    /// readable across the lookback window, whitelist, asset and network open — reading only,
    /// nothing moves. Exit 0 when every check passes, 4 otherwise.
    Drill {
        /// The venue account (an entry's `config.venue`)
        #[arg(long)]
        venue: String,
        #[arg(long)]
        asset: String,
        /// The network (default: the entry's)
        #[arg(long)]
        network: Option<String>,
        /// The executor registry the workers use
        #[arg(long, env = "MG_EXECUTOR_REGISTRY")]
        registry: PathBuf,
    },
}

#[derive(Subcommand)]
enum Controls {
    /// Pause new submits: global, or --lane L, or --executor KEY
    Pause(ControlTarget),
    /// Lift a pause
    Resume(ControlTarget),
    /// Active pauses
    List,
}

#[derive(Subcommand)]
enum CapitalTransfers {
    /// Request a capital transfer: recorded, and its movement created for approval
    Create {
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        #[arg(long)]
        asset: String,
        #[arg(long)]
        amount: String,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        template: String,
        #[arg(long)]
        idempotency_key: String,
    },
    /// The newest requests (optionally in one state)
    List {
        #[arg(long)]
        state: Option<String>,
    },
    /// One request with its movement and outcome
    Show { id: String },
}

#[derive(Subcommand)]
enum Drift {
    /// The last check per scope (a chain evm:<id>, or signers): status and differences
    Show,
    /// Record a scope's baseline from what its last check observed (the enrolment: run it
    /// once the facts shown by `drift show` are the right ones)
    Baseline {
        /// evm:<chain id> or signers
        #[arg(long)]
        scope: String,
        #[arg(long)]
        reason: String,
    },
}

#[derive(Args)]
struct ControlTarget {
    #[arg(long, conflicts_with = "executor")]
    lane: Option<String>,
    #[arg(long)]
    executor: Option<String>,
    /// Pause everything (the default when neither --lane nor --executor is given)
    #[arg(long, conflicts_with_all = ["lane", "executor"])]
    global: bool,
    #[arg(long)]
    reason: String,
}

impl ControlTarget {
    fn body(&self) -> Value {
        let (scope, target) = match (&self.lane, &self.executor) {
            (Some(l), _) => ("lane", Some(l.as_str())),
            (None, Some(e)) => ("executor", Some(e.as_str())),
            (None, None) => ("global", None),
        };
        json!({"scope": scope, "target": target, "reason": self.reason})
    }
}

/// The API client: one base URL, one key.
struct Client {
    base: String,
    key: Option<String>,
    http: reqwest::Client,
}

/// An API refusal: its status, code and message.
#[derive(Debug)]
struct ApiRefusal {
    status: u16,
    code: String,
    message: String,
}

impl std::fmt::Display for ApiRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiRefusal {}

impl Client {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let url = format!("{}{}", self.base.trim_end_matches('/'), path);
        let mut req = self.http.request(method.clone(), &url);
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{method} {}: {}", qtg_core::urls::redact(&url), e.without_url()))?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if status >= 400 {
            return Err(ApiRefusal {
                status,
                code: value["error"]["code"].as_str().unwrap_or("HTTP_ERROR").to_string(),
                message: value["error"]["message"].as_str().map(String::from).unwrap_or_else(|| value.to_string()),
            }
            .into());
        }
        Ok(value)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call(reqwest::Method::POST, path, Some(&body)).await
    }

    /// Every page of a list (or only the first).
    async fn list(&self, path: &str, paging: &Paging) -> anyhow::Result<Value> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut p = format!("{path}{sep}limit={}", paging.limit);
            if let Some(c) = &cursor {
                p.push_str(&format!("&cursor={}", encode(c)));
            }
            let page = self.get(&p).await?;
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
            cursor = page["next_cursor"].as_str().map(String::from);
            if !paging.all || cursor.is_none() {
                return Ok(json!({"items": items, "next_cursor": cursor}));
            }
        }
    }
}

/// Percent-encodes a path segment or query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn read_json(file: &PathBuf) -> anyhow::Result<Value> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?
    };
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))
}

/// `--evidence` as JSON when it parses, else as text.
fn evidence(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

fn reason_body(reason: &Option<String>) -> Value {
    match reason {
        Some(r) => json!({"reason": r}),
        None => json!({}),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = Cli::parse();
    let code = match run(&cli).await {
        Ok(code) => code,
        Err(e) => {
            match e.downcast_ref::<ApiRefusal>() {
                Some(r) => eprintln!("error: {r}"),
                None => eprintln!("error: {e:#}"),
            }
            1
        }
    };
    std::process::exit(code);
}

async fn run(cli: &Cli) -> anyhow::Result<i32> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let c = Client { base: cli.api_url.clone(), key: cli.api_key.clone(), http };
    // `venues` talks to the venue, not to the API.
    if c.key.is_none() && !matches!(cli.command, Command::Venues(_)) {
        bail!("no API key: set QTG_API_KEY or pass --api-key");
    }
    let out = |v: &Value, human: &dyn Fn(&Value) -> String| {
        if cli.json {
            println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
        } else {
            print!("{}", human(v));
        }
    };
    match &cli.command {
        Command::Venues(Venues::Drill { venue, asset, network, registry }) => {
            return drill(cli.json, venue, asset, network.as_deref(), registry).await;
        }
        Command::Templates(t) => match t {
            Templates::Propose { file } => {
                let v = c.post("/v3/template-proposals", read_json(file)?).await?;
                out(&v, &render::proposal);
            }
            Templates::Approve { proposal_id, reason } => {
                let v = c
                    .post(&format!("/v3/template-proposals/{}/approve", encode(proposal_id)), reason_body(reason))
                    .await?;
                out(&v, &render::object);
            }
            Templates::Reject { proposal_id, reason } => {
                let v = c
                    .post(&format!("/v3/template-proposals/{}/reject", encode(proposal_id)), reason_body(reason))
                    .await?;
                out(&v, &render::object);
            }
            Templates::List(p) => out(&c.list("/v3/templates", p).await?, &render::templates),
            Templates::Show { template_key } => {
                out(&c.get(&format!("/v3/templates/{}", encode(template_key))).await?, &render::template)
            }
        },
        Command::Movements(m) => return movements(cli, &c, m, &out).await,
        Command::Nodes(Nodes::Diagnose { id, node_key }) | Command::Diagnose { id, node_key } => {
            let v = c.get(&format!("/v3/movements/{}/nodes/{}/diagnosis", encode(id), encode(node_key))).await?;
            out(&v, &render::diagnosis);
        }
        Command::Nodes(Nodes::Inspect { id, node_key }) | Command::InspectNode { id, node_key } => {
            let v = inspect_node(&c, id, node_key).await?;
            out(&v, &render::node);
        }
        Command::Policies(p) => return policies(&c, p, &out).await,
        Command::Book(b) => match b {
            Book::List { status } => {
                let path = match status {
                    Some(s) => format!("/v3/address-book?status={}&limit=200", encode(s)),
                    None => "/v3/address-book?limit=200".into(),
                };
                out(&c.get(&path).await?, &render::book)
            }
            Book::Propose { name, lane, network, address, memo, tags, cool_down_seconds, replaces, reason } => {
                let body = json!({"name": name, "lane": lane, "network": network, "address": address, "memo": memo,
                                  "tags": tags, "cool_down_seconds": cool_down_seconds, "replaces": replaces,
                                  "reason": reason});
                out(&c.post("/v3/address-book", body).await?, &render::object)
            }
            Book::Approve { id, reason } => out(
                &c.post(&format!("/v3/address-book/{}/approve", encode(id)), reason_body(reason)).await?,
                &render::object,
            ),
            Book::Reject { id, reason } => out(
                &c.post(&format!("/v3/address-book/{}/reject", encode(id)), reason_body(reason)).await?,
                &render::object,
            ),
            Book::Remove { id, reason } => {
                let v = c
                    .post(&format!("/v3/address-book/{}/actions/remove", encode(id)), json!({"reason": reason}))
                    .await?;
                out(&v, &render::object)
            }
        },
        Command::Approve { id, reason } => {
            let v = c.post(&format!("/v3/movements/{}/approve", encode(id)), reason_body(reason)).await?;
            out(&v, &|v| render::movement(v, None));
        }
        Command::Keys(k) => match k {
            Keys::Create { principal, roles } => {
                let v = c.post("/v3/api-keys", json!({"principal": principal, "roles": roles})).await?;
                out(&v, &render::key_created);
            }
            Keys::List(p) => out(&c.list("/v3/api-keys", p).await?, &render::keys),
            Keys::Revoke { id } => {
                c.call(reqwest::Method::DELETE, &format!("/v3/api-keys/{}", encode(id)), None).await?;
                out(&json!({"revoked": id}), &|_| format!("revoked {id}\n"));
            }
        },
        Command::Controls(ct) => match ct {
            Controls::Pause(t) => out(&c.post("/v3/controls/pause", t.body()).await?, &render::pause),
            Controls::Resume(t) => {
                out(&c.post("/v3/controls/resume", t.body()).await?, &|v| render::pause(&v["resumed"]))
            }
            Controls::List => out(&c.get("/v3/controls").await?, &render::pauses),
        },
        Command::Balances { venue, asset, fresh } => {
            let mut query = Vec::new();
            if let Some(v) = venue {
                query.push(format!("venue={}", encode(v)));
            }
            if let Some(a) = asset {
                query.push(format!("asset={}", encode(a)));
            }
            if *fresh {
                query.push("fresh=true".into());
            }
            let path =
                if query.is_empty() { "/v3/balances".to_string() } else { format!("/v3/balances?{}", query.join("&")) };
            out(&c.get(&path).await?, &render::balances)
        }
        Command::CapitalTransfers(t) => match t {
            CapitalTransfers::Create { from, to, asset, amount, reason, template, idempotency_key } => {
                let body = json!({"from": from, "to": to, "asset": asset, "amount": amount, "reason": reason,
                                  "template_key": template, "idempotency_key": idempotency_key});
                out(&c.post("/v3/capital-transfers", body).await?, &render::object)
            }
            CapitalTransfers::List { state } => {
                let path = match state {
                    Some(s) => format!("/v3/capital-transfers?state={}", encode(s)),
                    None => "/v3/capital-transfers".into(),
                };
                out(&c.get(&path).await?, &render::capital_transfers)
            }
            CapitalTransfers::Show { id } => {
                out(&c.get(&format!("/v3/capital-transfers/{}", encode(id))).await?, &render::object)
            }
        },
        Command::Drift(d) => match d {
            Drift::Show => out(&c.get("/v3/drift").await?, &render::drift),
            Drift::Baseline { scope, reason } => {
                let v = c.post("/v3/drift/baseline", json!({"scope": scope, "reason": reason})).await?;
                out(&v, &|v| {
                    let n = v["facts"].as_object().map(|f| f.len()).unwrap_or(0);
                    format!("baseline of {scope}: {n} facts recorded\n")
                });
            }
        },
    }
    Ok(0)
}

async fn policies(c: &Client, p: &Policies, out: &Printer<'_>) -> anyhow::Result<i32> {
    let version_path = |v: &i32, rest: &str| format!("/v3/policies/{v}{rest}");
    match p {
        Policies::Current => match c.get("/v3/policies/current").await {
            Ok(v) => out(&v, &render::policy),
            Err(e) if e.downcast_ref::<ApiRefusal>().is_some_and(|r| r.status == 404) => {
                eprintln!("no policy is in force: each template's approvals and the risk limits alone apply");
                return Ok(4);
            }
            Err(e) => return Err(e),
        },
        Policies::List(paging) => out(&c.list("/v3/policies", paging).await?, &render::policies),
        Policies::Show { version } => {
            let mut v = c.get(&version_path(version, "")).await?;
            // What it changes from the version in force (none: from no policy).
            let current = c.get("/v3/policies/current").await.ok();
            let base = current.filter(|cur| cur["version"] != v["version"]);
            v["changes"] = render::policy_changes(base.as_ref().map(|b| &b["document"]), &v["document"]);
            v["changes_from"] = base.map(|b| b["version"].clone()).unwrap_or(Value::Null);
            out(&v, &render::policy)
        }
        Policies::Simulate { file, days } => {
            let body = json!({"document": read_json(file)?, "days": days});
            out(&c.post("/v3/policies/simulate", body).await?, &render::simulation)
        }
        Policies::Propose { file, description, effective_at } => {
            let body = json!({"document": read_json(file)?, "description": description, "effective_at": effective_at});
            out(&c.post("/v3/policies", body).await?, &render::policy)
        }
        Policies::Approve { version, reason } => {
            out(&c.post(&version_path(version, "/approve"), reason_body(reason)).await?, &render::policy)
        }
        Policies::Reject { version, reason } => {
            out(&c.post(&version_path(version, "/reject"), reason_body(reason)).await?, &render::policy)
        }
    }
    Ok(0)
}

async fn movements(cli: &Cli, c: &Client, m: &Movements, out: &Printer<'_>) -> anyhow::Result<i32> {
    let path = |id: &str, rest: &str| format!("/v3/movements/{}{rest}", encode(id));
    let v = match m {
        Movements::Create(a) => {
            let body = match &a.file {
                Some(f) => read_json(f)?,
                None => {
                    let mut intent = json!({"asset": a.asset, "amount": a.amount});
                    if let Some(s) = &a.source {
                        intent["source"] = json!(s);
                    }
                    if let Some(d) = &a.destination {
                        intent["destination"] = json!(d);
                    }
                    let mut body =
                        json!({"template_key": a.template, "intent": intent, "idempotency_key": a.idempotency_key});
                    if let Some(v) = a.template_version {
                        body["template_version"] = json!(v);
                    }
                    if let Some(u) = &a.callback_url {
                        body["callback_url"] = json!(u);
                    }
                    body
                }
            };
            c.post("/v3/movements", body).await?
        }
        Movements::Approve { id, reason } => c.post(&path(id, "/approve"), reason_body(reason)).await?,
        Movements::Reject { id, reason } => c.post(&path(id, "/reject"), reason_body(reason)).await?,
        Movements::Show { id } => c.get(&path(id, "")).await?,
        Movements::List { state, paging } => {
            let p = match state {
                Some(s) => format!("/v3/movements?state={}", encode(s)),
                None => "/v3/movements".to_string(),
            };
            let v = c.list(&p, paging).await?;
            out(&v, &render::movements);
            return Ok(0);
        }
        Movements::Watch { id, interval, timeout } => return watch(cli, c, id, *interval, *timeout).await,
        Movements::Cancel { id, reason, runbook_case, evidence: e } => {
            let mut body = json!({"reason": reason});
            if let Some(rc) = runbook_case {
                body["runbook_case"] = json!(rc);
            }
            if let Some(e) = e {
                body["evidence"] = evidence(e);
            }
            c.post(&path(id, "/actions/cancel"), body).await?
        }
        Movements::Resume { id, reason } => c.post(&path(id, "/actions/resume"), json!({"reason": reason})).await?,
        Movements::Retry { id, node_key, reason } => {
            c.post(&path(id, &format!("/nodes/{}/actions/retry", encode(node_key))), json!({"reason": reason})).await?
        }
        Movements::CompleteManual { id, node_key, evidence: e } => {
            let p = path(id, &format!("/nodes/{}/actions/complete-manual", encode(node_key)));
            c.post(&p, json!({"evidence": evidence(e)})).await?
        }
    };
    out(&v, &|v| render::movement(v, None));
    Ok(0)
}

/// Prints a value: as JSON with `--json`, else with the given human renderer.
type Printer<'a> = dyn Fn(&Value, &dyn Fn(&Value) -> String) + 'a;

/// The node as the movement shows it, with its recent calls and markers when the key may read
/// the diagnosis (operator); a viewer gets the node alone.
async fn inspect_node(c: &Client, id: &str, node_key: &str) -> anyhow::Result<Value> {
    let m = c.get(&format!("/v3/movements/{}", encode(id))).await?;
    let node = m["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["node_key"] == node_key))
        .cloned()
        .with_context(|| format!("movement {id} has no node {node_key:?}"))?;
    let mut out = json!({"movement_id": id, "request_state": m["request_state"], "node": node});
    match c.get(&format!("/v3/movements/{}/nodes/{}/diagnosis", encode(id), encode(node_key))).await {
        Ok(d) => {
            out["recent_events"] = d["evidence"]["recent_events"].clone();
            out["markers"] = d["evidence"]["markers"].clone();
            out["case"] = d["case"].clone();
        }
        Err(e) if e.downcast_ref::<ApiRefusal>().is_some_and(|r| r.status == 403) => {}
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// States after which nothing happens without a person (or ever).
const SETTLED: &[&str] =
    &["COMPLETED", "FAILED", "EXPIRED", "REJECTED", "CANCELLED", "MANUAL_INTERVENTION", "WAITING_MANUAL_ACTION"];

async fn watch(cli: &Cli, c: &Client, id: &str, interval: f64, timeout: f64) -> anyhow::Result<i32> {
    let path = format!("/v3/movements/{}", encode(id));
    let first = c.get(&path).await?;
    // The DAG's edges come from the movement's template version.
    let template =
        c.get(&format!("/v3/templates/{}", encode(first["template_key"].as_str().unwrap_or_default()))).await?;
    let edges = template["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["version"] == first["template_version"]))
        .map(|v| v["edges"].clone())
        .unwrap_or(Value::Array(vec![]));
    let pause = Duration::from_secs_f64(if interval.is_finite() { interval.clamp(0.1, 3600.0) } else { 1.0 });
    let started = std::time::Instant::now();
    let mut last = String::new();
    let mut m = first;
    loop {
        let frame = if cli.json {
            serde_json::to_string(&m).unwrap_or_default() + "\n"
        } else {
            render::movement(&m, Some(&edges))
        };
        if frame != last {
            if !cli.json {
                println!("--- {}s", started.elapsed().as_secs());
            }
            print!("{frame}");
            last = frame;
        }
        let state = m["request_state"].as_str().unwrap_or_default();
        if SETTLED.contains(&state) {
            return Ok(if state == "COMPLETED" { 0 } else { 3 });
        }
        if timeout > 0.0 && started.elapsed().as_secs_f64() > timeout {
            eprintln!("watch: still {state} after {timeout}s");
            return Ok(3);
        }
        tokio::time::sleep(pause).await;
        // A transient error does not end the watch; three in a row do.
        let mut failures = 0;
        m = loop {
            match c.get(&path).await {
                Ok(v) => break v,
                Err(e) if failures < 2 && e.downcast_ref::<ApiRefusal>().is_none_or(|r| r.status >= 500) => {
                    failures += 1;
                    eprintln!("watch: {e:#}; retrying");
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        };
    }
}

/// `venues drill`: the venue client of the registry's CEX entry for `venue`, with the same
/// credentials variables the workers read, and the lane's read-only checks.
async fn drill(
    json: bool,
    venue: &str,
    asset: &str,
    network: Option<&str>,
    registry: &std::path::Path,
) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(registry).with_context(|| format!("cannot read {}", registry.display()))?;
    let file = qtg_executor::RegistryFile::parse(&text)?;
    let mut entries = Vec::new();
    for (key, spec) in file.executors.iter().filter(|(_, s)| s.implementation.as_deref() == Some("cex")) {
        let config =
            qtg_cex::EntryConfig::parse(key, spec.config.as_ref()).map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
        entries.push((key.clone(), config));
    }
    let venues: Vec<_> = entries.iter().map(|(_, c)| c.venue.clone()).collect();
    // The withdrawal entry's settings (its lookback) when there is one.
    entries.sort_by_key(|(k, c)| (c.role(k).ok() != Some(qtg_cex::Role::WithdrawalAction), k.clone()));
    let Some((key, config)) = entries.into_iter().find(|(_, c)| c.venue == venue) else {
        bail!("no cex entry for venue {venue:?} in {} (venues: {venues:?})", registry.display());
    };
    let setting = |k: &str| std::env::var(k).ok();
    let client = config.venue(&setting).map_err(anyhow::Error::msg)?;
    let skew = std::env::var("MG_CLOCK_SKEW_MARGIN_SECONDS").ok().and_then(|v| v.parse::<f64>().ok()).unwrap_or(5.0);
    let network = network.map(str::to_string).or_else(|| config.network.clone());
    let checks = qtg_cex::drill(
        client.as_ref(),
        asset,
        network.as_deref(),
        config.lookback(),
        chrono::Duration::milliseconds((skew * 1000.0) as i64),
    )
    .await;
    let ok = checks.iter().all(|c| c.ok);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"venue": venue, "entry": key, "asset": asset, "ok": ok, "checks": checks})
            )?
        );
    } else {
        println!(
            "venue {venue} (entry {key}), asset {asset}{}",
            network.map(|n| format!(" on {n}")).unwrap_or_default()
        );
        for c in &checks {
            println!("  {} {:<17} {}", if c.ok { "ok  " } else { "FAIL" }, c.name, c.detail);
        }
        println!("{}", if ok { "drill passed: recovery can reconcile this venue" } else { "drill FAILED" });
    }
    Ok(if ok { 0 } else { 4 })
}
