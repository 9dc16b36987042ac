//! Slack: a Block Kit message, its buttons' interactions signed with the signing secret.

use super::*;

// ---------------------------------------------------------------------------------------
// Slack.

/// A Slack interaction as Slack posts it: `payload=<JSON>`, form-encoded, signed `v0`.
fn slack_press(
    secret: &str,
    at: u64,
    user: &str,
    action: &str,
    value: &str,
) -> (Vec<(&'static str, String)>, Vec<u8>) {
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user, "username": "someone", "team_id": "T0TEST"},
        "actions": [{"action_id": action, "block_id": "idem_decision", "value": value, "type": "button"}],
        "response_url": "https://hooks.slack.invalid/actions/T0/1/x",
    })
    .to_string();
    let mut body = String::from("payload=");
    for b in payload.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            body.push(b as char);
        } else {
            body.push_str(&format!("%{b:02X}"));
        }
    }
    let signature = hmac_of(
        secret.as_bytes(),
        &[b"v0:", at.to_string().as_bytes(), b":", body.as_bytes()],
    );
    (
        vec![
            ("x-slack-request-timestamp", at.to_string()),
            ("x-slack-signature", format!("v0={}", hex(&signature))),
        ],
        body.into_bytes(),
    )
}

const FORM: &str = "application/x-www-form-urlencoded";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_decides_once_what_its_message_showed_and_refuses_everything_else() {
    let (scene, dir) = Scene::new("idem_notify_slack").await;
    let at = scene.at();
    let (call, key) = scene.pending("call-n1", "cus_n1").await;
    let (fake, fake_base) = Fake::start(0).await;
    let config = format!(
        "[slack]\nwebhook_url = \"{fake_base}/slack/T0/B0/x\"\nsigning_secret_env = \"TEST_SLACK_SIGNING_SECRET\"\n[slack.approvers]\nU0DANA = \"dana@desk\"\n"
    );
    let mut notifier = Notifier::start(&scene.store, &dir, &config, 1).await;

    // The message names the call, links to its inbox page, and binds its buttons.
    let message = notifier.delivered(&fake, &key).await;
    assert_eq!(message.path, "/slack/T0/B0/x");
    let sent = message.json();
    let text = sent.to_string();
    for said in [
        "close_account",
        "cus_n1",
        &run_tenant(&scene),
        &format!("{INBOX}/approval?"),
    ] {
        assert!(
            text.contains(said),
            "the message does not say {said}: {text}"
        );
    }
    let buttons = sent["blocks"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["type"] == "actions"))
        .expect("an actions block")["elements"]
        .clone();
    assert_eq!(buttons[0]["action_id"], "idem_approve");
    assert_eq!(buttons[1]["action_id"], "idem_deny");
    let value = buttons[0]["value"].as_str().expect("a value").to_owned();
    let shown = approval_at(&at, &key)["fingerprint"]
        .as_str()
        .expect("a fingerprint")
        .to_owned();
    assert_eq!(value, format!("{key} {shown}"));

    // Restarted, the notifier does not send the call again: once another pending call's
    // message is delivered, the first one's poll has passed too.
    notifier.stop();
    let mut notifier = Notifier::start(&scene.store, &dir, &config, 2).await;
    let (_, second_key) = scene.pending("call-n2", "cus_n2").await;
    notifier.delivered(&fake, &second_key).await;
    assert_eq!(fake.delivered(&key).len(), 1, "sent twice after a restart");

    let approve = |secret: &str, at: u64, user: &str, value: &str| {
        slack_press(secret, at, user, "idem_approve", value)
    };
    // Forged: signed with another secret.
    let (headers, body) = approve("not-the-signing-secret", now_secs(), "U0DANA", &value);
    let (status, _) = notifier.callback("slack", &headers, FORM, &body).await;
    assert_eq!(status, 401);
    // Altered after signing.
    let (headers, body) = approve(SLACK_SECRET, now_secs(), "U0DANA", &value);
    let altered = String::from_utf8(body).unwrap().replace("U0DANA", "U0EVIL");
    let (status, _) = notifier
        .callback("slack", &headers, FORM, altered.as_bytes())
        .await;
    assert_eq!(status, 401);
    // Stale: correctly signed, six minutes ago.
    let (headers, body) = approve(SLACK_SECRET, now_secs() - 360, "U0DANA", &value);
    let (status, _) = notifier.callback("slack", &headers, FORM, &body).await;
    assert_eq!(status, 401);
    still_pending(&at, &key);

    // Other arguments than the pending call's.
    let (headers, body) = approve(
        SLACK_SECRET,
        now_secs(),
        "U0DANA",
        &format!("{key} {}", other_fingerprint()),
    );
    let (status, said) = notifier.callback("slack", &headers, FORM, &body).await;
    assert_eq!(status, 409, "{said}");
    assert!(
        said["text"]
            .as_str()
            .unwrap_or_default()
            .contains("other arguments"),
        "{said}"
    );
    still_pending(&at, &key);

    // A Slack user no approver is mapped to.
    let (headers, body) = approve(SLACK_SECRET, now_secs(), "U0STRANGER", &value);
    let (status, said) = notifier.callback("slack", &headers, FORM, &body).await;
    assert_eq!(status, 403, "{said}");
    // Replayed, a refused request is refused as a replay: each is taken once.
    let (status, said) = notifier.callback("slack", &headers, FORM, &body).await;
    assert_eq!(status, 409, "{said}");
    assert!(
        said["text"]
            .as_str()
            .unwrap_or_default()
            .contains("received before"),
        "{said}"
    );
    still_pending(&at, &key);
    assert_eq!(scene.closed("cus_n1"), 0);
    left_for_approval(&scene.agent, &call, &scene.run_ctx).await;

    // Genuine: approved by dana@desk, and the call runs once.
    let (headers, body) = approve(SLACK_SECRET, now_secs(), "U0DANA", &value);
    let (status, said) = notifier.callback("slack", &headers, FORM, &body).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(said["response_type"], "ephemeral");
    assert!(
        said["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Approved close_account"),
        "{said}"
    );
    let decided = approval_at(&at, &key);
    assert_eq!(decided["decision"]["by"], "dana@desk", "{decided:#}");
    scene.runs_once(&call, "cus_n1").await;

    // The same request again: refused as a replay.
    let (status, said) = notifier.callback("slack", &headers, FORM, &body).await;
    assert_eq!(status, 409, "{said}");
    assert!(
        said["text"]
            .as_str()
            .unwrap_or_default()
            .contains("received before"),
        "{said}"
    );
    // A fresh one for the decided call: refused by the desk.
    let (headers, body) = slack_press(SLACK_SECRET, now_secs(), "U0DANA", "idem_deny", &value);
    let (status, said) = notifier.callback("slack", &headers, FORM, &body).await;
    assert_eq!(status, 409, "{said}");
    assert_eq!(scene.closed("cus_n1"), 1);

    // The decision log names the door.
    let log = run(&mut on(&at, &["audit", "list", "--json"]))
        .exited(0)
        .stdout;
    assert!(log.contains("\"slack\""), "{log}");
    let log = notifier.stop();
    assert!(
        !log.contains(SLACK_SECRET) && !log.contains(&fake_base),
        "{log}"
    );
}

fn run_tenant(scene: &Scene) -> String {
    scene.run_ctx.tenant.clone()
}
