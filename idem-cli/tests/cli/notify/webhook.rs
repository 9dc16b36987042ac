//! The generic webhook: signed both ways with `Idem-Signature`.

use super::*;

// ---------------------------------------------------------------------------------------
// The generic webhook.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_is_signed_and_its_signed_answer_denies_once() {
    let (scene, dir) = Scene::new("idem_notify_webhook").await;
    let at = scene.at();
    let (call, key) = scene.pending("call-w1", "cus_w1").await;
    let (fake, fake_base) = Fake::start(0).await;
    let config = format!(
        "public_url = \"https://notify.example\"\n[webhook]\nurl = \"{fake_base}/hook\"\nsecret_env = \"TEST_HOOK_SECRET\"\n[webhook.approvers]\nops-bot = \"sam@desk\"\n"
    );
    let mut notifier = Notifier::start(&scene.store, &dir, &config, 1).await;
    let message = notifier.delivered(&fake, &key).await;

    // Signed as documented: t=<secs>,v1=<hex HMAC(secret, "<t>.<body>")>.
    let header = message.signature.clone().expect("an Idem-Signature header");
    let (t, v1) = header
        .split_once(",v1=")
        .and_then(|(t, v)| Some((t.strip_prefix("t=")?, v)))
        .expect("t=...,v1=...");
    assert_eq!(
        v1,
        hex(&hmac_of(
            HOOK_SECRET.as_bytes(),
            &[t.as_bytes(), b".", &message.body]
        ))
    );
    let sent = message.json();
    assert_eq!(sent["event"], "approval.requested");
    assert_eq!(
        (&sent["tool"], &sent["record_key"]),
        (&json!("close_account"), &json!(key))
    );
    assert_eq!(sent["arguments"], json!({"customer": "cus_w1"}));
    assert_eq!(
        sent["callback_url"],
        "https://notify.example/callback/webhook"
    );
    assert!(
        sent["inbox_url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{INBOX}/approval?"))
    );
    let shown = sent["fingerprint"].as_str().unwrap().to_owned();

    let answer = |secret: &str, at: u64, user: &str, fp: &str| {
        let body = json!({"record_key": key, "fingerprint": fp, "decision": "deny", "user": user, "reason": "not this customer"})
            .to_string()
            .into_bytes();
        let signature = hex(&hmac_of(
            secret.as_bytes(),
            &[at.to_string().as_bytes(), b".", &body],
        ));
        (
            vec![("idem-signature", format!("t={at},v1={signature}"))],
            body,
        )
    };
    let (headers, body) = answer("another-secret-0123456789", now_secs(), "ops-bot", &shown);
    assert_eq!(
        notifier.callback("webhook", &headers, JSON, &body).await.0,
        401
    );
    let (headers, body) = answer(HOOK_SECRET, now_secs() - 360, "ops-bot", &shown);
    assert_eq!(
        notifier.callback("webhook", &headers, JSON, &body).await.0,
        401
    );
    let (headers, body) = answer(HOOK_SECRET, now_secs(), "ops-bot", &other_fingerprint());
    assert_eq!(
        notifier.callback("webhook", &headers, JSON, &body).await.0,
        409
    );
    let (headers, body) = answer(HOOK_SECRET, now_secs(), "someone", &shown);
    assert_eq!(
        notifier.callback("webhook", &headers, JSON, &body).await.0,
        403
    );
    still_pending(&at, &key);

    let (headers, body) = answer(HOOK_SECRET, now_secs(), "ops-bot", &shown);
    let (status, said) = notifier.callback("webhook", &headers, JSON, &body).await;
    assert_eq!((status, &said["ok"]), (200, &json!(true)), "{said}");
    match scene.agent.dispatch(&call, &scene.run_ctx).await {
        Err(DispatchError::ApprovalDenied { reason, .. }) => {
            assert_eq!(reason, "not this customer")
        }
        other => panic!("expected ApprovalDenied, got {other:?}"),
    }
    assert_eq!(
        notifier.callback("webhook", &headers, JSON, &body).await.0,
        409
    );
    assert_eq!(scene.closed("cus_w1"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_notifiers_on_one_store_send_each_call_once() {
    let (scene, dir) = Scene::new("idem_notify_two").await;
    let (fake, fake_base) = Fake::start(0).await;
    let config = format!(
        "[webhook]\nurl = \"{fake_base}/hook\"\nsecret_env = \"TEST_HOOK_SECRET\"\n[webhook.approvers]\nops-bot = \"sam@desk\"\n"
    );
    let mut first = Notifier::start(&scene.store, &dir, &config, 1).await;
    let mut second = Notifier::start(&scene.store, &dir, &config, 2).await;
    let mut keys = Vec::new();
    for n in 0..4 {
        let (_, key) = scene
            .pending(&format!("call-two-{n}"), &format!("cus_two_{n}"))
            .await;
        keys.push(key);
    }
    for key in &keys {
        first.delivered(&fake, key).await;
    }
    // Both keep polling while another call is left and sent: neither sends the others again.
    let (_, last) = scene.pending("call-two-last", "cus_two_last").await;
    second.delivered(&fake, &last).await;
    for key in keys.iter().chain([&last]) {
        assert_eq!(
            fake.delivered(key).len(),
            1,
            "{key} was sent more than once"
        );
    }
}
