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

mod slack;
mod teams;
mod webhook;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const SLACK_SECRET: &str = "test-slack-signing-secret-0001";
const TEAMS_TOKEN: &[u8] = b"test teams outgoing webhook token";
const HOOK_SECRET: &str = "test-webhook-secret-0123456789";
const INBOX: &str = "http://inbox.test:8700";
const JSON: &str = "application/json";

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
