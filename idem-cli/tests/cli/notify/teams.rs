//! Teams: an Adaptive Card, its submits posted by an outgoing webhook signed with its
//! security token.

use super::*;

// ---------------------------------------------------------------------------------------
// Teams.

/// A Teams outgoing webhook's activity for a submitted card, signed as Teams signs it.
fn teams_submit(
    token: &[u8],
    at: u64,
    aad: &str,
    decision: &str,
    key: &str,
    fingerprint: &str,
) -> (Vec<(&'static str, String)>, Vec<u8>) {
    let body = json!({
        "type": "message",
        "id": format!("1485983408511-{at}"),
        "timestamp": rfc3339(at),
        "serviceUrl": "https://smba.trafficmanager.invalid/amer/",
        "channelId": "msteams",
        "from": {"id": "29:1TeStUsEr", "name": "Someone", "aadObjectId": aad},
        "conversation": {"id": "19:test@thread.skype"},
        "value": {"idem": decision, "record_key": key, "fingerprint": fingerprint},
    })
    .to_string()
    .into_bytes();
    let signature = base64::engine::general_purpose::STANDARD.encode(hmac_of(token, &[&body]));
    (vec![("authorization", format!("HMAC {signature}"))], body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_decides_once_what_its_card_showed_and_a_failed_post_is_sent_again() {
    let (scene, dir) = Scene::new("idem_notify_teams").await;
    let at = scene.at();
    let (call, key) = scene.pending("call-t1", "cus_t1").await;
    // The first post fails: it is sent again at a later poll, not lost.
    let (fake, fake_base) = Fake::start(1).await;
    let config = format!(
        "[teams]\nwebhook_url = \"{fake_base}/teams\"\nsecurity_token_env = \"TEST_TEAMS_TOKEN\"\n[teams.approvers]\n\"aad-lee\" = \"lee@desk\"\n"
    );
    let mut notifier = Notifier::start(&scene.store, &dir, &config, 1).await;
    let message = notifier.delivered(&fake, &key).await;
    assert_eq!(fake.attempts(), 2, "one failed post, then one delivered");
    assert!(
        notifier.log().contains("retried at the next poll"),
        "{}",
        notifier.log()
    );

    let card = &message.json()["attachments"][0];
    assert_eq!(
        card["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let text = card.to_string();
    assert!(
        text.contains("close_account") && text.contains("cus_t1"),
        "{text}"
    );
    let actions = card["content"]["actions"].as_array().expect("actions");
    assert_eq!(actions[0]["type"], "Action.OpenUrl");
    assert!(
        actions[0]["url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{INBOX}/approval?"))
    );
    let data = &actions[1]["data"];
    assert_eq!(
        (&data["idem"], &data["record_key"]),
        (&json!("approve"), &json!(key))
    );
    let shown = data["fingerprint"]
        .as_str()
        .expect("a fingerprint")
        .to_owned();
    assert_eq!(approval_at(&at, &key)["fingerprint"], json!(shown));

    let submit = |token: &[u8], at: u64, aad: &str, fp: &str| {
        teams_submit(token, at, aad, "approve", &key, fp)
    };
    // Forged, stale (correctly signed six minutes ago), other arguments, unmapped user.
    let (headers, body) = submit(b"another token", now_secs(), "aad-lee", &shown);
    assert_eq!(
        notifier.callback("teams", &headers, JSON, &body).await.0,
        401
    );
    let (headers, body) = submit(TEAMS_TOKEN, now_secs() - 360, "aad-lee", &shown);
    assert_eq!(
        notifier.callback("teams", &headers, JSON, &body).await.0,
        401
    );
    let (headers, body) = submit(TEAMS_TOKEN, now_secs(), "aad-lee", &other_fingerprint());
    let (status, said) = notifier.callback("teams", &headers, JSON, &body).await;
    assert_eq!(status, 409, "{said}");
    assert_eq!(said["type"], "message");
    let (headers, body) = submit(TEAMS_TOKEN, now_secs(), "aad-stranger", &shown);
    assert_eq!(
        notifier.callback("teams", &headers, JSON, &body).await.0,
        403
    );
    assert_eq!(
        notifier.callback("teams", &headers, JSON, &body).await.0,
        409
    );
    still_pending(&at, &key);
    assert_eq!(scene.closed("cus_t1"), 0);

    // Genuine, then replayed.
    let (headers, body) = submit(TEAMS_TOKEN, now_secs(), "aad-lee", &shown);
    let (status, said) = notifier.callback("teams", &headers, JSON, &body).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(approval_at(&at, &key)["decision"]["by"], "lee@desk");
    scene.runs_once(&call, "cus_t1").await;
    let (status, _) = notifier.callback("teams", &headers, JSON, &body).await;
    assert_eq!(status, 409);
    assert_eq!(scene.closed("cus_t1"), 1);
    assert_eq!(fake.delivered(&key).len(), 1);
}
