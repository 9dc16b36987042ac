//! `idem ui`: the approval inbox, server-rendered HTML without JavaScript. Pending approvals
//! with their exact arguments (secrets sealed) and approve / deny / approve-edited forms;
//! unknown records with resolve and release; a stats header.
//!
//! Access: a token, given once on the login page (the browser then holds an HttpOnly,
//! SameSite=Strict session cookie) or as `Authorization: Bearer` by a script. Either one
//! token (`IDEM_UI_TOKEN`) for the identity the inbox is started with (`--as` or
//! `IDEM_APPROVER`, as on the command line), or one token per person (`IDEM_UI_TOKENS`,
//! `who=token,...`): each decision is recorded with the identity of the token that signed
//! in. Every form carries an anti-forgery token derived from the session, and a request
//! whose `Origin` is another site is refused.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use clap::Args;
use hmac::{KeyInit, Mac};
use idem::{ApprovalKey, Approver};
use serde::Deserialize;

use crate::cli::{Identity, StoreArgs};
use crate::exit::{Exit, Failure};
use crate::operate::Operator;

mod call;
mod decide;
mod page;

use decide::{approve, deny, release, resolve};
use page::{login_page, page_error, refused_login, render};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The environment variable holding the inbox's access token.
pub const TOKEN_ENV: &str = "IDEM_UI_TOKEN";

/// The environment variable holding one token per person, `who=token,...`.
pub const TOKENS_ENV: &str = "IDEM_UI_TOKENS";

/// The shortest token accepted.
const MIN_TOKEN_CHARS: usize = 16;

const SESSION_COOKIE: &str = "idem_session";

/// How long a sign-in lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// How many sessions one person keeps at once (a sign-in beyond ends their oldest).
const SESSIONS_PER_PERSON: usize = 16;

pub const HELP: &str = "\
Example:
  export IDEM_UI_TOKEN=$(openssl rand -hex 16)
  idem ui --store sqlite:agent.db --listen 127.0.0.1:8700 --as dana@desk \\
    --approval-key-file /run/secrets/idem-approval-key

Environment:
  IDEM_UI_TOKEN      the token the login page asks for (at least 16 characters), for the
                     identity given with --as or IDEM_APPROVER; or:
  IDEM_UI_TOKENS     one token per person, who=token,... (e.g. dana@desk=...,lee@desk=...):
                     each decision is recorded with the identity of the token signed in
  IDEM_APPROVER      who decides with IDEM_UI_TOKEN, recorded with every decision (or --as)
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
    /// Send the session cookie over HTTPS only (when a TLS proxy serves the inbox).
    #[arg(long)]
    pub secure_cookie: bool,
}

struct Inbox {
    op: Operator,
    /// The key decisions are signed with, by whoever signed in.
    signing: Option<ApprovalKey>,
    /// Keys the token check, sessions, anti-forgery tokens and notices (random per process).
    secret: [u8; 32],
    /// Each person's identity and the MAC of their token under `secret` (compared in
    /// constant time).
    tokens: Vec<(String, Vec<u8>)>,
    /// The signed-in sessions: each sign-in's random id, whose it is, until when.
    sessions: Mutex<HashMap<String, (String, Instant)>>,
    /// Whether the session cookie is sent only over HTTPS (behind a TLS proxy).
    secure_cookie: bool,
}

/// Who a request comes from.
enum Caller {
    /// A script with a token in `Authorization: Bearer` (a browser never adds it, so no
    /// forgery token is needed), and whose token it is.
    Bearer(String),
    /// A browser with a session's cookie: the session, and whose it is.
    Session(String, String),
}

impl Caller {
    /// Who decides.
    fn who(&self) -> &str {
        match self {
            Caller::Bearer(who) | Caller::Session(_, who) => who,
        }
    }
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
    /// The MAC a notice in a redirect carries, for `caller` only: a link cannot show a
    /// forged notice, nor one made for someone else.
    fn notice_tag(&self, caller: &Caller, notice: &str) -> String {
        let whose = match caller {
            Caller::Session(session, _) => format!("session:{session}"),
            Caller::Bearer(who) => format!("bearer:{who}"),
        };
        hex(
            &mac(&self.secret, format!("notice:{whose}:{notice}").as_bytes())
                .finalize()
                .into_bytes(),
        )
    }

    /// Whose token `given` is, if it is one (every token is compared, in constant time).
    fn token_of(&self, given: &str) -> Option<String> {
        let mut found = None;
        for (who, token_mac) in &self.tokens {
            if mac(&self.secret, given.as_bytes())
                .verify_slice(token_mac)
                .is_ok()
            {
                found = Some(who.clone());
            }
        }
        found
    }

    /// Who signs an approval made by `caller`.
    fn approver(&self, caller: &Caller) -> Option<Approver> {
        self.signing
            .as_ref()
            .map(|key| Approver::new(caller.who(), key.clone()))
    }

