//! What an approver sees is what gets paid (issue 26), through the real binaries: text that
//! cannot hide or reorder (intent fields, principals, reasons, template texts), lookalike
//! principals refused and treated as one identity, credentials in URLs never shown, and
//! qtgctl spelling out what a terminal would hide.

use qtg_tests::*;
use serde_json::{json, Value};

/// A 400 VALIDATION_ERROR whose message names `field` and `code_point`.
fn refused(s: u16, b: &Value, field: &str, code_point: &str) {
    assert_eq!((s, b["error"]["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{b}");
    let m = b["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains(field) && m.contains(code_point), "the message names {field} and {code_point}: {m}");
}

/// A database, the API (with `extra`) and the sim lane's demo template installed.
async fn start(extra: &[(&str, &str)]) -> anyhow::Result<(TestDb, Api, Keys)> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, extra).await?;
    let keys = Keys::create(&api).await?;
    install_demo(&api, &keys).await?;
    Ok((db, api, keys))
}

async fn install_demo(api: &Api, keys: &Keys) -> anyhow::Result<()> {
    let demo: Value = serde_json::from_str(&std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo-template.json"),
    )?)?;
    install_template(api, keys, demo).await
}

async fn movements(db: &TestDb) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM movement_requests").fetch_one(&db.pool).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_an_approver_reads_holds_nothing_hidden() -> anyhow::Result<()> {
    let (db, api, keys) = start(&[]).await?;
    let body =
        |intent: Value| json!({"template_key": "demo.sim.transfer", "intent": intent, "idempotency_key": "hidden"});
    let good = json!({"asset": "USDC", "amount": "25", "source": "venue-a", "destination": "0xdest"});

    // Intent fields, at the top and nested, each a different kind of invisible character.
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"destination": "0xabc\u{202E}fed"}), "intent.destination", "U+202E"), // right-to-left override
        (json!({"asset": "US\u{200B}DC"}), "intent.asset", "U+200B"),                 // zero-width space
        (json!({"memo": "\u{FEFF}rent"}), "intent.memo", "U+FEFF"),                   // byte-order mark
        (json!({"source": "venue\u{00AD}a"}), "intent.source", "U+00AD"),             // soft hyphen
        (json!({"destination": {"address": "0xdest", "tag": "1\u{2066}2"}}), "intent.destination.tag", "U+2066"),
        (json!({"destination": "0xde\u{3164}st"}), "intent.destination", "U+3164"), // Hangul filler
        (json!({"memo": "a\u{00A0}b"}), "intent.memo", "U+00A0"),                   // no-break space
        (json!({"note": "x\u{034F}"}), "intent.note", "U+034F"),                    // combining grapheme joiner
    ];
    let before = movements(&db).await?;
    for (patch, field, code) in cases {
        let mut intent = good.clone();
        for (k, v) in patch.as_object().expect("object") {
            intent[k] = v.clone();
        }
        let (s, b) = api.call("POST", "/v3/movements", &keys.requester, Some(body(intent))).await?;
        refused(s, &b, field, code);
    }
    let (s, b) = api
        .call(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(json!({"template_key": "demo.sim.transfer", "intent": good, "idempotency_key": "key\u{2060}1"})),
        )
        .await?;
    refused(s, &b, "idempotency_key", "U+2060");
    assert_eq!(movements(&db).await?, before, "nothing recorded");

    // A movement in plain text is taken; a reason may hold any printable text, not a hidden one.
    let m = api.ok("POST", "/v3/movements", &keys.requester, Some(body(good.clone())), 201).await?;
    let id = m["id"].as_str().expect("id");
    let (s, b) = api
        .call("POST", &format!("/v3/movements/{id}/approve"), &keys.approver, Some(json!({"reason": "ok \u{202E}kO"})))
        .await?;
    refused(s, &b, "reason", "U+202E");
    let m = api.ok("GET", &format!("/v3/movements/{id}"), &keys.requester, None, 200).await?;
    assert_eq!(m["request_state"], "PENDING_APPROVAL", "the refused approval changed nothing");
    api.ok(
        "POST",
        &format!("/v3/movements/{id}/approve"),
        &keys.approver,
        Some(json!({"reason": "Ticket #12 — ok ✅\nsecond line"})),
        200,
    )
    .await?;

    // Template texts a reviewing admin reads: the description, an allow-list entry.
    let node =
        json!({"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"});
    for (proposal, field, code) in [
        (
            json!({"template_key": "t.hidden", "description": "pays \u{202E}xyz", "nodes": [node.clone()]}),
            "description",
            "U+202E",
        ),
        (
            json!({
                "template_key": "t.hidden", "nodes": [node.clone()],
                "risk_controls": {"destination_allowlist": ["0xab\u{200B}c"]}
            }),
            "risk_controls.destination_allowlist[0]",
            "U+200B",
        ),
    ] {
        let (s, b) = api.call("POST", "/v3/template-proposals", &keys.operator, Some(proposal)).await?;
        refused(s, &b, field, code);
    }
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookalike_principals_are_refused_and_count_as_one() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[]).await?;
    let keys = Keys::create(&api).await?;
    let rita = api.key("rita", "requester").await?;
    let mint = |p: &str| json!({"principal": p, "roles": ["approver"]});
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM api_keys").fetch_one(&db.pool).await?;
    // Invisible characters: refused outright.
    // (Fullwidth forms are restricted from identifiers: refused as well.)
    for (p, code) in
        [("rita\u{2060}", "U+2060"), ("ri\u{200D}ta", "U+200D"), ("rita\u{FE0F}", "U+FE0F"), ("ｒｉｔａ", "U+FF52")]
    {
        let (s, b) = api.call("POST", "/v3/api-keys", &api.admin_key, Some(mint(p))).await?;
        refused(s, &b, "principal", code);
    }
    // Visible lookalikes: another case, Cyrillic letters, I for l.
    for p in ["RITA", "r\u{0456}ta", "rit\u{0430}"] {
        let (s, b) = api.call("POST", "/v3/api-keys", &api.admin_key, Some(mint(p))).await?;
        assert_eq!((s, b["error"]["code"].as_str()), (409, Some("CONFLICT")), "{p}: {b}");
        assert!(b["error"]["message"].as_str().unwrap_or_default().contains("looks like"), "{b}");
    }
    let (s, b) = api.call("POST", "/v3/api-keys", &api.admin_key, Some(mint("ops.aIice"))).await?;
    assert_eq!(s, 201, "no principal like it yet: {b}");
    let (s, b) = api.call("POST", "/v3/api-keys", &api.admin_key, Some(mint("ops.alice"))).await?;
    assert_eq!(s, 409, "l after I: {b}");
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM api_keys").fetch_one(&db.pool).await?;
    assert_eq!(after, before + 1, "only the one distinct principal was minted");

    // A lookalike key from before the rule (written directly) is still rita to four-eyes.
    let secret = "qtg_legacy_lookalike_key_0001";
    sqlx::query(
        "INSERT INTO api_keys (id, principal, roles, key_hash, created_by) VALUES (gen_random_uuid(), $1, \
         ARRAY['approver'], $2, 'legacy')",
    )
    .bind("r\u{0456}ta")
    .bind(qtg_engine::access::key_hash(secret))
    .execute(&db.pool)
    .await?;
    install_demo(&api, &keys).await?;
    let m = api
        .ok(
            "POST",
            "/v3/movements",
            &rita,
            Some(json!({"template_key": "demo.sim.transfer", "idempotency_key": "own",
                        "intent": {"asset": "USDC", "amount": "25", "source": "venue-a", "destination": "0xdest"}})),
            201,
        )
        .await?;
    let id = m["id"].as_str().expect("id");
    let (s, b) = api.call("POST", &format!("/v3/movements/{id}/approve"), secret, None).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (403, Some("SELF_APPROVAL")), "{b}");
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_urls_are_never_shown() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    // A remote executor endpoint with credentials in it: refused at start, the token not echoed.
    let registry = std::env::temp_dir().join(format!("qtg-shown-{}.toml", db.name));
    std::fs::write(
        &registry,
        format!(
            "{}\n[executors.\"exec.leaky\"]\ntransport = \"http\"\n\
             endpoint = \"https://svc:s3cr3t-token@executor.example/\"\n",
            std::fs::read_to_string(registry_file())?
        ),
    )?;
    let reg = registry.to_string_lossy().to_string();
    let mut p = Proc::spawn("qtg-api", &db.url, &[("MG_EXECUTOR_REGISTRY", reg.as_str())]).await?;
    p.wait_exit(std::time::Duration::from_secs(30)).await?;
    let log = p.log();
    assert!(log.contains("credentials in the URL"), "{log}");
    assert!(!log.contains("s3cr3t-token"), "the token is never printed: {log}");

    // Settings: userinfo over plain http refused; over https shown masked by --print-config.
    let mut p =
        Proc::spawn("qtg-api", &db.url, &[("MG_CALLBACK_DEFAULT_URL", "http://hook:pa55word@receiver.example/cb")])
            .await?;
    p.wait_exit(std::time::Duration::from_secs(30)).await?;
    let log = p.log();
    assert!(log.contains("over plain http") && !log.contains("pa55word"), "{log}");
    let out = std::process::Command::new(bin_dir().join("qtg-api"))
        .arg("--print-config")
        .env("MG_DATABASE_URL", &db.url)
        .env("MG_CALLBACK_DEFAULT_URL", "https://hook:pa55word@receiver.example/cb?token=t0k3n")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel:k3y@collector.example:4317")
        .output()?;
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("https://hook:***@receiver.example/cb?token=***"), "{printed}");
    for secret in ["pa55word", "t0k3n", "k3y@"] {
        assert!(!printed.contains(secret), "{secret} in {printed}");
    }

    // A movement's callback_url: userinfo over http refused; over https taken, shown masked.
    let api = Api::start(&db.url, &[("MG_CALLBACK_ALLOW_PRIVATE", "true")]).await?;
    let keys = Keys::create(&api).await?;
    install_demo(&api, &keys).await?;
    let body = |url: &str, idem: &str| {
        json!({"template_key": "demo.sim.transfer", "idempotency_key": idem, "callback_url": url,
               "intent": {"asset": "USDC", "amount": "25", "source": "venue-a", "destination": "0xdest"}})
    };
    let (s, b) =
        api.call("POST", "/v3/movements", &keys.requester, Some(body("http://u:pw0rd@127.0.0.1:9/cb", "cb1"))).await?;
    assert_eq!(s, 400, "{b}");
    assert!(!b.to_string().contains("pw0rd"), "{b}");
    let m = api
        .ok("POST", "/v3/movements", &keys.requester, Some(body("https://u:pw0rd@127.0.0.1:9/cb", "cb2")), 201)
        .await?;
    assert_eq!(m["callback_url"], "https://u:***@127.0.0.1:9/cb", "{m}");
    let id = m["id"].as_str().expect("id");
    let shown = api.ok("GET", &format!("/v3/movements/{id}"), &keys.requester, None, 200).await?;
    assert!(!shown.to_string().contains("pw0rd"), "{shown}");
    let cbs = api.ok("GET", &format!("/v3/callbacks?movement_id={id}"), &keys.operator, None, 200).await?;
    assert!(!cbs.to_string().contains("pw0rd"), "{cbs}");
    for c in cbs["items"].as_array().into_iter().flatten() {
        assert_eq!(c["callback_url"], "https://u:***@127.0.0.1:9/cb", "{c}");
    }
    let _ = std::fs::remove_file(&registry);
    db.drop_db().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qtgctl_spells_out_what_a_terminal_would_hide() -> anyhow::Result<()> {
    let (db, api, keys) = start(&[]).await?;
    let m = api
        .ok(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(json!({"template_key": "demo.sim.transfer", "idempotency_key": "legacy",
                        "intent": {"asset": "USDC", "amount": "25", "source": "venue-a", "destination": "0xdest"}})),
            201,
        )
        .await?;
    let id = m["id"].as_str().expect("id");
    // A value stored before the rules (written directly): a destination with an override.
    sqlx::query(
        "UPDATE movement_requests SET intent = jsonb_set(intent, '{destination}', to_jsonb($2::text)) \
         WHERE id = $1::uuid",
    )
    .bind(id)
    .bind("0xabc\u{202E}fed")
    .execute(&db.pool)
    .await?;
    let run = |args: &[&str]| {
        std::process::Command::new(bin_dir().join("qtgctl"))
            .args(args)
            .env("QTG_API_URL", &api.base)
            .env("QTG_API_KEY", &keys.operator)
            .output()
    };
    let out = run(&["movements", "show", id])?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("0xabc<U+202E>fed") && !text.contains('\u{202E}'), "{text}");
    let out = run(&["--json", "movements", "show", id])?;
    let raw: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(raw["intent"]["destination"], "0xabc\u{202E}fed", "--json is the raw value");
    db.drop_db().await;
    Ok(())
}
