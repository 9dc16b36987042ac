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
use idem::Approver;
use serde::Deserialize;

use crate::cli::{Identity, StoreArgs};
use crate::exit::{Exit, Failure};
use crate::operate::Operator;

mod decide;
mod page;

use decide::{approve, deny, release, resolve};
use page::{login_body, login_page, page_error, refused_login, render};

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
    /// The MAC a notice in a redirect carries, so that a link cannot show a forged one.
    fn notice_tag(&self, notice: &str) -> String {
        hex(&mac(&self.secret, format!("notice:{notice}").as_bytes())
            .finalize()
            .into_bytes())
    }

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

#[derive(Deserialize)]
struct LogoutForm {
    csrf: String,
}

async fn logout(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

#[derive(Deserialize)]
struct IndexQuery {
    done: Option<String>,
    tag: Option<String>,
}

async fn index(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Query(query): Query<IndexQuery>,
) -> Response {
    if !inbox.authorised(&headers) {
        return refused_login();
    }
    // Only a notice this inbox wrote is shown.
    let notice = match (&query.done, &query.tag) {
        (Some(done), Some(tag)) if inbox.same(tag, &inbox.notice_tag(done)) => Some(done.as_str()),
        _ => None,
    };
    match render(&inbox, notice).await {
        Ok(html) => Html(html).into_response(),
        Err(e) => page_error(StatusCode::SERVICE_UNAVAILABLE, &e.message),
    }
}
