//! `idem ui`: the approval inbox, server-rendered HTML without JavaScript. Pending approvals
//! with their exact arguments (secrets sealed) and approve / deny / approve-edited forms;
//! calls sent to a person (cases) with run again / resolve / undo the run; unknown records
//! with resolve and release; a stats header.
//!
//! Access: a token, given once on the login page (the browser then holds an HttpOnly,
//! SameSite=Strict session cookie) or as `Authorization: Bearer` by a script. Either one
//! token (`IDEM_UI_TOKEN`) for the identity the inbox is started with (`--as` or
//! `IDEM_APPROVER`, as on the command line), or one token per person (`IDEM_UI_TOKENS`,
//! `who=token,...`): each decision is recorded with the identity of the token that signed
//! in. Every form carries an anti-forgery token derived from the session, and a request
//! whose `Origin` is another site is refused.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use clap::Args;
use idem_registry::ApprovalKey;
use idem_registry::Approver;
use serde::Deserialize;

use crate::cli::{Identity, StoreArgs};
use crate::exit::{Exit, Failure};
use crate::operate::Operator;

mod batch;
mod call;
mod cases;
mod decide;
mod grants;
mod html;
mod page;
mod session;

use decide::{approve, deny, release, resolve};
use page::{login_page, page_error, refused_login, render};
use session::{Caller, SESSION_TTL, Sessions, other_site, tokens};

/// What `idem ui --help` adds after the options.
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
    /// Who may come in, and the signed-in sessions.
    auth: Sessions,
}

impl Inbox {
    /// Who signs an approval made by `caller`.
    fn approver(&self, caller: &Caller) -> Option<Approver> {
        self.signing
            .as_ref()
            .map(|key| Approver::new(caller.who(), key.clone()))
    }
}

pub async fn serve(args: UiArgs) -> Result<(), Failure> {
    let tokens = tokens(&args.identity)?;
    let signing = match crate::keys::signing_key(args.approval_key_file.as_deref()) {
        Ok(key) => Some(key),
        Err(e)
            if args.approval_key_file.is_some()
                || std::env::var_os(crate::env::APPROVAL_KEY).is_some() =>
        {
            return Err(e);
        }
        Err(_) => {
            tracing::warn!(
                "no signing key ({}): the inbox can deny, resolve and release, but not approve",
                crate::env::APPROVAL_KEY
            );
            None
        }
    };
    let mut op = args.store.open().await?;
    op.door = "inbox";
    let auth = Sessions::new(tokens, args.secure_cookie)?;
    let inbox = Arc::new(Inbox { op, signing, auth });
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
        .route(batch::PATH, post(batch::decide))
        .route(cases::PATH, post(cases::decide))
        .route(grants::PATH, post(grants::revoke))
        .layer(axum::middleware::map_response(guarded))
        .with_state(inbox);
    let (listener, local) = listen(args.listen).await?;
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
    let Some(who) = inbox.auth.token_of(form.token.trim()) else {
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
    let session = match inbox.auth.sign_in(who) {
        Ok(session) => session,
        Err(e) => {
            return page_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("no randomness for a session: {e}"),
            );
        }
    };
    let cookie = inbox.auth.cookie(&session, SESSION_TTL);
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
        inbox.auth.sign_out(session);
    }
    let cookie = inbox.auth.cookie("", Duration::ZERO);
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
    let Some(caller) = inbox.auth.caller(&headers) else {
        return refused_login();
    };
    let csrf = match &caller {
        Caller::Session(session, _) => inbox.auth.csrf_of(session),
        // A script's forms need no anti-forgery token.
        Caller::Bearer(_) => String::new(),
    };
    // Only a notice this inbox wrote is shown.
    let notice = match (&query.done, &query.tag) {
        (Some(done), Some(tag)) if inbox.auth.same(tag, &inbox.auth.notice_tag(&caller, done)) => {
            Some(done.as_str())
        }
        _ => None,
    };
    match render(&inbox, caller.who(), &csrf, notice).await {
        Ok(html) => Html(html).into_response(),
        Err(e) => page_error(StatusCode::SERVICE_UNAVAILABLE, &e.message),
    }
}

/// A listener on `addr`, and the address it is bound to (the port the system chose for
/// port 0): what `idem ui` and `idem notify` serve on.
pub(crate) async fn listen(
    addr: std::net::SocketAddr,
) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), Failure> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::new(Exit::Usage, format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::new(Exit::Failed, e.to_string()))?;
    Ok((listener, local))
}
