//! `idem ui`: the approval inbox, server-rendered HTML without JavaScript. Pending approvals
//! with their exact arguments (secrets sealed) and approve / deny / approve-edited forms;
//! unknown records with resolve and release; a stats header.
//!
//! Access: a token from `IDEM_UI_TOKEN`, given once on the login page (the browser then
//! holds an HttpOnly, SameSite=Strict session cookie) or as `Authorization: Bearer` by a
//! script. Every form carries an anti-forgery token derived from the session, and a request
//! whose `Origin` is another site is refused. Decisions are recorded with the identity the
//! inbox was started with (`--as` or `IDEM_APPROVER`), as on the command line.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use clap::Args;
use hmac::{KeyInit, Mac};
use idem::store::approvals::{ApprovalFilter, PendingApproval, Verdict};
use idem::{Approver, Outcome, RecordState, StateKind, ToolError};
use serde::Deserialize;
use serde_json::Value;

use crate::cli::{Identity, StoreArgs};
use crate::exit::{Exit, Failure};
use crate::operate::{self, Operator, RecordQuery};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The environment variable holding the inbox's access token.
pub const TOKEN_ENV: &str = "IDEM_UI_TOKEN";

/// The shortest token accepted.
const MIN_TOKEN_CHARS: usize = 16;

const SESSION_COOKIE: &str = "idem_session";

pub const HELP: &str = "\
Example:
  IDEM_UI_TOKEN=$(openssl rand -hex 16) IDEM_APPROVAL_KEY=desk-1:<64 hex digits> \\
    idem ui --store sqlite:agent.db --listen 127.0.0.1:8700 --as dana@desk

Environment:
  IDEM_UI_TOKEN      the token the login page asks for (at least 16 characters); required
  IDEM_APPROVER      who decides, recorded with every decision (or --as)
  IDEM_APPROVAL_KEY  id:hex-secret, the key approvals are signed with (or --approval-key-file);
                     without it the inbox denies, resolves and releases, but cannot approve";

#[derive(Args)]
pub struct UiArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The address to serve on (keep it on loopback, or behind a TLS proxy).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8700")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub identity: Identity,
    /// The signing key, `id:hex-secret`, from this file [default: IDEM_APPROVAL_KEY].
    #[arg(long, value_name = "FILE")]
    pub approval_key_file: Option<PathBuf>,
}

struct Inbox {
    op: Operator,
    who: String,
    approver: Option<Approver>,
    /// Keys the token check, the session and the anti-forgery token (random per process).
    secret: [u8; 32],
    /// The token's MAC under `secret` (compared in constant time).
    token_mac: Vec<u8>,
    /// The session cookie's value.
    session: String,
    /// The forms' anti-forgery token.
    csrf: String,
}

fn mac(secret: &[u8], data: &[u8]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    m.update(data);
    m
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl Inbox {
    fn token_ok(&self, given: &str) -> bool {
        mac(&self.secret, given.as_bytes())
            .verify_slice(&self.token_mac)
            .is_ok()
    }

    fn same(&self, a: &str, b: &str) -> bool {
        // Compare MACs of both: constant time in the secret's bytes.
        let tag = mac(&self.secret, a.as_bytes()).finalize().into_bytes();
        mac(&self.secret, b.as_bytes()).verify_slice(&tag).is_ok()
    }

    /// Whether the request carries the session cookie or the bearer token.
    fn authorised(&self, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if bearer.is_some_and(|t| self.token_ok(t.trim())) {
            return true;
        }
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .any(|(name, value)| name == SESSION_COOKIE && self.same(value, &self.session))
    }

    /// A POST must come from a page of this inbox: the anti-forgery token matches, and an
    /// `Origin` header, if sent, is this host. The refusal to answer, if not.
    fn check_post(&self, headers: &HeaderMap, csrf: &str) -> Option<Response> {
        if !self.authorised(headers) {
            return Some(refused_login());
        }
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
            let same = host.is_some_and(|h| {
                origin == format!("http://{h}") || origin == format!("https://{h}")
            });
            if !same {
                return Some(page_error(
                    StatusCode::FORBIDDEN,
                    "refused: the form was sent from another site",
                ));
            }
        }
        if !self.same(csrf, &self.csrf) {
            return Some(page_error(
                StatusCode::FORBIDDEN,
                "refused: the form's anti-forgery token is missing or wrong; reload the inbox and try again",
            ));
        }
        None
    }
}

