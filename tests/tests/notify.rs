//! notification_dispatcher, black-box: channels and routes made through the API by an admin;
//! a movement waiting for approval tells its approver by e-mail (a real SMTP server, aiosmtpd,
//! with STARTTLS and AUTH required) and by a signed webhook (verified by the reference Standard
//! Webhooks library) and a Slack-style chat — once per event and channel across two
//! `qtg-callback` replicas — while a channel that always fails is retried on its own without
//! holding the others; the movement's creator, who may not approve it, is not told; every
//! delivery is audited and no channel secret is shown again.

use std::time::Duration;

use anyhow::Context;
use qtg_tests::*;
use serde_json::{json, Value};

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const RELAY_USER: &str = "qtg-relay";
const RELAY_PASSWORD: &str = "relay-password-7731";
const SLACK_TOKEN: &str = "T0001/B0002/slacktokenXYZ9876";

/// Two dispatchers' env: notifications on, fast loops, loopback receivers allowed.
const ENV: [(&str, &str); 4] = [
    ("MG_NOTIFY_ENABLED", "true"),
    ("MG_NOTIFY_DISPATCH_INTERVAL_SECONDS", "0.2"),
    ("MG_CALLBACK_ALLOW_PRIVATE", "true"),
    ("MG_NOTIFY_LINK_BASE_URL", "https://qtg.example"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvers_are_told_once_by_mail_and_webhook_and_a_failing_channel_holds_none() -> anyhow::Result<()> {
    let ca = std::env::temp_dir().join(format!("qtg-smtp-ca-{}.pem", uuid::Uuid::new_v4()));
    let smtp = PyHelper::spawn(
        "smtp_server.py",
        &[format!("--user={RELAY_USER}"), format!("--password={RELAY_PASSWORD}"), format!("--ca-out={}", ca.display())],
    )
    .await?;
    let ca_pem = std::fs::read_to_string(&ca)?;
    let hooks = PyHelper::spawn("webhook_receiver.py", &[format!("--secret=hook={WHSEC}")]).await?;
    let base = format!("http://127.0.0.1:{}", hooks.port);

    let db = TestDb::new().await?;
    let api = Api::start(&db.url, &[("MG_CALLBACK_ALLOW_PRIVATE", "true")]).await?;
    let keys = Keys::create(&api).await?;
    install_template(
        &api,
        &keys,
        json!({"template_key": "t.notify", "nodes": [
        {"node_key": "a", "node_kind": "action", "action_type": "transfer", "executor_key": "exec.sim.transfer"}]}),
    )
    .await?;
    let admin = api.admin_key.clone();
    let smtp_body = |to: &str| {
        json!({"host": "127.0.0.1", "port": smtp.port, "tls": "starttls", "from": "qtg <qtg@example.com>",
               "to": [to], "username": RELAY_USER, "password": RELAY_PASSWORD, "ca_pem": ca_pem})
    };
    let channel = |body: Value| {
        let (api, admin) = (&api, admin.clone());
        async move { api.ok("POST", "/v3/notification-channels", &admin, Some(body), 201).await }
    };
    let mail = channel(json!({"name": "alice-mail", "kind": "email", "smtp": smtp_body("alice@example.com")})).await?;
    let creator_mail =
        channel(json!({"name": "creator-mail", "kind": "email", "smtp": smtp_body("creator@example.com")})).await?;
    let hook = channel(json!({"name": "ops-hook", "kind": "webhook", "url": format!("{base}/hook"),
                              "signature": "standard_webhooks", "secret": WHSEC}))
    .await?;
    let chat =
        channel(json!({"name": "ops-chat", "kind": "slack", "url": format!("{base}/slack/{SLACK_TOKEN}")})).await?;
    let broken = channel(json!({"name": "broken-hook", "kind": "webhook", "url": format!("{base}/fail")})).await?;
    let approvers =
        channel(json!({"name": "approvers-chat", "kind": "teams", "url": format!("{base}/teams/approvers")})).await?;
    let generated = broken["secret"].as_str().context("a generated secret is shown once")?.to_string();
    assert!(mail.get("secret").is_none() && hook.get("secret").is_none(), "a given secret is never shown");

    // Bad input is refused and changes nothing.
    for bad in [
        json!({"name": "x", "kind": "pager"}),
        json!({"name": "x", "kind": "slack"}),
        json!({"name": "x", "kind": "webhook", "url": format!("{base}/h"), "signature": "standard_webhooks",
               "secret": "not-whsec-0123456789"}),
        json!({"name": "x", "kind": "email", "smtp": {"host": "h", "tls": "none", "from": "a@b", "to": ["c@d"],
                                                      "username": "u", "password": "p"}}),
        json!({"name": "x", "kind": "email", "smtp": {"host": "h", "from": "a@b", "to": []}}),
        json!({"name": "alice-mail", "kind": "slack", "url": format!("{base}/dup")}),
    ] {
        let (s, b) = api.call("POST", "/v3/notification-channels", &admin, Some(bad.clone())).await?;
        assert!(matches!(s, 400 | 409), "{bad}: {s} {b}");
    }
    let (s, _) = api.call("POST", "/v3/notification-channels", &keys.operator, Some(json!({}))).await?;
    assert_eq!(s, 403, "channels are an admin's");

    let route = |body: Value| {
        let (api, admin) = (&api, admin.clone());
        async move { api.ok("POST", "/v3/notification-routes", &admin, Some(body), 201).await }
    };
    let id = |v: &Value| v["id"].as_str().unwrap().to_string();
    route(json!({"channel_id": id(&mail), "event_kinds": ["approval_needed"], "approver": "alice"})).await?;
    // The creator may not approve their own movement: this route never tells them.
    route(json!({"channel_id": id(&creator_mail), "event_kinds": ["approval_needed"], "approver": "treasury-bot"}))
        .await?;
    route(json!({"channel_id": id(&hook), "event_kinds": ["approval_needed"], "templates": ["t.notify"]})).await?;
    route(json!({"channel_id": id(&chat)})).await?;
    route(json!({"channel_id": id(&broken), "event_kinds": ["approval_needed"]})).await?;
    // A channel every approver reads: told when a holder of the role may approve.
    route(json!({"channel_id": id(&approvers), "event_kinds": ["approval_needed"], "approver_role": "approver"}))
        .await?;
    for bad in [
        json!({"channel_id": id(&mail), "event_kinds": ["coffee_ready"]}),
        json!({"channel_id": id(&mail), "quiet_hours": {"start": "25:00", "end": "07:00"}}),
        json!({"channel_id": id(&mail), "min_severity": "loud"}),
        json!({"channel_id": uuid::Uuid::new_v4()}),
        json!({"channel_id": id(&mail), "approver": "alice", "approver_role": "approver"}),
        json!({"channel_id": id(&mail), "approver_role": "viewer"}),
    ] {
        let (s, b) = api.call("POST", "/v3/notification-routes", &admin, Some(bad.clone())).await?;
        assert!(matches!(s, 400 | 404), "{bad}: {s} {b}");
    }

    // No secret is shown again.
    let listed = api.ok("GET", "/v3/notification-channels", &keys.operator, None, 200).await?.to_string();
    for secret in [RELAY_PASSWORD, WHSEC, SLACK_TOKEN, "slacktoken", generated.as_str()] {
        assert!(!listed.contains(secret), "a channel secret was shown: {listed}");
    }
    let audit: Vec<Value> = sqlx::query_scalar("SELECT data FROM audit_outbox WHERE action LIKE 'notification.%'")
        .fetch_all(&db.pool)
        .await?;
    let audit_text = serde_json::to_string(&audit)?;
    for secret in [RELAY_PASSWORD, WHSEC, SLACK_TOKEN, generated.as_str()] {
        assert!(!audit_text.contains(secret), "a channel secret reached the audit trail");
    }

    let replicas =
        (Proc::spawn("qtg-callback", &db.url, &ENV).await?, Proc::spawn("qtg-callback", &db.url, &ENV).await?);
    let m = api
        .ok(
            "POST",
            "/v3/movements",
            &keys.requester,
            Some(json!({"template_key": "t.notify", "intent": {"asset": "USDC", "amount": "125.5"},
                        "idempotency_key": "notify-1"})),
            201,
        )
        .await?;
    let movement = id(&m);
    let find = || async {
        let found: Option<String> = sqlx::query_scalar(
            "SELECT id::text FROM notifications WHERE kind = 'approval_needed' AND movement_id = $1::uuid",
        )
        .bind(&movement)
        .fetch_optional(&db.pool)
        .await?;
        anyhow::Ok(found)
    };
    wait_until("the approval_needed notification", Duration::from_secs(30), || async { Ok(find().await?.is_some()) })
        .await?;
    let notification = find().await?.context("the notification")?;
    let status = |channel: String| {
        let (pool, n) = (db.pool.clone(), notification.clone());
        async move {
            let row: Option<(String, i32)> = sqlx::query_as(
                "SELECT status, attempts FROM notification_deliveries
                  WHERE notification_id = $1::uuid AND channel_id = $2::uuid",
            )
            .bind(&n)
            .bind(&channel)
            .fetch_optional(&pool)
            .await?;
            anyhow::Ok(row)
        }
    };
    wait_until(
        "mail, webhook and chat delivered while the broken channel keeps failing",
        Duration::from_secs(60),
        || async {
            let sent = |r: Option<(String, i32)>| r.is_some_and(|r| r.0 == "sent");
            Ok(sent(status(id(&mail)).await?)
                && sent(status(id(&hook)).await?)
                && sent(status(id(&chat)).await?)
                && sent(status(id(&approvers)).await?)
                && status(id(&broken)).await?.is_some_and(|r| r.1 >= 1))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}\n{}", replicas.0.log(), replicas.1.log()))?;
    let broken_now = status(id(&broken)).await?.unwrap();
    assert_eq!(broken_now.0, "pending", "the failing channel is retried on its own schedule");
    assert_eq!(status(id(&creator_mail)).await?, None, "the creator cannot approve: not told");

    // More ticks of both replicas: still once per event and channel.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mails = smtp.lines();
    assert_eq!(mails.len(), 1, "one mail: {mails:#?}");
    let mail_line = &mails[0];
    assert_eq!(mail_line["rcpt_tos"], json!(["alice@example.com"]));
    assert_eq!((mail_line["tls"].as_bool(), mail_line["auth_user"].as_str()), (Some(true), Some(RELAY_USER)));
    // The body as read: quoted-printable soft line breaks joined.
    let data = mail_line["data"].as_str().unwrap().replace("=\r\n", "").replace("=\n", "").replace("=3D", "=");
    let data = data.as_str();
    assert!(data.contains("Approval needed") && data.contains(&movement), "{data}");
    assert!(data.contains(&format!("https://qtg.example/console#/movements/{movement}")), "{data}");
    let posts = hooks.lines();
    let on = |path: &str| {
        posts.iter().filter(|l| l["path"].as_str().is_some_and(|p| p.starts_with(path))).collect::<Vec<_>>()
    };
    let hook_posts = on("/hook");
    assert_eq!(hook_posts.len(), 1, "{hook_posts:#?}");
    assert_eq!(hook_posts[0]["verified_by"], json!(["hook"]), "verified by the reference library");
    assert_eq!(hook_posts[0]["headers"]["webhook-id"], notification.as_str());
    let body: Value = serde_json::from_str(hook_posts[0]["body"].as_str().unwrap())?;
    assert_eq!(
        (body["kind"].as_str(), body["movement_id"].as_str()),
        (Some("approval_needed"), Some(movement.as_str()))
    );
    let chats = on("/slack/");
    assert_eq!(chats.len(), 1, "{chats:#?}");
    let text: Value = serde_json::from_str(chats[0]["body"].as_str().unwrap())?;
    assert!(text["text"].as_str().unwrap().contains("Approval needed: t.notify 125.5 USDC"), "{text}");
    assert!(on("/fail").len() >= 2 || broken_now.1 >= 1, "the broken channel was tried");
    assert_eq!(on("/teams/approvers").len(), 1, "the approvers' channel, once");

    // Every delivery audited; the API shows them.
    let audited: Vec<(String, Value)> =
        sqlx::query_as("SELECT action, data FROM audit_outbox WHERE entity_type = 'notification' AND entity_id = $1")
            .bind(&notification)
            .fetch_all(&db.pool)
            .await?;
    let delivered: Vec<&str> =
        audited.iter().filter(|a| a.0 == "notification.delivered").map(|a| a.1["channel"].as_str().unwrap()).collect();
    let mut delivered = delivered;
    delivered.sort();
    assert_eq!(delivered, ["alice-mail", "approvers-chat", "ops-chat", "ops-hook"], "{audited:#?}");
    assert!(audited.iter().any(|a| a.0 == "notification.failed" && a.1["channel"] == "broken-hook"));
    // A dead-lettered delivery goes again on an operator's word (audited); 409 when none is.
    sqlx::query("UPDATE notification_deliveries SET status = 'dlq' WHERE channel_id = $1::uuid")
        .bind(id(&broken))
        .execute(&db.pool)
        .await?;
    let path = format!("/v3/notifications/{notification}/actions/redeliver");
    let again = api.ok("POST", &path, &keys.operator, Some(json!({"reason": "receiver fixed"})), 200).await?;
    assert_eq!(again["channels"], json!([id(&broken)]));
    assert_eq!(status(id(&broken)).await?.map(|r| r.0), Some("pending".to_string()));
    let (s, b) = api.call("POST", &path, &keys.operator, Some(json!({"reason": "again"}))).await?;
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("CONFLICT")), "{b}");
    let listed = api.ok("GET", "/v3/notifications?kind=approval_needed", &keys.operator, None, 200).await?;
    let item = &listed["items"][0];
    assert_eq!(item["id"], notification.as_str());
    assert_eq!(item["deliveries"].as_array().unwrap().len(), 5, "{item:#}");
    drop(replicas);
    db.drop_db().await;
    Ok(())
}
