//! `idem notify` against local fakes of Slack, Teams and a webhook receiver: each fake
//! captures what the notifier posts, and the test plays the platform's callback, signed as
//! the platform documents (Slack's signing secret, Teams' outgoing-webhook HMAC, the
//! webhook's `Idem-Signature`) with the test's own secrets. A forged, stale, replayed or
//! unmapped callback, or one for other arguments, decides nothing; a genuine one decides
//! once, and the agent's next call runs once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use base64::Engine as _;
use hmac::{KeyInit, Mac};

use super::*;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const SLACK_SECRET: &str = "test-slack-signing-secret-0001";
const TEAMS_TOKEN: &[u8] = b"test teams outgoing webhook token";
const HOOK_SECRET: &str = "test-webhook-secret-0123456789";
const INBOX: &str = "http://inbox.test:8700";

fn hmac_of(secret: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("a key");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// An RFC 3339 time `secs` after the epoch, as a Teams activity writes it.
fn rfc3339(secs: u64) -> String {
    idem::record::Timestamp(secs * 1000).to_rfc3339()
}

// ---------------------------------------------------------------------------------------
// The fake platforms.

/// One post the fake received.
#[derive(Debug, Clone)]
struct Posted {
    path: String,
    signature: Option<String>,
    body: Vec<u8>,
    /// The status the fake answered.
    answered: u16,
}

impl Posted {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the notifier posts JSON")
    }
}

/// A local HTTP listener standing for Slack's and Teams' webhooks and a webhook receiver:
/// it keeps every post, and answers the first `failures` with 500.
#[derive(Clone, Default)]
struct Fake {
    got: Arc<Mutex<Vec<Posted>>>,
    failures: Arc<AtomicUsize>,
}