    fn same(&self, a: &str, b: &str) -> bool {
        // Compare MACs of both: constant time in the secret's bytes.
        let tag = mac(&self.secret, a.as_bytes()).finalize().into_bytes();
        mac(&self.secret, b.as_bytes()).verify_slice(&tag).is_ok()
    }

    /// Who the request comes from, if it carries the token or a live session's cookie.
    fn caller(&self, headers: &HeaderMap) -> Option<Caller> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(who) = bearer.and_then(|t| self.token_of(t.trim())) {
            return Some(Caller::Bearer(who));
        }
        let now = Instant::now();
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .filter(|(name, _)| *name == SESSION_COOKIE)
            .find_map(|(_, id)| match sessions.get(id) {
                Some((who, until)) if now < *until => {
                    Some(Caller::Session(id.to_owned(), who.clone()))
                }
                _ => None,
            })
    }

    /// The anti-forgery token of a session's forms.
    fn csrf_of(&self, session: &str) -> String {
        hex(&mac(&self.secret, format!("csrf:{session}").as_bytes())
            .finalize()
            .into_bytes())
    }

    /// A new session of `who`: a random id, valid for [`SESSION_TTL`].
    fn sign_in(&self, who: String) -> Result<String, getrandom::Error> {
        let mut id = [0u8; 32];
        getrandom::fill(&mut id)?;
        let id = hex(&id);
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, (_, until)| now < *until);
        // A person's oldest sessions end beyond the few a person uses at once.
        let mut theirs: Vec<(String, Instant)> = sessions
            .iter()
            .filter(|(_, (owner, _))| *owner == who)
            .map(|(id, (_, until))| (id.clone(), *until))
            .collect();
        if theirs.len() >= SESSIONS_PER_PERSON {
            theirs.sort_by_key(|(_, until)| *until);
            for (old, _) in &theirs[..=theirs.len() - SESSIONS_PER_PERSON] {
                sessions.remove(old);
            }
        }
        sessions.insert(id.clone(), (who, now + SESSION_TTL));
        Ok(id)
    }

    fn sign_out(&self, session: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(session);
    }

    fn cookie(&self, value: &str, max_age: Duration) -> String {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        format!(
            "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            max_age.as_secs()
        )
    }

    /// A POST by `caller` must come from a page of this inbox: the anti-forgery token
    /// matches, and an `Origin` header, if sent, is this host. The refusal to answer, if not.
    fn check_post(
        &self,
        headers: &HeaderMap,
        caller: &Caller,
        csrf: &str,
    ) -> Result<(), Box<Response>> {
        if let Some(refusal) = other_site(headers) {
            return Err(Box::new(refusal));
        }
        match caller {
            Caller::Session(session, _) if !self.same(csrf, &self.csrf_of(session)) => {
                Err(Box::new(page_error(
                    StatusCode::FORBIDDEN,
                    "refused: the form's anti-forgery token is missing or wrong; reload the inbox and try again",
                )))
            }
            _ => Ok(()),
        }
    }
}

pub async fn serve(args: UiArgs) -> Result<(), Failure> {
    let tokens = tokens(&args.identity)?;
    let signing = match crate::keys::signing_key(args.approval_key_file.as_deref()) {
        Ok(key) => Some(key),
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
    let tokens = tokens
        .into_iter()
        .map(|(who, token)| {
            let tag = mac(&secret, token.as_bytes()).finalize().into_bytes();
            (who, tag.to_vec())
        })
        .collect();
    let inbox = Arc::new(Inbox {
        op,
        signing,
        secret,
        tokens,
        sessions: Mutex::new(HashMap::new()),
        secure_cookie: args.secure_cookie,
    });
    let name = inbox.op.name.clone();
    let app = Router::new()
        .route("/", get(index))
        .route(call::PATH, get(call::approval_page))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/approve", post(approve))
        .route("/deny", post(deny))
        .route("/resolve", post(resolve))
        .route("/release", post(release))
        .layer(axum::middleware::map_response(guarded))
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
    if !local.ip().is_loopback() {
        tracing::warn!(
            "the inbox listens on {local}, beyond this host, over plain HTTP: the token and the session cookie cross the network in clear; serve it on loopback, or behind a TLS proxy (with --secure-cookie)"
        );
    }
    tracing::info!("approval inbox for {name} at http://{local}/");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Failure::new(Exit::Failed, format!("the inbox stopped: {e}")))
}

/// The refusal of a form sent from a page of another site: its `Origin`, if the browser
/// sends one, must be this host.
fn other_site(headers: &HeaderMap) -> Option<Response> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())?;
    let same =
        host.is_some_and(|h| origin == format!("http://{h}") || origin == format!("https://{h}"));
    (!same).then(|| {
        page_error(
            StatusCode::FORBIDDEN,
            "refused: the form was sent from another site (behind a proxy, pass the original Host header on)",
        )
    })
}