pub async fn serve(args: UiArgs) -> Result<(), Failure> {
    let token = std::env::var(TOKEN_ENV).map_err(|_| {
        Failure::new(
            Exit::Usage,
            format!("set {TOKEN_ENV} to the token the inbox asks for (e.g. `openssl rand -hex 16`): without one the inbox would be open to anyone who reaches the port"),
        )
    })?;
    if token.trim().chars().count() < MIN_TOKEN_CHARS {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "{TOKEN_ENV} is shorter than {MIN_TOKEN_CHARS} characters: use a random one, e.g. `openssl rand -hex 16`"
            ),
        ));
    }
    let who = args.identity.required()?;
    let approver = match crate::keys::signing_key(args.approval_key_file.as_deref()) {
        Ok(key) => Some(Approver::new(who.clone(), key)),
        Err(e)
            if args.approval_key_file.is_some()
                || std::env::var_os(crate::keys::SIGNING_KEY_ENV).is_some() =>
        {
            return Err(e);
        }
        Err(_) => {
            tracing::warn!(
                "no signing key ({}): the inbox can deny, resolve and release, but not approve",
                crate::keys::SIGNING_KEY_ENV
            );
            None
        }
    };
    let op = args.store.open().await?;
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)
        .map_err(|e| Failure::new(Exit::Failed, format!("no randomness for the session: {e}")))?;
    let session = hex(&mac(&secret, b"session").finalize().into_bytes());
    let csrf = hex(&mac(&secret, format!("csrf:{session}").as_bytes())
        .finalize()
        .into_bytes());
    let token_mac = mac(&secret, token.trim().as_bytes())
        .finalize()
        .into_bytes()
        .to_vec();
    let inbox = Arc::new(Inbox {
        op,
        who,
        approver,
        secret,
        token_mac,
        session,
        csrf,
    });
    let name = inbox.op.name.clone();
    let app = Router::new()
        .route("/", get(index))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/approve", post(approve))
        .route("/deny", post(deny))
        .route("/resolve", post(resolve))
        .route("/release", post(release))
        .with_state(inbox);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| {
            Failure::new(
                Exit::Usage,
                format!("cannot listen on {}: {e}", args.listen),
            )
        })?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::new(Exit::Failed, e.to_string()))?;
    tracing::info!("approval inbox for {name} at http://{local}/");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Failure::new(Exit::Failed, format!("the inbox stopped: {e}")))
}

// ---------------------------------------------------------------------------------------
// Pages.

fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encoding for a message in a redirect's query.
fn encode(text: &str) -> String {
    text.bytes().fold(String::new(), |mut s, b| {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            s.push(b as char);
        } else {
            let _ = write!(s, "%{b:02X}");
        }
        s
    })
}

