//! `qtgctl` against a running `qtg`: keys, template propose/approve/list/show, movement
//! create (idempotent) / approve / watch / show / list, diagnosis, controls, revocation, and
//! clear errors with exit code 1.

use std::time::Duration;

use qtg_tests::*;
use serde_json::{json, Value};

struct Ctl {
    url: String,
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

impl Ctl {
    async fn run(&self, key: &str, args: &[&str]) -> anyhow::Result<Out> {
        let mut cmd = tokio::process::Command::new(bin_dir().join("qtgctl"));
        cmd.args(args).env_clear().env("QTG_API_URL", &self.url);
        if !key.is_empty() {
            cmd.env("QTG_API_KEY", key);
        }
        let o = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await??;
        Ok(Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        })
    }

    async fn ok(&self, key: &str, args: &[&str]) -> anyhow::Result<Out> {
        let o = self.run(key, args).await?;
        anyhow::ensure!(o.code == 0, "qtgctl {args:?} exited {}: {}{}", o.code, o.stdout, o.stderr);
        Ok(o)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qtgctl_drives_a_movement_end_to_end() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::all_in_one(&db.url, &[("MG_NODE_DISPATCH_INTERVAL_SECONDS", "0.2")]).await?;
    let ctl = Ctl { url: api.base.clone() };
    let admin = api.admin_key.clone();

    let mut keys = std::collections::BTreeMap::new();
    for (principal, role) in [("ops", "operator"), ("bot", "requester"), ("alice", "approver"), ("eve", "viewer")] {
        let k = ctl.ok(&admin, &["--json", "keys", "create", "--principal", principal, "--role", role]).await?.json();
        assert_eq!(k["roles"], json!([role]));
        keys.insert(
            role,
            (k["id"].as_str().unwrap_or_default().to_string(), k["secret"].as_str().unwrap_or_default().to_string()),
        );
    }
    let key = |role: &str| keys[role].1.clone();

    let dir = std::env::temp_dir().join(format!("qtgctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("template.json");
    std::fs::write(
        &file,
        json!({"template_key": "t.cli", "nodes": [
            {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"},
            {"node_key": "b", "node_kind": "observe", "action_type": "deposit_observe",
             "executor_key": "exec.sim.observe", "config": {"sim": {"submit_result": "completed"}}}],
            "edges": [{"from": "a", "to": "b"}]})
        .to_string(),
    )?;
    let p =
        ctl.ok(&key("operator"), &["--json", "templates", "propose", file.to_str().unwrap_or_default()]).await?.json();
    let pid = p["id"].as_str().unwrap_or_default().to_string();
    let self_approve = ctl.run(&key("operator"), &["templates", "approve", &pid]).await?;
    assert_eq!(self_approve.code, 1);
    assert!(self_approve.stderr.contains("403 FORBIDDEN"), "{}", self_approve.stderr);
    ctl.ok(&admin, &["templates", "approve", &pid, "--reason", "reviewed"]).await?;
    assert!(ctl.ok(&key("viewer"), &["templates", "list"]).await?.stdout.contains("t.cli"));
    let shown = ctl.ok(&key("viewer"), &["templates", "show", "t.cli"]).await?.stdout;
    assert!(shown.contains("exec.sim.observe") && shown.contains("a -> b"), "{shown}");

    let create = [
        "--json",
        "movements",
        "create",
        "--template",
        "t.cli",
        "--asset",
        "USDC",
        "--amount",
        "12.50",
        "--destination",
        "0xdest",
        "--idempotency-key",
        "cli-1",
    ];
    let m = ctl.ok(&key("requester"), &create).await?.json();
    let id = m["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(m["request_state"], "PENDING_APPROVAL");
    let again = ctl.ok(&key("requester"), &create).await?.json();
    assert_eq!(again["id"], m["id"], "the same idempotency key answers the same movement");

    let refused = ctl.run(&key("requester"), &["movements", "approve", &id]).await?;
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("FORBIDDEN"), "{}", refused.stderr);
    ctl.ok(&key("approver"), &["movements", "approve", &id, "--reason", "ok"]).await?;

    let watched = ctl.ok(&key("viewer"), &["movements", "watch", &id, "--interval", "0.2", "--timeout", "30"]).await?;
    assert!(watched.stdout.contains("COMPLETED"), "{}", watched.stdout);
    assert!(watched.stdout.contains("\n  b "), "b is drawn under a: {}", watched.stdout);
    let shown = ctl.ok(&key("viewer"), &["--json", "movements", "show", &id]).await?.json();
    assert_eq!(shown["request_state"], "COMPLETED");
    assert!(ctl.ok(&key("viewer"), &["movements", "list", "--state", "COMPLETED"]).await?.stdout.contains(&id));
    let d = ctl.ok(&key("operator"), &["--json", "nodes", "diagnose", &id, "a"]).await?.json();
    assert!(d["case"].is_null(), "not stuck: case null, {d}");
    assert!(ctl.ok(&key("operator"), &["diagnose", &id, "a"]).await?.stdout.contains("required action"));
    let inspected = ctl.ok(&key("operator"), &["inspect-node", &id, "a"]).await?.stdout;
    assert!(inspected.contains("COMPLETED") && inspected.contains("submit"), "{inspected}");
    let as_viewer = ctl.ok(&key("viewer"), &["--json", "nodes", "inspect", &id, "b"]).await?.json();
    assert_eq!(as_viewer["node"]["node_state"], "COMPLETED");

    let paused = ctl.ok(&admin, &["controls", "pause", "--lane", "cex", "--reason", "exchange incident"]).await?;
    assert!(paused.stdout.contains("lane cex"), "{}", paused.stdout);
    assert!(ctl.ok(&key("viewer"), &["controls", "list"]).await?.stdout.contains("exchange incident"));
    ctl.ok(&admin, &["controls", "resume", "--lane", "cex", "--reason", "resolved"]).await?;
    assert!(ctl.ok(&key("viewer"), &["controls", "list"]).await?.stdout.contains("no pauses"));

    let listed = ctl.ok(&admin, &["keys", "list", "--all"]).await?.stdout;
    assert!(listed.contains("alice") && !listed.contains(&key("approver")), "no secret in a listing: {listed}");
    ctl.ok(&admin, &["keys", "revoke", &keys["viewer"].0]).await?;
    let gone = ctl.run(&key("viewer"), &["movements", "show", &id]).await?;
    assert_eq!(gone.code, 1);
    assert!(gone.stderr.contains("401 UNAUTHENTICATED"), "{}", gone.stderr);
    let no_key = ctl.run("", &["movements", "list"]).await?;
    assert_eq!(no_key.code, 1);
    assert!(no_key.stderr.contains("QTG_API_KEY"), "{}", no_key.stderr);
    let bad = ctl
        .run(
            &key("requester"),
            &[
                "movements",
                "create",
                "--template",
                "t.cli",
                "--asset",
                "USDC",
                "--amount",
                "0",
                "--idempotency-key",
                "x",
            ],
        )
        .await?;
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("VALIDATION_ERROR"), "{}", bad.stderr);

    let _ = std::fs::remove_dir_all(&dir);
    drop(api);
    db.drop_db().await;
    Ok(())
}

/// The approval policy and the address book from the command line: a book entry proposed and
/// activated by two admins, a draft simulated, proposed, shown with its changes and approved
/// by another admin; `policies current` exits 4 while none is in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qtgctl_changes_the_policy_and_the_book_with_two_admins() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let ctl = Ctl { url: api.base.clone() };
    let admin = api.admin_key.clone();
    let root2 = api.key("root-2", "admin").await?;
    let viewer = api.key("eve", "viewer").await?;
    let none = ctl.run(&viewer, &["policies", "current"]).await?;
    assert_eq!(none.code, 4, "{}{}", none.stdout, none.stderr);

    let e = ctl
        .ok(
            &admin,
            &[
                "--json",
                "book",
                "propose",
                "--name",
                "cold",
                "--lane",
                "evm",
                "--network",
                "1",
                "--address",
                "0xC01D",
                "--tag",
                "custody",
            ],
        )
        .await?
        .json();
    let id = e["id"].as_str().unwrap_or_default().to_string();
    let own = ctl.run(&admin, &["book", "approve", &id]).await?;
    assert_eq!(own.code, 1, "its proposer does not activate it: {}", own.stderr);
    assert!(own.stderr.contains("SELF_APPROVAL"), "{}", own.stderr);
    ctl.ok(&root2, &["book", "approve", &id, "--reason", "checked"]).await?;
    let listed = ctl.ok(&viewer, &["book", "list", "--status", "active"]).await?.stdout;
    assert!(listed.contains("cold") && listed.contains("0xC01D"), "{listed}");

    let draft = std::env::temp_dir().join(format!("{}-policy.json", db.name));
    std::fs::write(
        &draft,
        json!({"rules": [{"name": "book-only", "when": {"destinations": {"in_book": false}},
                          "action": {"type": "block", "reason": "not in the book"}},
                         {"name": "any", "action": {"type": "approve", "groups": [{"min": 1, "role": "approver"}]}}]})
        .to_string(),
    )?;
    let file = draft.to_string_lossy().to_string();
    let sim = ctl.ok(&root2, &["policies", "simulate", &file, "--days", "1"]).await?.stdout;
    assert!(sim.contains("0 of 0 movement(s) would change"), "{sim}");
    let v = ctl.ok(&admin, &["--json", "policies", "propose", &file, "--description", "book only"]).await?.json();
    let version = v["version"].to_string();
    let shown = ctl.ok(&viewer, &["policies", "show", &version]).await?.stdout;
    assert!(shown.contains("changes from no policy") && shown.contains("rule added"), "{shown}");
    assert!(shown.contains("destinations NOT in the book -> BLOCK: not in the book"), "{shown}");
    let own = ctl.run(&admin, &["policies", "approve", &version]).await?;
    assert_eq!(own.code, 1, "{}", own.stderr);
    ctl.ok(&root2, &["policies", "approve", &version, "--reason", "reviewed"]).await?;
    let current = ctl.ok(&viewer, &["policies", "current"]).await?.stdout;
    assert!(current.contains(&format!("policy version {version}: approved")), "{current}");
    std::fs::remove_file(&draft).ok();
    drop(api);
    db.drop_db().await;
    Ok(())
}
