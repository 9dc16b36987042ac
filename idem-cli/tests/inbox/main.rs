//! The approval inbox (`idem ui`) with one token per person: each decision is recorded with
//! the identity of the token that signed in, not the one the inbox was started with. The
//! test is the agent (a dispatcher over a SQLite file) and an HTTP client of the inbox it
//! starts as a subprocess; `scripts/check_ui.py` drives the same inbox in a browser.
//! `cases.rs`: a call sent to a person (`escalate`), decided in the same inbox, on SQLite,
//! PostgreSQL and Redis.

#[path = "../support/mod.rs"]
mod support;

mod cases;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use idem::prelude::*;
use idem::store::approvals::ApprovalFilter;
use idem::{SqliteStore, Store};
use serde_json::{Value, json};
use support::dispatcher::{approval_key, dispatcher};
use support::tally::Tally;

static REFUNDS: Tally = Tally::new();

/// Refund a payment.
#[tool(class = "irreversible")]
fn refund(payment: String) -> Result<Value, ToolError> {
    REFUNDS.note(&payment, "");
    Ok(json!({"refunded": payment}))
}

const DANA: &str = "dana-token-0123456789abcdef";
const LEE: &str = "lee-token-0123456789abcdef01";

/// `id:hex` of the tests' approval key, as `IDEM_APPROVAL_KEY` holds it.
fn key_text() -> String {
    let hex: String = b"idem-tests-approval-key-32-bytes"
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}:{hex}", approval_key().id())
}

pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `idem ui` over `db`, with `env` set and nothing else of ours inherited.
fn inbox(db: &std::path::Path, port: u16, env: &[(&str, &str)]) -> Command {
    inbox_over(&format!("sqlite:{}", db.display()), None, port, env)
}