const STYLE: &str = "
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2433;background:#f6f7f9}
header{background:#1d2433;color:#fff;padding:14px 28px;display:flex;gap:28px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:18px;margin:0} header .stat b{font-size:18px} header .muted{color:#b8bfcc}
main{padding:8px 28px 40px;max-width:1200px}
h2{font-size:16px;margin:28px 0 10px}
table{border-collapse:collapse;width:100%;background:#fff;box-shadow:0 1px 2px #0002}
th,td{text-align:left;vertical-align:top;padding:9px 10px;border-bottom:1px solid #e4e6eb}
th{font-size:12px;text-transform:uppercase;color:#5b6475;background:#fafbfc;white-space:nowrap}
td:nth-child(2),td:nth-child(3):not(.status),#decided td:nth-child(4){white-space:nowrap}
#pending td:last-child,#unknown td:last-child{min-width:17em}
pre{margin:0;font:13px/1.35 ui-monospace,monospace;white-space:pre-wrap;max-width:380px}
code{font:12px ui-monospace,monospace;color:#5b6475;word-break:break-all} td code{display:block;width:32ch}
form{margin:0 0 6px} input[type=text],textarea{font:13px ui-monospace,monospace;width:100%;box-sizing:border-box}
button{font:inherit;padding:4px 12px;border-radius:4px;border:1px solid #8890a0;background:#fff;cursor:pointer}
button.approve{background:#1f7a3f;color:#fff;border-color:#1f7a3f} button.deny{background:#a8231c;color:#fff;border-color:#a8231c}
.notice{background:#e6f4ea;border:1px solid #1f7a3f;padding:10px 14px;margin:16px 0}
.error{background:#fbe9e7;border:1px solid #a8231c;padding:10px 14px;margin:16px 0}
.muted{color:#5b6475} .empty{color:#5b6475;padding:12px;background:#fff}
";

fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        esc(title)
    )
}

fn page_error(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<main><div class=error role=alert id=error>{}</div><p><a href=\"/\">Back to the inbox</a></p></main>",
        esc(message)
    );
    (status, Html(layout("idem: refused", &body))).into_response()
}

fn login_body(message: Option<&str>) -> String {
    let note = message
        .map(|m| format!("<div class=error role=alert id=error>{}</div>", esc(m)))
        .unwrap_or_default();
    layout(
        "idem: sign in",
        &format!(
            "<main><h2>idem approval inbox</h2>{note}<form method=post action=\"/login\"><p><label>Access token <input type=password name=token autocomplete=off autofocus></label></p><p><button type=submit>Open the inbox</button></p></form></main>"
        ),
    )
}

fn refused_login() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Html(login_body(Some("The inbox needs its access token."))),
    )
        .into_response()
}

async fn login_page() -> Html<String> {
    Html(login_body(None))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(inbox): State<Arc<Inbox>>, Form(form): Form<LoginForm>) -> Response {
    if !inbox.token_ok(form.token.trim()) {
        tracing::warn!("a wrong inbox token was given");
        return (
            StatusCode::UNAUTHORIZED,
            Html(login_body(Some("That is not the inbox's token."))),
        )
            .into_response();
    }
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        inbox.session
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
}

async fn logout() -> Response {
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

#[derive(Deserialize)]
struct IndexQuery {
    done: Option<String>,
}

async fn index(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Query(query): Query<IndexQuery>,
) -> Response {
    if !inbox.authorised(&headers) {
        return refused_login();
    }
    match render(&inbox, query.done.as_deref()).await {
        Ok(html) => Html(html).into_response(),
        Err(e) => page_error(StatusCode::SERVICE_UNAVAILABLE, &e.message),
    }
}

async fn render(inbox: &Inbox, done: Option<&str>) -> Result<String, Failure> {
    let op = &inbox.op;
    let now = op.now().await?;
    let stats = op.stats(None, &|_| {}).await?;
    let all = op
        .approvals(&ApprovalFilter {
            pending_only: false,
            limit: 500,
            ..ApprovalFilter::default()
        })
        .await?;
    let pending = op.approvals(&ApprovalFilter::default()).await?;
    let unknown = op
        .records(
            &RecordQuery {
                states: vec![Some(StateKind::Unknown)],
                tenant: None,
                tool: None,
                older_than: None,
                limit: 200,
            },
            &|_| {},
        )
        .await?;
    let csrf = esc(&inbox.csrf);
    let count = |s: &str| stats.by_state.get(s).copied().unwrap_or(0);
    let mut body = String::new();
    let _ = write!(
        body,
        "<header><h1>idem inbox</h1><span class=stat id=stat-pending><b>{}</b> pending approvals</span><span class=stat id=stat-unknown><b>{}</b> unknown</span><span class=stat><b>{}</b> in progress</span><span class=stat><b>{}</b> completed</span><span class=muted>{} · you are <b>{}</b></span><form method=post action=\"/logout\" style=\"margin-left:auto\"><input type=hidden name=csrf value=\"{csrf}\"><button type=submit>Sign out</button></form></header><main>",
        stats.pending_approvals,
        count("unknown"),
        count("in_progress"),
        count("completed"),
        esc(&op.name),
        esc(&inbox.who)
    );
    if let Some(done) = done {
        let _ = write!(
            body,
            "<div class=notice role=status id=notice>{}</div>",
            esc(done)
        );
    }
    if let Some((r, since)) = &stats.oldest_unknown {
        let _ = write!(
            body,
            "<p class=muted>Oldest unknown outcome: {} for {}, since {} ({} ago).</p>",
            esc(&r.tool),
            esc(&r.tenant),
            esc(&since.to_rfc3339()),
            operate::span(*since, now)
        );
    }
    body.push_str("<h2>Waiting for approval</h2>");
    if inbox.approver.is_none() {
        body.push_str("<p class=error>No signing key: this inbox can deny but not approve (start it with IDEM_APPROVAL_KEY).</p>");
    }
    if pending.is_empty() {
        body.push_str("<p class=empty id=no-pending>Nothing is waiting for a decision.</p>");
    } else {
        body.push_str("<table id=pending><tr><th>Tool</th><th>Tenant</th><th>Requested</th><th>Expires in</th><th>Arguments</th><th>Decide</th></tr>");
        for e in &pending {
            pending_row(&mut body, e, now, &csrf, inbox.approver.is_some());
        }
        body.push_str("</table>");
    }
    body.push_str("<h2>Unknown outcomes</h2>");
    if unknown.is_empty() {
        body.push_str("<p class=empty id=no-unknown>No call has an unknown outcome.</p>");
    } else {
        body.push_str("<table id=unknown><tr><th>Tool</th><th>Tenant</th><th>Since</th><th>Why</th><th>Arguments</th><th>Settle</th></tr>");
        for r in &unknown {
            let (since, why) = match &r.state {
                RecordState::Unknown { since, last_error } => (*since, last_error.as_str()),
                _ => (r.updated_at, ""),
            };
            let key = esc(r.key.as_str());
            let _ = write!(
                body,
                "<tr data-key=\"{key}\"><td><b>{}</b><br><code>{key}</code></td><td>{}</td><td>{} ago</td><td>{}</td><td><pre>{}</pre></td><td>\
<form method=post action=\"/resolve\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=text name=value placeholder='result as JSON, e.g. {{\"sent\": true}}' aria-label=\"result as JSON\"><input type=text name=failure placeholder=\"or: failure message\" aria-label=\"failure message\"><button type=submit>Resolve</button></form>\
<form method=post action=\"/release\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><button type=submit title=\"Only if the effect did not happen: the call runs again when called\">Release (run again)</button></form></td></tr>",
                esc(&r.tool),
                esc(&r.tenant),
                operate::span(since, now),
                esc(why),
                esc(&pretty_text(r.arguments.as_deref())),
            );
        }
        body.push_str("</table>");
    }
    let decided: Vec<&PendingApproval> = all.iter().filter(|e| !e.is_pending(now)).collect();
    if !decided.is_empty() {
        body.push_str("<h2>Decided and expired</h2><table id=decided><tr><th>Tool</th><th>Tenant</th><th>Status</th><th>By</th><th>Arguments</th></tr>");
        for e in decided {
            let (by, why) = match &e.decision {
                Some(d) => match &d.verdict {
                    Verdict::Denied { reason } => (d.by.as_str(), format!(": {reason}")),
                    Verdict::Approved { .. } => (d.by.as_str(), String::new()),
                },
                None => ("", String::new()),
            };
            let key = esc(e.key.as_str());
            let _ = write!(
                body,
                "<tr data-key=\"{key}\"><td><b>{}</b><br><code>{key}</code></td><td>{}</td><td class=status>{}{}</td><td>{}</td><td><pre>{}</pre></td></tr>",
                esc(&e.tool),
                esc(&e.tenant),
                operate::approval_status(e, now),
                esc(&why),
                esc(by),
                esc(&pretty(&e.arguments)),
            );
        }
        body.push_str("</table>");
    }
    body.push_str("</main>");
    Ok(layout("idem inbox", &body))
}

fn pending_row(
    body: &mut String,
    e: &PendingApproval,
    now: idem::Timestamp,
    csrf: &str,
    can_approve: bool,
) {
    let key = esc(e.key.as_str());
    let shown = esc(&e.fingerprint.to_hex());
    let args = esc(&pretty(&e.arguments));
    let approve = if can_approve {
        format!(
            "<form method=post action=\"/approve\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=shown value=\"{shown}\"><button type=submit class=approve>Approve</button></form>\
<details><summary>Approve edited arguments</summary><form method=post action=\"/approve\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=shown value=\"{shown}\"><textarea name=edited rows=5 aria-label=\"edited arguments\">{args}</textarea><button type=submit>Approve these arguments</button></form></details>"
        )
    } else {
        String::new()
    };
    let _ = write!(
        body,
        "<tr data-key=\"{key}\"><td><b>{}</b><br><code>{key}</code></td><td>{}</td><td>{}<br><span class=muted>{} ago</span></td><td>{}</td><td><pre>{args}</pre></td><td>{approve}\
<form method=post action=\"/deny\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=text name=reason required placeholder=\"reason (the agent is told)\" aria-label=\"reason\"><button type=submit class=deny>Deny</button></form></td></tr>",
        esc(&e.tool),
        esc(&e.tenant),
        esc(&e.requested_at.to_rfc3339()),
        operate::span(e.requested_at, now),
        operate::span(now, e.expires_at),
    );
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

fn pretty_text(text: Option<&str>) -> String {
    match text {
        Some(text) => serde_json::from_str::<Value>(text)
            .map(|v| pretty(&v))
            .unwrap_or_else(|_| text.to_owned()),
        None => "(not kept)".into(),
    }
}

// ---------------------------------------------------------------------------------------
// Decisions.

fn failed(f: Failure) -> Response {
    let status = match f.code {
        Exit::NotFound => StatusCode::NOT_FOUND,
        Exit::Refused => StatusCode::CONFLICT,
        Exit::Usage => StatusCode::BAD_REQUEST,
        Exit::Store => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    page_error(status, &f.message)
}

fn done(message: String) -> Response {
    Redirect::to(&format!("/?done={}", encode(&message))).into_response()
}

#[derive(Deserialize)]
struct ApproveForm {
    csrf: String,
    key: String,
    shown: String,
    edited: Option<String>,
}

async fn approve(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<ApproveForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let Some(approver) = &inbox.approver else {
        return failed(Failure::new(
            Exit::Usage,
            "this inbox has no signing key (IDEM_APPROVAL_KEY): it cannot approve",
        ));
    };
    let decided = async {
        let op = &inbox.op;
        let entry = op.approval(&form.key).await?;
        if operate::fingerprint_of_form(&form.shown) != Some(entry.fingerprint) {
            return Err(Failure::new(
                Exit::Refused,
                format!(
                    "{}: the call pending under key {} has other arguments than the ones you were shown: nothing was approved; reload the inbox",
                    op.name, entry.key
                ),
            ));
        }
        let now = op.now().await?;
        op.refuse_decided(&entry, now)?;
        let edited = match form.edited.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => {
                let value: Value = serde_json::from_str(text).map_err(|e| {
                    Failure::new(Exit::Usage, format!("the edited arguments are not JSON: {e}"))
                })?;
                if !value.is_object() {
                    return Err(Failure::new(
                        Exit::Usage,
                        "the edited arguments are a JSON object, as the call's are",
                    ));
                }
                (value != entry.arguments).then_some(value)
            }
        };
        let decided = op.approve(&entry, approver, edited.as_ref()).await?;
        tracing::info!(key = %decided.key, by = %inbox.who, edited = edited.is_some(), "approved in the inbox");
        Ok::<_, Failure>((decided, edited.is_some()))
    }
    .await;
    match decided {
        Ok((e, edited)) => done(format!(
            "Approved {} for {}{} by {}: the agent's next call runs it once.",
            e.tool,
            e.tenant,
            if edited { " with edited arguments" } else { "" },
            inbox.who
        )),
        Err(f) => failed(f),
    }
}

#[derive(Deserialize)]
struct DenyForm {
    csrf: String,
    key: String,
    reason: String,
}

async fn deny(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<DenyForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let decided = async {
        let op = &inbox.op;
        let entry = op.approval(&form.key).await?;
        let now = op.now().await?;
        op.refuse_decided(&entry, now)?;
        let decided = op.deny(&entry, &inbox.who, form.reason.trim()).await?;
        tracing::info!(key = %decided.key, by = %inbox.who, "denied in the inbox");
        Ok::<_, Failure>(decided)
    }
    .await;
    match decided {
        Ok(e) => done(format!(
            "Denied {} for {} by {}: {}",
            e.tool,
            e.tenant,
            inbox.who,
            form.reason.trim()
        )),
        Err(f) => failed(f),
    }
}

#[derive(Deserialize)]
struct ResolveForm {
    csrf: String,
    key: String,
    value: Option<String>,
    failure: Option<String>,
}

async fn resolve(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<ResolveForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let value = form
        .value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let failure = form
        .failure
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let resolved = async {
        let outcome = match (value, failure) {
            (Some(value), None) => {
                let value: Value = serde_json::from_str(value).map_err(|e| {
                    Failure::new(Exit::Usage, format!("the result is not JSON ({e}): quote a string as \"text\""))
                })?;
                Outcome::success(&value)
            }
            (None, Some(message)) => Outcome::Failure(ToolError::terminal(message)),
            _ => {
                return Err(Failure::new(
                    Exit::Usage,
                    "give either the call's result as JSON or a failure message, not both or neither",
                ));
            }
        };
        let op = &inbox.op;
        let record = op.record(&form.key).await?;
        if !matches!(record.state, RecordState::Unknown { .. } | RecordState::InProgress { .. }) {
            return Err(Failure::new(
                Exit::Refused,
                format!("{}: the record under key {} is already completed; nothing changed", op.name, record.key),
            ));
        }
        let resolved = op.resolve(&record, &outcome, None).await?;
        tracing::info!(key = %resolved.key, by = %inbox.who, "resolved in the inbox");
        Ok::<_, Failure>(resolved)
    }
    .await;
    match resolved {
        Ok(r) => done(format!(
            "Resolved {} for {} by {}: every call with its key replays that outcome.",
            r.tool, r.tenant, inbox.who
        )),
        Err(f) => failed(f),
    }
}

#[derive(Deserialize)]
struct ReleaseForm {
    csrf: String,
    key: String,
}

async fn release(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<ReleaseForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let released = async {
        let op = &inbox.op;
        let record = op.record(&form.key).await?;
        op.release(&record).await?;
        tracing::info!(key = %record.key, by = %inbox.who, "released in the inbox");
        Ok::<_, Failure>(record)
    }
    .await;
    match released {
        Ok(r) => done(format!(
            "Released {} for {} by {}: the call runs again when called.",
            r.tool, r.tenant, inbox.who
        )),
        Err(f) => failed(f),
    }
}