impl Fake {
    async fn start(failures: usize) -> (Fake, String) {
        let fake = Fake::default();
        fake.failures.store(failures, Ordering::SeqCst);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake");
        let base = format!("http://{}", listener.local_addr().expect("its address"));
        let kept = fake.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let kept = kept.clone();
            async move {
                let failing = kept
                    .failures
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                let status = if failing {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                };
                kept.got.lock().expect("posts").push(Posted {
                    path: uri.path().to_owned(),
                    signature: headers
                        .get("idem-signature")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                    body: body.to_vec(),
                    answered: status.as_u16(),
                });
                (status, "ok")
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        (fake, base)
    }

    /// The posts it answered 200 that mention `text`.
    fn delivered(&self, text: &str) -> Vec<Posted> {
        self.got
            .lock()
            .expect("posts")
            .iter()
            .filter(|p| p.answered == 200 && String::from_utf8_lossy(&p.body).contains(text))
            .cloned()
            .collect()
    }

    fn attempts(&self) -> usize {
        self.got.lock().expect("posts").len()
    }
}

// ---------------------------------------------------------------------------------------
// The notifier, as a subprocess.

/// `idem notify`, killed when dropped.
struct Notifier {
    child: std::process::Child,
    stderr: PathBuf,
    base: String,
}

impl Notifier {
    async fn start(store: &str, dir: &TempDir, config: &str, run: usize) -> Notifier {
        let platform = ["slack", "teams", "webhook"]
            .into_iter()
            .find(|p| config.contains(&format!("[{p}]")))
            .expect("a channel");
        let config_path = dir.path().join("notify.toml");
        std::fs::write(&config_path, config).expect("write the configuration");
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().expect("its address").port()
        };
        let stderr = dir.path().join(format!("notify-{run}.log"));
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idem"));
        for var in IDEM_ENV {
            cmd.env_remove(var);
        }
        let child = cmd
            .args(["notify", "--store", store, "--config"])
            .arg(&config_path)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--interval", "50ms", "--inbox-url", INBOX])
            .env("IDEM_APPROVAL_KEY", desk_key_text())
            .env("TEST_SLACK_SIGNING_SECRET", SLACK_SECRET)
            .env(
                "TEST_TEAMS_TOKEN",
                base64::engine::general_purpose::STANDARD.encode(TEAMS_TOKEN),
            )
            .env("TEST_HOOK_SECRET", HOOK_SECRET)
            .env("IDEM_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("a log file"))
            .spawn()
            .expect("start idem notify");
        let mut notifier = Notifier {
            child,
            stderr,
            base: format!("http://127.0.0.1:{port}"),
        };
        // Serving once an unsigned callback of its channel is refused (a safety net, not a measurement).
        let client = reqwest::Client::new();
        for _ in 0..3000 {
            notifier.alive();
            if let Ok(r) = client
                .post(format!("{}/callback/{platform}", notifier.base))
                .send()
                .await
            {
                assert_eq!(r.status(), 401, "an unsigned callback is refused");
                return notifier;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("idem notify never served:\n{}", notifier.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn alive(&mut self) {
        if let Some(status) = self.child.try_wait().expect("its status") {
            panic!("idem notify exited ({status}):\n{}", self.log());
        }
    }

    /// Wait until `fake` has had a message mentioning `text`; the first one.
    async fn delivered(&mut self, fake: &Fake, text: &str) -> Posted {
        for _ in 0..3000 {
            self.alive();
            if let Some(first) = fake.delivered(text).into_iter().next() {
                return first;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("nothing about {text:?} was delivered:\n{}", self.log());
    }

    /// POST `body` with `headers` to `/callback/<platform>`: the status and the JSON answer.
    async fn callback(
        &self,
        platform: &str,
        headers: &[(&str, String)],
        content_type: &str,
        body: &[u8],
    ) -> (u16, Value) {
        let mut request = reqwest::Client::new()
            .post(format!("{}/callback/{platform}", self.base))
            .header("content-type", content_type)
            .body(body.to_vec());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.expect("the notifier answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("its body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A store with an agent, and a pending irreversible call.
struct Scene {
    store: String,
    agent: Dispatcher,
    run_ctx: RunContext,
}

impl Scene {
    async fn new(tag: &str) -> (Scene, TempDir) {
        let dir = TempDir::new(tag);
        let path = dir.path().join("records.db");
        let agent = agent(Arc::new(
            idem::SqliteStore::open(&path).expect("open SQLite"),
        ));
        let scene = Scene {
            store: format!("sqlite:{}", path.display()),
            agent,
            run_ctx: RunContext::new(unique(tag)),
        };
        (scene, dir)
    }

    fn at(&self) -> [&str; 2] {
        ["--store", self.store.as_str()]
    }

    /// `customer`'s account closing, left pending: its call and record key.
    async fn pending(&self, call_id: &str, customer: &str) -> (ToolCall, String) {
        let call = close(call_id, customer);
        left_for_approval(&self.agent, &call, &self.run_ctx).await;
        let key = key_of(&self.agent, &call, &self.run_ctx);
        (call, key)
    }

    fn closed(&self, customer: &str) -> usize {
        CLOSED.count(&format!("{}/{customer}", self.run_ctx.tenant))
    }

    /// The approved call runs once now, and replays after.
    async fn runs_once(&self, call: &ToolCall, customer: &str) {
        let ran = self
            .agent
            .dispatch(call, &self.run_ctx)
            .await
            .expect("the approved call runs");
        assert!(!ran.deduplicated, "{ran:?}");
        let again = self
            .agent
            .dispatch(call, &self.run_ctx)
            .await
            .expect("and replays");
        assert!(again.deduplicated, "{again:?}");
        assert_eq!(self.closed(customer), 1);
    }
}

/// The fingerprint of the arguments of another call (what a message for them would carry).
fn other_fingerprint() -> String {
    idem::key::Fingerprint::of(&json!({"customer": "cus_someone_else"})).to_hex()
}

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

const JSON: &str = "application/json";

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

#[test]
fn a_bad_configuration_is_named_before_anything_is_sent() {
    let dir = TempDir::new("idem_notify_config");
    let path = dir.path().join("notify.toml");
    let cases = [
        ("", "no channel"),
        (
            "[slack]\nwebhook_url = \"https://hooks.slack.invalid/x\"\nsigning_secret_env = \"TEST_UNSET_SECRET\"\n",
            "TEST_UNSET_SECRET",
        ),
        ("[slack]\nwebhook = \"x\"\n", "unknown field `webhook`"),
        (
            "[webhook]\nurl = \"ftp://x\"\nsecret_env = \"TEST_HOOK_SECRET\"\n",
            "http:// or https://",
        ),
    ];
    for (text, says) in cases {
        std::fs::write(&path, text).expect("write the configuration");
        let path = path.to_str().expect("a UTF-8 path");
        run(
            idem(&["notify", "--store", "sqlite:unused.db", "--config", path])
                .env("IDEM_APPROVAL_KEY", desk_key_text())
                .env("TEST_HOOK_SECRET", HOOK_SECRET)
                .env_remove("TEST_UNSET_SECRET"),
        )
        .exited(2)
        .says(&[says])
        .hides(&[HOOK_SECRET]);
    }
    run(&mut idem(&["notify", "--help"])).exited(0).prints(&[
        "/callback/slack",
        "--inbox-url",
        "Example",
    ]);
}