/// `idem ui` over the store `spec` (`sqlite:PATH`, a Redis or PostgreSQL URL), under the Redis
/// key prefix or PostgreSQL schema `prefix` if given, with `env` set and nothing else of ours
/// inherited.
pub(crate) fn inbox_over(
    spec: &str,
    prefix: Option<&str>,
    port: u16,
    env: &[(&str, &str)],
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idem"));
    for var in [
        "IDEM_STORE",
        "IDEM_STORE_PREFIX",
        "IDEM_APPROVER",
        "IDEM_APPROVAL_KEY",
        "IDEM_UI_TOKEN",
        "IDEM_UI_TOKENS",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(["ui", "--store", spec]);
    if let Some(prefix) = prefix {
        cmd.args(["--prefix", prefix]);
    }
    cmd.args(["--listen", &format!("127.0.0.1:{port}")])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Wait until the inbox answers (a safety net of 30 s, not a measurement).
pub(crate) async fn answering(base: &str) {
    for _ in 0..300 {
        if client().get(format!("{base}/login")).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the inbox never answered at {base}");
}

/// Sign in with `token`: the session cookie, and the page's anti-forgery token.
pub(crate) async fn sign_in(base: &str, token: &str) -> (String, String) {
    let signed = client()
        .post(format!("{base}/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 303, "signing in with a person's token");
    let cookie = signed.headers()[reqwest::header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = client()
        .get(format!("{base}/"))
        .header(reqwest::header::COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split("name=csrf value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page's anti-forgery token")
        .to_owned();
    (cookie, csrf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_person_decides_under_their_own_name() {
    let dir = tempdir();
    let db = dir.join("inbox.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let agent = dispatcher(Registry::linked().unwrap(), store.clone());
    let run = RunContext::new("acme");
    let calls: Vec<ToolCall> = ["pay_1", "pay_2"]
        .iter()
        .map(|p| ToolCall::new("refund", json!({"payment": p})).with_call_id(*p))
        .collect();
    for call in &calls {
        let err = agent.dispatch(call, &run).await.unwrap_err();
        assert!(
            matches!(err, DispatchError::ApprovalRequired { .. }),
            "{err:?}"
        );
    }
    let pending = agent
        .approvals()
        .pending(&ApprovalFilter::default())
        .await
        .unwrap();
    assert_eq!(pending.len(), 2);
    let of = |payment: &str| {
        pending
            .iter()
            .find(|e| e.arguments["payment"] == payment)
            .unwrap()
            .clone()
    };
    let (first, second) = (of("pay_1"), of("pay_2"));

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let tokens = format!("dana@desk={DANA},lee@desk={LEE}");
    let key = key_text();
    let _server = Running(
        inbox(
            &db,
            port,
            &[("IDEM_UI_TOKENS", &tokens), ("IDEM_APPROVAL_KEY", &key)],
        )
        .spawn()
        .unwrap(),
    );
    answering(&base).await;

    // A sign-in posted from another site's page is refused: it would sign a visitor in
    // under the token's owner.
    let forged = client()
        .post(format!("{base}/login"))
        .header(reqwest::header::ORIGIN, "https://evil.example")
        .form(&[("token", LEE)])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert!(forged.headers().get(reqwest::header::SET_COOKIE).is_none());

    // Lee approves the first, Dana denies the second: each under their own name.
    let (lee, lee_csrf) = sign_in(&base, LEE).await;
    let page = client()
        .get(format!("{base}/"))
        .header(reqwest::header::COOKIE, &lee)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("you are <b>lee@desk</b>"), "{page}");
    let approved = client()
        .post(format!("{base}/approve"))
        .header(reqwest::header::COOKIE, &lee)
        .form(&[
            ("csrf", lee_csrf.as_str()),
            ("key", first.key.as_str()),
            ("shown", &first.fingerprint.to_hex()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 303);
    let (dana, dana_csrf) = sign_in(&base, DANA).await;
    assert_ne!(dana, lee, "each sign-in has a session of its own");
    // Lee's anti-forgery token is not Dana's.
    let crossed = client()
        .post(format!("{base}/deny"))
        .header(reqwest::header::COOKIE, &dana)
        .form(&[
            ("csrf", lee_csrf.as_str()),
            ("key", second.key.as_str()),
            ("shown", &second.fingerprint.to_hex()),
            ("reason", "not ours"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(crossed.status(), 403);
    let denied = client()
        .post(format!("{base}/deny"))
        .header(reqwest::header::COOKIE, &dana)
        .form(&[
            ("csrf", dana_csrf.as_str()),
            ("key", second.key.as_str()),
            ("shown", &second.fingerprint.to_hex()),
            ("reason", "a duplicate of pay_1"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 303);

    let decided = agent
        .approvals()
        .pending(&ApprovalFilter {
            pending_only: false,
            ..ApprovalFilter::default()
        })
        .await
        .unwrap();
    let by = |key: &idem::key::RecordKey| {
        let entry = decided.iter().find(|e| e.key == *key).unwrap();
        entry.decision.as_ref().unwrap().by.clone()
    };
    assert_eq!(by(&first.key), "lee@desk");
    assert_eq!(by(&second.key), "dana@desk");

    // The agent's retries: the approved one runs once, signed by Lee; the denied one is
    // refused with Dana's reason.
    let ran = agent.dispatch(&calls[0], &run).await.unwrap();
    assert!(!ran.deduplicated);
    assert_eq!(REFUNDS.count("pay_1"), 1);
    let err = agent.dispatch(&calls[1], &run).await.unwrap_err();
    let DispatchError::ApprovalDenied { by, reason, .. } = err else {
        panic!("expected ApprovalDenied, got {err:?}");
    };
    assert_eq!(
        (by.as_str(), reason.as_str()),
        ("dana@desk", "a duplicate of pay_1")
    );
    assert_eq!(REFUNDS.count("pay_2"), 0);
}

#[test]
fn tokens_that_cannot_tell_people_apart_are_refused_at_start() {
    let dir = tempdir();
    let db = dir.join("empty.db");
    drop(SqliteStore::open(&db).unwrap());
    let shared = format!("dana@desk={DANA},lee@desk={DANA}");
    for (env, expected) in [
        (
            vec![("IDEM_UI_TOKENS", shared.as_str())],
            "two people share a token",
        ),
        (
            vec![("IDEM_UI_TOKENS", "dana@desk=short")],
            "shorter than 16 characters",
        ),
        (
            vec![("IDEM_UI_TOKENS", "no-equals-sign-0123456789")],
            "is not `who=token`",
        ),
        (
            vec![
                ("IDEM_UI_TOKEN", DANA),
                ("IDEM_UI_TOKENS", "lee@desk=0123456789abcdef"),
            ],
            "not both",
        ),
        (vec![("IDEM_UI_TOKEN", DANA)], "who decides?"),
        (vec![], "set IDEM_UI_TOKEN"),
    ] {
        let out = inbox(&db, free_port(), &env).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(expected), "{env:?}: {stderr}");
        assert!(
            !stderr.contains(DANA),
            "a token reached a message: {stderr}"
        );
    }
}

/// A fresh folder under the system's temporary one, removed when dropped.
pub(crate) struct TempDir(std::path::PathBuf);

impl TempDir {
    pub(crate) fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn tempdir() -> TempDir {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "idem-inbox-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

/// Approval one click away (issue #27): an MCP client that can open URLs gets the inbox page
/// of the exact call; a person approves there; the client's retry runs the call once. A
/// denial reaches the retry with its reason; forged, altered, expired and foreign-tenant
/// links show nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_is_sent_to_the_inbox_page_of_its_call() {
    use idem::mcp::McpServer;
    use idem::mcp::approval::APPROVAL_INPUT;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, ElicitRequestParams, ElicitationCapability,
        InitializeResult, InputRequest, InputResponses, ProtocolVersion, UrlElicitationCapability,
    };
    use rmcp::service::serve_directly;
    use rmcp::{ClientHandler, RoleClient, RoleServer};

    let dir = tempdir();
    let db = dir.join("mcp-inbox.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let tokens = format!("lee@desk={LEE}");
    let key = key_text();
    let _server = Running(
        inbox(
            &db,
            port,
            &[("IDEM_UI_TOKENS", &tokens), ("IDEM_APPROVAL_KEY", &key)],
        )
        .spawn()
        .unwrap(),
    );
    answering(&base).await;

    let server = McpServer::new(dispatcher(Registry::linked().unwrap(), store), "acme")
        .unwrap()
        .approve_in_inbox(&base, approval_key());
    let mut info = ().get_info();
    info.protocol_version = ProtocolVersion::V_2026_07_28;
    info.capabilities.elicitation =
        Some(ElicitationCapability::new().with_url(UrlElicitationCapability::new()));
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let running = serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(info.clone()));
    std::mem::forget(running);
    let mut peer = InitializeResult::default();
    peer.protocol_version = ProtocolVersion::V_2026_07_28;
    let mcp = serve_directly::<RoleClient, _, _, _, _>(info, client_side, Some(peer.into()));

    let call = |payment: &str| {
        let Value::Object(arguments) = json!({ "payment": payment }) else {
            unreachable!()
        };
        CallToolRequestParams::new("refund").with_arguments(arguments)
    };
    // Round one: no `_meta` (the re-send window keys it), a URL to open.
    let asked = |response: CallToolResponse| match response {
        CallToolResponse::InputRequired(asked) => {
            let state = asked.request_state.clone().expect("a requestState");
            let requests = asked.input_requests.clone().expect("input requests");
            let Some(InputRequest::Elicitation(elicit)) = requests.get(APPROVAL_INPUT) else {
                panic!("an elicitation under {APPROVAL_INPUT}: {requests:?}")
            };
            let ElicitRequestParams::UrlElicitationParams { url, .. } = &elicit.params else {
                panic!("a URL elicitation: {elicit:?}")
            };
            (url.clone(), state)
        }
        other => panic!("expected a question, got {other:?}"),
    };
    let retry = |mut params: CallToolRequestParams, state: &str| {
        let mut responses = InputResponses::new();
        responses.insert(APPROVAL_INPUT.to_owned(), json!({"action": "accept"}));
        params.input_responses = Some(responses);
        params.request_state = Some(state.to_owned());
        params
    };
    let (url, state) = asked(mcp.call_tool_once(call("pay_9")).await.unwrap());
    assert!(url.starts_with(&format!("{base}/approval?")), "{url}");
    assert_eq!(REFUNDS.count("pay_9"), 0);

    // The link alone approves nothing, and without a sign-in shows only the sign-in form.
    let anonymous = client().get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let page = anonymous.text().await.unwrap();
    assert!(page.contains("name=next"), "{page}");
    // Retried before anyone decided: told so, with the link; nothing ran.
    let early = match mcp
        .call_tool_once(retry(call("pay_9"), &state))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(result) => result,
        other => panic!("{other:?}"),
    };
    assert_eq!(early.is_error, Some(true));
    assert!(format!("{:?}", early.content).contains("/approval?"));
    assert_eq!(REFUNDS.count("pay_9"), 0);

    // Lee signs in, is shown the exact call, approves it.
    let (lee, csrf) = sign_in(&base, LEE).await;
    let shown = client()
        .get(&url)
        .header(reqwest::header::COOKIE, &lee)
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status(), 200);
    let page = shown.text().await.unwrap();
    assert!(page.contains("pay_9") && page.contains("refund"), "{page}");
    let form = |field: &str| {
        page.split(&format!("name={field} value=\""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap()
            .to_owned()
    };
    let approved = client()
        .post(format!("{base}/approve"))
        .header(reqwest::header::COOKIE, &lee)
        .form(&[
            ("csrf", csrf.as_str()),
            ("key", &form("key")),
            ("shown", &form("shown")),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 303);
    let ran = match mcp
        .call_tool_once(retry(call("pay_9"), &state))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(result) => result,
        other => panic!("{other:?}"),
    };
    assert_ne!(ran.is_error, Some(true), "{ran:?}");
    assert_eq!(REFUNDS.count("pay_9"), 1);
    // Sent again: replayed, never run twice.
    let again = mcp.call_tool_once(call("pay_9")).await.unwrap();
    assert!(matches!(again, CallToolResponse::Complete(r) if r.is_error != Some(true)));
    assert_eq!(REFUNDS.count("pay_9"), 1);

    // Altered links show nothing: another tenant, other arguments, a later expiry, a
    // forged signature.
    let (url2, _) = asked(mcp.call_tool_once(call("pay_10")).await.unwrap());
    for (altered, status) in [
        (url2.replace("tenant=acme", "tenant=globex"), 403),
        (url2.replace("&exp=", "&exp=9"), 403),
        (url2.replace("&sig=", "&sig=00"), 403),
        (url2.replace("&fp=", "&fp=0"), 400),
    ] {
        let refused = client()
            .get(&altered)
            .header(reqwest::header::COOKIE, &lee)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), status, "{altered}");
        let body = refused.text().await.unwrap();
        assert!(!body.contains("name=shown"), "no decision form: {body}");
    }
    assert_eq!(REFUNDS.count("pay_10"), 0);
}