/// The tokens and whose each is: `IDEM_UI_TOKENS` (`who=token,...`), or `IDEM_UI_TOKEN`
/// for the identity given with `--as` or `IDEM_APPROVER`.
fn tokens(identity: &Identity) -> Result<Vec<(String, String)>, Failure> {
    let usage = |message: String| Failure::new(Exit::Usage, message);
    let short = |source: &str| {
        usage(format!(
            "{source}: a token is shorter than {MIN_TOKEN_CHARS} characters: use random ones, e.g. `openssl rand -hex 16`"
        ))
    };
    let one = std::env::var(TOKEN_ENV).ok();
    let many = std::env::var(TOKENS_ENV).ok();
    match (one, many) {
        (Some(_), Some(_)) => Err(usage(format!(
            "set {TOKEN_ENV} or {TOKENS_ENV}, not both: one token for the --as identity, or one per person"
        ))),
        (None, None) => Err(usage(format!(
            "set {TOKEN_ENV} to the token the inbox asks for (e.g. `openssl rand -hex 16`), or {TOKENS_ENV} to one per person (who=token,...): without one the inbox would be open to anyone who reaches the port"
        ))),
        (Some(token), None) => {
            let token = token.trim().to_owned();
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err(short(TOKEN_ENV));
            }
            Ok(vec![(identity.required()?, token)])
        }
        (None, Some(list)) => {
            if identity.who.is_some() {
                tracing::warn!(
                    "{TOKENS_ENV} names who holds each token: --as and IDEM_APPROVER are not used"
                );
            }
            let mut tokens: Vec<(String, String)> = Vec::new();
            for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                let Some((who, token)) = entry.split_once('=') else {
                    return Err(usage(format!(
                        "{TOKENS_ENV}: an entry is not `who=token` (e.g. `dana@desk=` and 32 hex digits)"
                    )));
                };
                let (who, token) = (who.trim(), token.trim());
                if who.is_empty() {
                    return Err(usage(format!(
                        "{TOKENS_ENV}: an entry names nobody before `=`"
                    )));
                }
                if token.chars().count() < MIN_TOKEN_CHARS {
                    return Err(short(TOKENS_ENV));
                }
                if tokens.iter().any(|(_, t)| t == token) {
                    return Err(usage(format!(
                        "{TOKENS_ENV}: two people share a token: give each their own"
                    )));
                }
                tokens.push((who.to_owned(), token.to_owned()));
            }
            if tokens.is_empty() {
                return Err(usage(format!("{TOKENS_ENV} lists no token")));
            }
            Ok(tokens)
        }
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    /// Where to return: an approval link's page.
    #[serde(default)]
    next: String,
}

/// Sign in. A sign-in from another site's page is refused too: it would sign a visitor in
/// under someone else's token, and record their decisions under that name.
async fn login(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if let Some(refusal) = other_site(&headers) {
        return refusal;
    }
    let Some(who) = inbox.token_of(form.token.trim()) else {
        tracing::warn!("a wrong inbox token was given");
        let back = match call::after_sign_in(&form.next) {
            "/" => "",
            link => link,
        };
        return (
            StatusCode::UNAUTHORIZED,
            Html(page::login_body_next(
                Some("That is not the inbox's token."),
                back,
            )),
        )
            .into_response();
    };
    let session = match inbox.sign_in(who) {
        Ok(session) => session,
        Err(e) => {
            return page_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("no randomness for a session: {e}"),
            );
        }
    };
    let cookie = inbox.cookie(&session, SESSION_TTL);
    let back = call::after_sign_in(&form.next);
    ([(header::SET_COOKIE, cookie)], Redirect::to(back)).into_response()
}

#[derive(Deserialize)]
struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

impl decide::Posted for LogoutForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// Sign out: the session ends here, not only in this browser.
async fn logout(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    form: Result<Form<LogoutForm>, FormRejection>,
) -> Response {
    let caller = match decide::admit(&inbox, &headers, form) {
        Ok((_, caller)) => caller,
        Err(refused) => return *refused,
    };
    if let Caller::Session(session, _) = &caller {
        inbox.sign_out(session);
    }
    let cookie = inbox.cookie("", Duration::ZERO);
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

/// Every answer: never cached (a page holds a session's forms), never framed, and no
/// script, style from the page only, forms sent only to the inbox. The referrer policy is
/// `same-origin`, not `no-referrer`: under the latter a browser sends `Origin: null` with
/// a form, which the origin check refuses.
async fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
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
    let Some(caller) = inbox.caller(&headers) else {
        return refused_login();
    };
    let csrf = match &caller {
        Caller::Session(session, _) => inbox.csrf_of(session),
        // A script's forms need no anti-forgery token.
        Caller::Bearer(_) => String::new(),
    };
    // Only a notice this inbox wrote is shown.
    let notice = match (&query.done, &query.tag) {
        (Some(done), Some(tag)) if inbox.same(tag, &inbox.notice_tag(&caller, done)) => {
            Some(done.as_str())
        }
        _ => None,
    };
    match render(&inbox, caller.who(), &csrf, notice).await {
        Ok(html) => Html(html).into_response(),
        Err(e) => page_error(StatusCode::SERVICE_UNAVAILABLE, &e.message),
    }
}
